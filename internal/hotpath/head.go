package hotpath

import (
	"bytes"
	"net/http"
	"net/textproto"
	"strconv"
)

// head is a request head that the lean loop accepts: the subset of
// HTTP/1.1 that well-behaved clients send on the hot paths. Anything
// outside it is left to net/http, unread, so that framing and errors stay
// net/http's.
type head struct {
	method, target, path, query string
	header                      http.Header
	host                        string
	contentLength               int64
	close                       bool
	// size is the length of the head, its final empty line included.
	size int

	// strs interns the target and the header values of a connection's
	// requests, which a client mostly repeats: a repeated head then
	// allocates no string. vals backs the header's value slices, one
	// element each (capped, so that a handler's append copies).
	strs map[string]string
	vals []string

	// last is the head last parsed, empty unless it may be reused: h's
	// fields hold its parse, keys are its header names in the order of
	// vals, and memo is a copy of vals, as a handler may have changed
	// them. A repeated head is then not parsed again (see parseHead).
	last       []byte
	keys, memo []string
	twice      bool // a header name came twice in the head last parsed
}

// maxReused bounds the head a connection keeps to compare the next one
// with.
const maxReused = 2 << 10

// maxInterned bounds a connection's interned strings.
const maxInterned = 32

// intern returns b as a string, the same one as for the same bytes
// before.
func (h *head) intern(b []byte) string {
	if s, ok := h.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(s) > 256 {
		return s
	}
	if h.strs == nil || len(h.strs) >= maxInterned {
		h.strs = make(map[string]string, maxInterned)
	}
	h.strs[s] = s
	return s
}

// headEnd returns the length of the head at the start of b, up to and
// including the CRLF CRLF that ends it, or -1 when b does not hold it all.
// bare is set when a line of b ends in a line feed alone, a head for
// net/http to judge.
//
// from is where to look for line ends: b[:from] must be bytes headEnd
// has seen, as a prefix of b, end nothing and be bare nowhere. A head
// that comes a few bytes at a time is then scanned once, not once a
// read.
func headEnd(b []byte, from int) (n int, bare bool) {
	for i := from; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1, false
		}
		i += j
		if i == 0 || b[i-1] != '\r' {
			return -1, true
		}
		if i >= 3 && b[i-2] == '\n' {
			return i + 1, false
		}
		i++
	}
}

// parseHead parses a request head of exactly n bytes (as headEnd found)
// into h, reusing h.header. It returns false, with h unusable, for anything
// but plain HTTP/1.1 with CRLF line ends, token header names, no folded or
// control characters, a Host header, and a body framed by at most one
// Content-Length: no Transfer-Encoding, Expect, Upgrade or query escapes
// in the path.
//
// A head of the same bytes as the one h holds the parse of is not parsed
// again: only its header is made anew, as the handler of the last
// request may have changed it.
func parseHead(b []byte, h *head) bool {
	if len(h.last) > 0 && bytes.Equal(b, h.last) {
		clear(h.header)
		copy(h.vals, h.memo)
		for i, k := range h.keys {
			if k != "Host" {
				h.header[k] = h.vals[i : i+1 : i+1]
			}
		}
		return true
	}
	h.last = h.last[:0]
	if !parseNew(b, h) {
		return false
	}
	// A header given twice (rare) has a value slice of its own: its head
	// is parsed each time.
	if len(b) <= maxReused && !h.twice {
		h.last = append(h.last, b...)
		h.memo = append(h.memo[:0], h.vals...)
	}
	return true
}

