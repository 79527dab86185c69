package nfuse

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits bound what Decode accepts, so that no request can make it use
// much memory or time. The body size is bounded by the caller (Config.MaxBodyBytes).
type Limits struct {
	// MaxDepth bounds element nesting; 0 means DefaultMaxDepth.
	MaxDepth int
	// MaxElements bounds the elements, and separately the attributes, of
	// a request; 0 means DefaultMaxElements.
	MaxElements int
}

// Defaults for Limits. Real requests nest 5 deep and hold a few dozen
// elements.
const (
	DefaultMaxDepth    = 32
	DefaultMaxElements = 10000
)

func (l Limits) withDefaults() Limits {
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxElements <= 0 {
		l.MaxElements = DefaultMaxElements
	}
	return l
}

// DecodeError is a request Decode could not read. Element is the request
// element's name when Decode got as far as seeing it, so that the answer
// can use the matching response element.
type DecodeError struct {
	Element string
	Err     error
}

func (e *DecodeError) Error() string { return "nfuse: decode request: " + e.Err.Error() }
func (e *DecodeError) Unwrap() error { return e.Err }

// ErrNoRequest is a well-formed document without a request element.
var ErrNoRequest = errors.New("no request element")

// Decode reads an NFuse request body as real brokers do: element and
// attribute names in any case, with or without the XML declaration and
// DOCTYPE, in UTF-8 or in ISO-8859-1 or windows-1252 when the declaration
// says so (a body that is not valid UTF-8 and declares nothing else is
// read as ISO-8859-1), with numeric character references, <Nil />
// placeholders and unknown elements, which it ignores, and any protocol
// version. The request element is the root's first child whose name starts
// with "Request" (or the root itself). Errors are *DecodeError.
func Decode(body []byte, lim Limits) (*Request, error) {
	lim = lim.withDefaults()
	text, err := toUTF8(body)
	if err != nil {
		return nil, &DecodeError{Element: sniffRequest(body), Err: err}
	}
	p, err := parseXML(text, lim)
	if err != nil {
		return nil, &DecodeError{Element: sniffRequest(body), Err: err}
	}
	defer p.release()
	t := &p.t
	req := &Request{}
	el := int32(0)
	if root := &t.nodes[0]; strings.EqualFold(root.name, "NFuseProtocol") {
		req.Version = strings.TrimSpace(t.attr(root, "version"))
		el = -1
		for c := root.first; c >= 0; c = t.nodes[c].next {
			if hasPrefixFold(t.nodes[c].name, "Request") {
				el = c
				break
			}
		}
		if el < 0 {
			return nil, &DecodeError{Err: ErrNoRequest}
		}
	} else if !hasPrefixFold(root.name, "Request") {
		return nil, &DecodeError{Err: ErrNoRequest}
	}
	req.Element = t.nodes[el].name
	req.Kind = kindOf(req.Element)
	d := decoder{t: t, req: req}
	d.request(el)
	for _, l := range []*[]string{&req.ServerTypes, &req.ClientTypes, &req.DesiredDetails, &req.Flags, &req.DesiredInfo} {
		if len(*l) == 0 {
			*l = nil
		}
	}
	return req, nil
}

// decoder maps an element tree onto a Request.
type decoder struct {
	t   *tree
	req *Request
}

func (d *decoder) request(el int32) {
	t, r := d.t, d.req
	d.wordLists(el)
	var buf foldBuf
	for c := t.nodes[el].first; c >= 0; c = t.nodes[c].next {
		n := &t.nodes[c]
		switch string(buf.fold(n.name)) {
		case "credentials":
			r.Credentials = d.credentials(c)
		case "clientname":
			r.ClientName = trim(n.text)
		case "clientaddress":
			r.ClientAddress = d.address(n)
		case "serveraddress":
			r.ServerAddress = d.address(n)
		case "deviceid":
			r.DeviceID = trim(n.text)
		case "servertype":
			r.ServerTypes = appendWords(r.ServerTypes, n.text)
		case "clienttype":
			r.ClientTypes = appendWords(r.ClientTypes, n.text)
		case "scope":
			r.Scope = Scope{Traverse: strings.ToLower(trim(t.attr(n, "traverse"))), Type: trim(t.attr(n, "type")), Folder: trim(n.text)}
		case "desireddetails":
			r.DesiredDetails = appendWords(r.DesiredDetails, n.text)
		case "desiredicondata":
			r.DesiredIconData = &IconSpec{Size: atoi(t.attr(n, "size")), BPP: atoi(t.attr(n, "bpp")), Format: strings.ToLower(trim(t.attr(n, "format")))}
		case "appname":
			r.AppName = trim(n.text)
		case "flags":
			r.Flags = appendWords(r.Flags, n.text)
		case "name":
			r.Name = d.name(c)
		case "tickettag":
			r.TicketTag = trim(n.text)
		case "launchref":
			r.LaunchRef = trim(n.text)
		case "desiredinfo":
			r.DesiredInfo = appendWords(r.DesiredInfo, n.text)
		case "sessionids":
			for s := n.first; s >= 0; s = t.nodes[s].next {
				if is(t.nodes[s].name, "SessionId") {
					r.SessionIDs = appendNonEmpty(r.SessionIDs, trim(t.nodes[s].text))
				}
			}
		case "sessionid":
			r.SessionIDs = appendNonEmpty(r.SessionIDs, trim(n.text))
		}
	}
}

