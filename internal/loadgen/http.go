package loadgen

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// NewClient returns an HTTP client made for load: keep-alive connections,
// up to conns of them idle per host (one per virtual client), no
// compression, no redirects followed, and no timeout of its own (each
// transaction's context bounds it).
func NewClient(conns int) *http.Client { return NewClientTLS(conns, nil) }

// NewClientTLS is NewClient verifying https servers with cfg (nil: Go's
// defaults, the system roots), over HTTP/1.1 as NFuse clients speak.
func NewClientTLS(conns int, cfg *tls.Config) *http.Client {
	tr := &http.Transport{
		TLSClientConfig:     cfg,
		Proxy:               nil, // a load test goes where it is told
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: max(conns, 2),
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		// Answers run to hundreds of KB (an enumeration of 400
		// applications is 110 KB): read them in a few system calls, not
		// in net/http's default 4 KB, so that the load generator leaves
		// the CPU it shares with the system under test to it.
		ReadBufferSize: 64 << 10,
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// Template is a request body or URL with placeholders, filled in per
// transaction:
//
//	{{user}} {{password}} {{domain}}  the transaction's credential (Users.At(i))
//	{{encoding}}                      the password's encoding: cleartext or ctx1
//	{{app}}                           the transaction's application (Apps[i mod len])
//	{{i}}                             the transaction's number
//
// The password is encoded as asked; values are escaped for the body's
// syntax (XML for NFuse).
type Template struct {
	parts []string // literal, name, literal, name, ..., literal
}

var placeholder = regexp.MustCompile(`\{\{\s*(user|password|domain|encoding|app|i)\s*\}\}`)

// ParseTemplate splits s at its placeholders.
func ParseTemplate(s string) Template {
	var t Template
	last := 0
	for _, m := range placeholder.FindAllStringSubmatchIndex(s, -1) {
		t.parts = append(t.parts, s[last:m[0]], s[m[2]:m[3]])
		last = m[1]
	}
	t.parts = append(t.parts, s[last:])
	return t
}

// HasPlaceholders reports whether the template holds any placeholder.
func (t Template) HasPlaceholders() bool { return len(t.parts) > 1 }

// Uses reports whether the template holds the named placeholder.
func (t Template) Uses(name string) bool {
	for k := 1; k < len(t.parts); k += 2 {
		if t.parts[k] == name {
			return true
		}
	}
	return false
}

// Vars are a transaction's values for a Template.
type Vars struct {
	Cred     Credential
	Encoding string
	App      string
	I        int64
}

// Expand fills the template in, each value passed through escape (nil: as is).
func (t Template) Expand(v Vars, escape func(string) string) string {
	if len(t.parts) == 1 {
		return t.parts[0]
	}
	if escape == nil {
		escape = func(s string) string { return s }
	}
	var b strings.Builder
	for k, p := range t.parts {
		if k%2 == 0 {
			b.WriteString(p)
			continue
		}
		switch p {
		case "user":
			b.WriteString(escape(v.Cred.User))
		case "password":
			b.WriteString(escape(encodePassword(v.Cred.Password, v.Encoding)))
		case "domain":
			b.WriteString(escape(v.Cred.Domain))
		case "encoding":
			b.WriteString(escape(cmp.Or(v.Encoding, Cleartext)))
		case "app":
			b.WriteString(escape(v.App))
		case "i":
			b.WriteString(strconv.FormatInt(v.I, 10))
		}
	}
	return b.String()
}

func xmlEscape(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// maxBody is the most of an answer a target reads to check it; the rest
// is discarded unread.
const maxBody = 16 << 20

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// send performs req and returns the status and, with keep, the body (in
// a pooled buffer the caller returns with putBuf). Transport errors come
// back as *Error of their kind.
func send(client *http.Client, req *http.Request, keep bool) (int, *bytes.Buffer, error) {
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, &Error{Kind: KindOf(err), Err: err}
	}
	defer resp.Body.Close()
	if !keep {
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return resp.StatusCode, nil, &Error{Kind: KindOf(err), Err: fmt.Errorf("read answer: %w", err)}
		}
		return resp.StatusCode, nil, nil
	}
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, maxBody)); err != nil {
		putBuf(buf)
		return resp.StatusCode, nil, &Error{Kind: KindOf(err), Err: fmt.Errorf("read answer: %w", err)}
	}
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, buf, nil
}

func putBuf(b *bytes.Buffer) {
	if b != nil && b.Cap() <= 4*maxBody {
		bufPool.Put(b)
	}
}

// Request is any HTTP request as a Target. URL and Body are templates
// (placeholders as in Template; no escaping). An answer succeeds when its
// status is in Status (default: any 2xx) and, when set, its body contains
// BodyContains and matches BodyMatch; otherwise it fails with kind
// http-STATUS or body-mismatch.
type Request struct {
	Client       *http.Client
	Method       string
	URL          string
	Header       http.Header
	Body         string
	Users        Users
	Encoding     string // of {{password}}: cleartext (default) or ctx1
	Apps         []string
	Status       []int
	BodyContains string
	BodyMatch    *regexp.Regexp

	once      sync.Once
	url, body Template
}

func (r *Request) init() {
	r.once.Do(func() {
		r.url, r.body = ParseTemplate(r.URL), ParseTemplate(r.Body)
		if r.Method == "" {
			r.Method = http.MethodGet
		}
		if r.Client == nil {
			r.Client = NewClient(100)
		}
	})
}

func vars(users Users, apps []string, encoding string, i int64) Vars {
	v := Vars{Cred: users.At(i), Encoding: encoding, I: i}
	if len(apps) > 0 {
		v.App = apps[i%int64(len(apps))]
	}
	return v
}

// Do implements Target.
func (r *Request) Do(ctx context.Context, i int64) error {
	r.init()
	v := vars(r.Users, r.Apps, r.Encoding, i)
	var body io.Reader
	if r.Body != "" {
		body = strings.NewReader(r.body.Expand(v, nil))
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, r.url.Expand(v, nil), body)
	if err != nil {
		return &Error{Kind: KindOther, Err: err}
	}
	for k, vs := range r.Header {
		req.Header[k] = vs
	}
	keep := r.BodyContains != "" || r.BodyMatch != nil
	code, buf, err := send(r.Client, req, keep)
	defer putBuf(buf)
	if err != nil {
		return err
	}
	if !r.statusOK(code) {
		return Errorf(StatusKind(code), "%s %s: status %d", r.Method, req.URL.Path, code)
	}
	if buf != nil {
		if r.BodyContains != "" && !bytes.Contains(buf.Bytes(), []byte(r.BodyContains)) {
			return Errorf(KindMismatch, "answer lacks %q", r.BodyContains)
		}
		if r.BodyMatch != nil && !r.BodyMatch.Match(buf.Bytes()) {
			return Errorf(KindMismatch, "answer does not match %s", r.BodyMatch)
		}
	}
	return nil
}

func (r *Request) statusOK(code int) bool {
	if len(r.Status) == 0 {
		return code >= 200 && code < 300
	}
	for _, s := range r.Status {
		if s == code {
			return true
		}
	}
	return false
}