func parseNew(b []byte, h *head) bool {
	line, rest, ok := bytes.Cut(b, crlf)
	if !ok {
		return false
	}
	method, line, ok := bytes.Cut(line, sp)
	if !ok || len(method) == 0 || !isToken(method) {
		return false
	}
	target, proto, ok := bytes.Cut(line, sp)
	if !ok || string(proto) != "HTTP/1.1" || len(target) == 0 || target[0] != '/' {
		return false
	}
	for _, c := range target {
		// Plain printable ASCII only: escapes and fragments go to net/http,
		// whose path cleaning and unescaping the router relies on.
		if c <= ' ' || c >= 0x7f || c == '%' || c == '#' {
			return false
		}
	}
	h.method = methodString(method)
	h.target = h.intern(target)
	h.path, h.query = h.target, ""
	if i := bytes.IndexByte(target, '?'); i >= 0 {
		h.path, h.query = h.target[:i], h.target[i+1:]
	}
	clear(h.header)
	h.vals, h.keys, h.twice = h.vals[:0], h.keys[:0], false
	h.host, h.contentLength, h.close = "", 0, false
	seenHost, seenLength := false, false
	for {
		line, rest, ok = bytes.Cut(rest, crlf)
		if !ok {
			return false
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, colon)
		if !ok || len(name) == 0 || !isToken(name) {
			return false
		}
		value = bytes.Trim(value, " \t")
		for _, c := range value {
			if c < ' ' && c != '\t' || c == 0x7f {
				return false
			}
		}
		key := canonicalKey(name)
		v := h.intern(value)
		switch key {
		case "Host":
			if seenHost || !isHost(value) {
				return false
			}
			seenHost, h.host = true, v
		case "Content-Length":
			if seenLength || len(value) == 0 || len(value) > 18 {
				return false
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || value[0] == '+' || value[0] == '-' {
				return false
			}
			seenLength, h.contentLength = true, n
		case "Transfer-Encoding", "Expect", "Upgrade", "Te", "Trailer":
			return false
		case "Connection":
			switch {
			case asciiEqualFold(v, "close"):
				h.close = true
			case asciiEqualFold(v, "keep-alive"):
			default:
				return false
			}
		}
		if vs, ok := h.header[key]; ok {
			h.header[key], h.twice = append(vs, v), true
		} else {
			h.vals, h.keys = append(h.vals, v), append(h.keys, key)
			i := len(h.vals) - 1
			h.header[key] = h.vals[i : i+1 : i+1]
		}
	}
	if !seenHost || len(rest) != 0 {
		return false
	}
	delete(h.header, "Host") // net/http keeps it in Request.Host only
	h.size = len(b)
	return true
}

var (
	crlf  = []byte("\r\n")
	sp    = []byte(" ")
	colon = []byte(":")
)

// methodString returns the common methods without allocating.
func methodString(b []byte) string {
	switch string(b) {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodPost:
		return http.MethodPost
	case http.MethodHead:
		return http.MethodHead
	}
	return string(b)
}

// commonKeys are the canonical names of the headers hot requests carry,
// looked up without allocating.
var commonKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Connection",
		"Content-Length", "Content-Type", "Cookie", "Host", "User-Agent", "X-Citrix-Isusinghttps",
		"X-Forwarded-For", "Origin", "Referer", "Cache-Control", "Pragma"} {
		m[k] = k
	}
	return m
}()

// canonicalKey returns the canonical form of a header name that isToken
// accepted.
func canonicalKey(name []byte) string {
	if k, ok := commonKeys[string(name)]; ok {
		return k
	}
	return textproto.CanonicalMIMEHeaderKey(string(name))
}

// isToken reports whether b is an RFC 9110 token.
func isToken(b []byte) bool {
	for _, c := range b {
		if int(c) >= len(tokenChars) || !tokenChars[c] {
			return false
		}
	}
	return true
}

var tokenChars = func() [128]bool {
	var t [128]bool
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// isHost reports whether b is a plain host[:port]: letters, digits and
// "-._:[]". Others, which net/http may take or refuse, go to net/http.
func isHost(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if int(c) >= len(hostChars) || !hostChars[c] {
			return false
		}
	}
	return true
}

var hostChars = func() [128]bool {
	var t [128]bool
	for c := range len(t) {
		t[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
	}
	for _, c := range "-._:[]" {
		t[c] = true
	}
	return t
}()

// asciiEqualFold reports whether s equals the lower-case ASCII word t in
// any case.
func asciiEqualFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != t[i] {
			return false
		}
	}
	return true
}