// wordLists gives the request's keyword lists room in one array, sized
// by their elements, so that decoding them costs one allocation.
func (d *decoder) wordLists(el int32) {
	t, r := d.t, d.req
	var n [5]int
	lists := [5]*[]string{&r.ServerTypes, &r.ClientTypes, &r.DesiredDetails, &r.Flags, &r.DesiredInfo}
	total := 0
	var buf foldBuf
	for c := t.nodes[el].first; c >= 0; c = t.nodes[c].next {
		i := -1
		switch string(buf.fold(t.nodes[c].name)) {
		case "servertype":
			i = 0
		case "clienttype":
			i = 1
		case "desireddetails":
			i = 2
		case "flags":
			i = 3
		case "desiredinfo":
			i = 4
		}
		if i >= 0 {
			n[i]++
			total++
		}
	}
	if total == 0 {
		return
	}
	arena := make([]string, total)
	for i, l := range lists {
		if n[i] > 0 {
			*l, arena = arena[:0:n[i]], arena[n[i]:]
		}
	}
}

func (d *decoder) credentials(el int32) *Credentials {
	t := d.t
	c := &Credentials{}
	var buf foldBuf
	for i := t.nodes[el].first; i >= 0; i = t.nodes[i].next {
		n := &t.nodes[i]
		switch string(buf.fold(n.name)) {
		case "username":
			c.UserName = trim(n.text)
		case "password":
			// A password keeps its white space; only ctx1 is trimmed.
			c.Password = Password{Encoding: strings.ToLower(trim(t.attr(n, "encoding"))), Value: n.text}
			if c.Password.Encoding == "ctx1" {
				c.Password.Value = trim(n.text)
			}
		case "domain":
			c.Domain, c.DomainType = trim(n.text), trim(t.attr(n, "type"))
		case "id":
			c.IDs = append(c.IDs, ID{Type: strings.ToUpper(trim(t.attr(n, "type"))), Value: trim(n.text)})
		case "anonymoususer":
			c.Anonymous = true
		}
	}
	return c
}

func (d *decoder) address(n *node) Address {
	return Address{Type: strings.ToLower(trim(d.t.attr(n, "addresstype"))), Value: trim(n.text)}
}

func (d *decoder) name(el int32) Name {
	t := d.t
	var nm Name
	var buf foldBuf
	for i := t.nodes[el].first; i >= 0; i = t.nodes[i].next {
		n := &t.nodes[i]
		switch string(buf.fold(n.name)) {
		case "appname":
			nm.AppName = trim(n.text)
		case "servername":
			nm.ServerName = trim(n.text)
		case "serverfarmname":
			nm.ServerFarmName = trim(n.text)
		case "unspecifiedname":
			nm.Unspecified = true
		case "sessionname":
			s := &SessionName{}
			for j := n.first; j >= 0; j = t.nodes[j].next {
				m := &t.nodes[j]
				switch {
				case is(m.name, "InName"):
					s.InName = trim(m.text)
				case is(m.name, "HostId"):
					s.HostID = trim(m.text)
				case is(m.name, "SessionId"):
					s.SessionID = trim(m.text)
				}
			}
			nm.Session = s
		}
	}
	return nm
}

func is(name, want string) bool { return strings.EqualFold(name, want) }

// foldBuf lower-cases element names for a switch without allocating.
type foldBuf [32]byte

// fold returns name in lower case, or nothing for a name too long or not
// ASCII, which no name usher knows is.
func (b *foldBuf) fold(name string) []byte {
	if len(name) > len(b) {
		return nil
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c >= utf8.RuneSelf:
			return nil
		}
		b[i] = c
	}
	return b[:len(name)]
}

// trim drops surrounding XML white space.
func trim(s string) string {
	for len(s) > 0 && isSpace(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isSpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

// appendWords appends the lower-cased words of a keyword element; some
// clients put several in one element, separated by spaces or commas.
func appendWords(list []string, s string) []string {
	s = trim(s)
	if s == "" {
		return list
	}
	if !strings.ContainsAny(s, " \t\r\n,") {
		return append(list, lower(s))
	}
	for w := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\r' || r == '\n' }) {
		list = append(list, lower(w))
	}
	return list
}

func appendNonEmpty(list []string, s string) []string {
	if s == "" {
		return list
	}
	return append(list, s)
}

// lower is strings.ToLower without an allocation for what is already
// lower case, the common case.
func lower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' || c >= utf8.RuneSelf {
			return strings.ToLower(s)
		}
	}
	return s
}

