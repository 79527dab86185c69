package loadgen

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
)

// NFuse request bodies. Their credentials are placeholders (see Template).
const (
	// AppDataRequest is the IMA/FMA test's enumeration, as its WCAT scenario sent
	// it to a Citrix XML broker: every application with its permissions.
	AppDataRequest = `<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE NFuseProtocol SYSTEM "NFuse.dtd"><NFuseProtocol version="5.4"><RequestAppData><Scope traverse="subtree"></Scope><DesiredDetails>permissions</DesiredDetails><ServerType>all</ServerType><ClientType>ica30</ClientType><ClientType>content</ClientType><Credentials><UserName>{{user}}</UserName><Password encoding="{{encoding}}">{{password}}</Password><Domain type="NT">{{domain}}</Domain></Credentials><ClientName>LOADTESTER</ClientName><ClientAddress addresstype="dot">10.10.10.10</ClientAddress></RequestAppData></NFuseProtocol>`

	// AddressRequest launches {{app}}: the broker picks a host and answers
	// with its address and a ticket.
	AddressRequest = `<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE NFuseProtocol SYSTEM "NFuse.dtd"><NFuseProtocol version="5.4"><RequestAddress><Flags>alt-addr</Flags><Name><AppName>{{app}}</AppName></Name><ClientName>LOADTESTER</ClientName><ClientAddress addresstype="dot">10.10.10.10</ClientAddress><ServerAddress addresstype="dot-port"></ServerAddress><Credentials><UserName>{{user}}</UserName><Password encoding="{{encoding}}">{{password}}</Password><Domain type="NT">{{domain}}</Domain></Credentials><ClientType>ica30</ClientType></RequestAddress></NFuseProtocol>`
)

// NFuse is a Citrix XML Service request as a Target: POST Body (a
// template; default AppDataRequest) as text/xml to URL, usually
// http://broker/scripts/wpnbr.dll. A body without placeholders has the
// text of its UserName, Password and Domain elements replaced by each
// transaction's credential, so a captured request (the IMA/FMA test's WCAT body)
// works as it is.
//
// An answer succeeds when it is 200 OK, a whole NFuseProtocol document,
// holds the Response element matching the request (ResponseAppData for
// RequestAppData) and no ErrorId; and, when set, contains Expect (say,
// "<TicketTag"). Failures are of kind http-STATUS, nfuse-ERRORID (an
// ErrorId such as retry-required or failed-credentials) or body-mismatch.
type NFuse struct {
	Client   *http.Client
	URL      string
	Body     string
	Users    Users
	Encoding string // of passwords: ctx1 (default) or cleartext
	Apps     []string
	Expect   string

	once     sync.Once
	body     Template
	response []byte // "<ResponseAppData"
	err      error
}

var (
	credElements = []struct {
		re   *regexp.Regexp
		with string
	}{
		{regexp.MustCompile(`(?is)(<UserName>)[^<]*(</UserName>)`), "${1}{{user}}${2}"},
		{regexp.MustCompile(`(?is)<Password(\s[^>]*)?>[^<]*</Password>`), `<Password encoding="{{encoding}}">{{password}}</Password>`},
		{regexp.MustCompile(`(?is)(<Domain(?:\s[^>]*)?>)[^<]*(</Domain>)`), "${1}{{domain}}${2}"},
	}
	requestType = regexp.MustCompile(`<Request([A-Za-z]+)`)
	errorID     = regexp.MustCompile(`(?is)<ErrorId>\s*([^<]*?)\s*</ErrorId>`)
)

// CredentialTemplate turns a captured NFuse body into a template: the text
// of its UserName, Password and Domain elements becomes placeholders. A
// body that already has placeholders is returned as it is.
func CredentialTemplate(body string) string {
	if ParseTemplate(body).HasPlaceholders() {
		return body
	}
	for _, c := range credElements {
		body = c.re.ReplaceAllString(body, c.with)
	}
	return body
}

func (n *NFuse) init() error {
	n.once.Do(func() {
		body := cmp.Or(n.Body, AppDataRequest)
		if len(n.Users) > 0 {
			body = CredentialTemplate(body)
		}
		n.body = ParseTemplate(body)
		if n.body.Uses("user") && len(n.Users) == 0 {
			n.err = fmt.Errorf("the NFuse body has credential placeholders but there are no users")
		}
		if n.body.Uses("app") && len(n.Apps) == 0 {
			n.err = fmt.Errorf("the NFuse body has an {{app}} placeholder but there are no applications")
		}
		if m := requestType.FindStringSubmatch(body); m != nil {
			n.response = []byte("<Response" + m[1])
		}
		if n.Encoding == "" {
			n.Encoding = Ctx1
		}
		if n.Client == nil {
			n.Client = NewClient(100)
		}
	})
	return n.err
}

// Check reports whether the target is usable: its body and users agree.
func (n *NFuse) Check() error { return n.init() }

// Do implements Target.
func (n *NFuse) Do(ctx context.Context, i int64) error {
	if err := n.init(); err != nil {
		return &Error{Kind: KindOther, Err: err}
	}
	body := n.body.Expand(vars(n.Users, n.Apps, n.Encoding, i), xmlEscape)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.URL, strings.NewReader(body))
	if err != nil {
		return &Error{Kind: KindOther, Err: err}
	}
	req.Header.Set("Content-Type", "text/xml")
	code, buf, err := send(n.Client, req, true)
	defer putBuf(buf)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return Errorf(StatusKind(code), "status %d", code)
	}
	return n.check(buf.Bytes())
}

func (n *NFuse) check(b []byte) error {
	if k := bytes.Index(b, []byte("ErrorId>")); k >= 0 {
		if m := errorID.FindSubmatch(b[max(k-1, 0):min(len(b), k+512)]); m != nil {
			id := strings.ToLower(string(m[1]))
			if id == "" {
				id = "unspecified"
			}
			return Errorf(NFuseKind(id), "ErrorId %s", id)
		}
	}
	if !bytes.HasSuffix(bytes.TrimSpace(b), []byte("</NFuseProtocol>")) {
		return Errorf(KindMismatch, "answer is not a whole NFuseProtocol document (%d bytes)", len(b))
	}
	if n.response != nil && !bytes.Contains(b, n.response) {
		return Errorf(KindMismatch, "answer lacks %s>", n.response)
	}
	if n.Expect != "" && !bytes.Contains(b, []byte(n.Expect)) {
		return Errorf(KindMismatch, "answer lacks %q", n.Expect)
	}
	return nil
}