func atoi(s string) int {
	n, err := strconv.Atoi(trim(s))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func hasPrefixFold(s, prefix string) bool {
	_, ok := cutPrefixFold(s, prefix)
	return ok
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

// toUTF8 returns the body as UTF-8 text, converted from the encoding its
// XML declaration names (or a UTF-16 byte order mark implies).
func toUTF8(body []byte) (string, error) {
	switch {
	case bytes.HasPrefix(body, []byte{0xEF, 0xBB, 0xBF}):
		body = body[3:]
	case bytes.HasPrefix(body, []byte{0xFF, 0xFE}):
		return fromUTF16(body[2:], false)
	case bytes.HasPrefix(body, []byte{0xFE, 0xFF}):
		return fromUTF16(body[2:], true)
	}
	enc := declaredEncoding(body)
	switch {
	case len(enc) == 0 || isAnyFold(enc, "utf-8", "utf8"):
		if utf8.Valid(body) {
			return string(body), nil
		}
		return fromLatin1(body, nil), nil
	case isAnyFold(enc, "iso-8859-1", "iso8859-1", "iso_8859-1", "latin1", "latin-1", "l1", "us-ascii", "ascii"):
		return fromLatin1(body, nil), nil
	case isAnyFold(enc, "windows-1252", "cp1252"):
		return fromLatin1(body, &windows1252), nil
	case isAnyFold(enc, "utf-16", "utf-16le", "utf-16be"):
		return "", errors.New("a UTF-16 declaration without a byte order mark")
	default:
		return "", fmt.Errorf("unsupported encoding %q", enc)
	}
}

func isAnyFold(b []byte, names ...string) bool {
	for _, n := range names {
		if len(b) == len(n) && strings.EqualFold(string(b), n) {
			return true
		}
	}
	return false
}

// declaredEncoding returns the encoding a leading XML declaration names,
// or nothing.
func declaredEncoding(body []byte) []byte {
	body = bytes.TrimLeft(body, " \t\r\n")
	if len(body) < 5 || !bytes.EqualFold(body[:5], []byte("<?xml")) {
		return nil
	}
	end := bytes.Index(body, []byte("?>"))
	if end < 0 {
		return nil
	}
	decl := body[5:end]
	for {
		i := bytes.IndexAny(decl, "eE")
		if i < 0 {
			return nil
		}
		decl = decl[i:]
		if len(decl) >= 8 && bytes.EqualFold(decl[:8], []byte("encoding")) {
			break
		}
		decl = decl[1:]
	}
	rest := bytes.TrimLeft(decl[len("encoding"):], " \t\r\n")
	if len(rest) == 0 || rest[0] != '=' {
		return nil
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	if len(rest) == 0 || (rest[0] != '"' && rest[0] != '\'') {
		return nil
	}
	q := rest[0]
	rest = rest[1:]
	j := bytes.IndexByte(rest, q)
	if j < 0 {
		return nil
	}
	return bytes.TrimSpace(rest[:j])
}

// fromLatin1 converts ISO-8859-1, or with high the windows-1252 code page,
// to UTF-8. ASCII needs no conversion.
func fromLatin1(b []byte, high *[32]rune) string {
	ascii := true
	for _, c := range b {
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return string(b)
	}
	out := make([]byte, 0, len(b)+len(b)/4)
	for _, c := range b {
		r := rune(c)
		if high != nil && c >= 0x80 && c < 0xA0 {
			r = high[c-0x80]
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out)
}

// windows1252 maps 0x80..0x9F of windows-1252; the rest is ISO-8859-1.
// Undefined bytes map to themselves, as the WHATWG encoding standard says.
var windows1252 = [32]rune{
	0x20AC, 0x81, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160, 0x2039, 0x0152, 0x8D, 0x017D, 0x8F,
	0x90, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x9D, 0x017E, 0x0178,
}

func fromUTF16(b []byte, bigEndian bool) (string, error) {
	if len(b)%2 != 0 {
		return "", errors.New("UTF-16 body of odd length")
	}
	units := make([]uint16, len(b)/2)
	for i := range units {
		if bigEndian {
			units[i] = uint16(b[2*i])<<8 | uint16(b[2*i+1])
		} else {
			units[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
		}
	}
	return string(utf16.Decode(units)), nil
}

// sniffRequest finds the name of the first element that starts with
// "Request" in what may be a malformed or truncated body, so that an error
// answer can use the matching response element. It returns "" when there
// is none in the first few kilobytes.
func sniffRequest(body []byte) string {
	body = body[:min(len(body), 4096)]
	for {
		i := bytes.IndexByte(body, '<')
		if i < 0 {
			return ""
		}
		body = body[i+1:]
		if j := bytes.IndexByte(body, ':'); j >= 0 && j < 16 && isNameBytes(body[:j]) {
			body = body[j+1:] // a namespace prefix
		}
		if len(body) >= 7 && bytes.EqualFold(body[:7], []byte("Request")) {
			n := 7
			for n < len(body) && n < 64 && isASCIILetter(body[n]) {
				n++
			}
			return string(body[:n])
		}
	}
}

func isNameBytes(b []byte) bool {
	for _, c := range b {
		if !isASCIILetter(c) {
			return false
		}
	}
	return len(b) > 0
}

func isASCIILetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
