package nfuse

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// This file is a small, lenient XML reader for NFuse requests. It builds a
// tree of elements from a UTF-8 string and keeps names as sent (callers
// compare them case-insensitively), skips the declaration, DOCTYPE,
// comments and processing instructions, decodes the five predefined entities
// and numeric character references, and reads CDATA sections as text. A "&"
// that starts no reference is kept as text, as the real brokers do for
// clients that do not escape (nmap's citrix-brute-xml sends passwords raw).
// It needs no allocation per element: element and attribute names and
// unescaped text are substrings of the input.

// node is an element.
type node struct {
	name string // local name as sent, without a namespace prefix
	// text is the element's own character data, unescaped.
	text        string
	attrs       [2]int32 // range in tree.attrs
	first, next int32    // first child, next sibling; -1 for none
}

type attr struct{ name, value string }

// tree is a parsed document; nodes[0] is the root element.
type tree struct {
	nodes []node
	attrs []attr
}

// syntaxError is malformed XML, with the byte offset where it was found.
type syntaxError struct {
	offset int
	msg    string
}

func (e *syntaxError) Error() string { return fmt.Sprintf("xml: %s at offset %d", e.msg, e.offset) }

type limitError struct{ msg string }

func (e *limitError) Error() string { return "xml: " + e.msg }

type parser struct {
	s   string
	pos int
	lim Limits
	t   tree
	// open is the stack of open elements; last[i] is the last child of
	// open[i] so far.
	open, last []int32
	// rootDone is set once the root element has closed.
	rootDone bool
	// catNode is the element whose text is being joined in catBuf, or -1.
	catNode int32
	catBuf  []byte
}

// parsers are reused: a tree holds no reference to its input once the
// request is decoded, since strings are substrings of the input or copies.
var parsers = sync.Pool{New: func() any { return &parser{} }}

// parseXML parses s into a tree. The caller must release the parser.
func parseXML(s string, lim Limits) (*parser, error) {
	p := parsers.Get().(*parser)
	p.s, p.pos, p.lim, p.rootDone, p.catNode = s, 0, lim, false, -1
	if err := p.parse(); err != nil {
		p.release()
		return nil, err
	}
	return p, nil
}

// release returns the parser to the pool, unless a big request grew it.
func (p *parser) release() {
	if cap(p.t.nodes) > 4096 || cap(p.t.attrs) > 4096 || cap(p.catBuf) > 64<<10 {
		return
	}
	clear(p.t.nodes)
	clear(p.t.attrs)
	p.t.nodes, p.t.attrs = p.t.nodes[:0], p.t.attrs[:0]
	p.open, p.last, p.catBuf = p.open[:0], p.last[:0], p.catBuf[:0]
	p.s = ""
	parsers.Put(p)
}

func (p *parser) errorf(format string, args ...any) error {
	return &syntaxError{offset: p.pos, msg: fmt.Sprintf(format, args...)}
}

func (p *parser) parse() error {
	for p.pos < len(p.s) {
		i := strings.IndexByte(p.s[p.pos:], '<')
		if i < 0 {
			i = len(p.s) - p.pos
		}
		if i > 0 {
			if err := p.charData(p.s[p.pos : p.pos+i]); err != nil {
				return err
			}
			p.pos += i
			continue
		}
		rest := p.s[p.pos:]
		var err error
		switch {
		case strings.HasPrefix(rest, "<!--"):
			err = p.skipPast("-->", 4)
		case strings.HasPrefix(rest, "<![CDATA["):
			err = p.cdata()
		case strings.HasPrefix(rest, "<!"):
			err = p.directive()
		case strings.HasPrefix(rest, "<?"):
			err = p.skipPast("?>", 2)
		case strings.HasPrefix(rest, "</"):
			err = p.endTag()
		default:
			err = p.startTag()
		}
		if err != nil {
			return err
		}
	}
	switch {
	case len(p.open) > 0:
		return p.errorf("unexpected end of input inside <%s>", p.t.nodes[p.open[len(p.open)-1]].name)
	case len(p.t.nodes) == 0:
		return p.errorf("no element")
	}
	return nil
}

// skipPast moves past the next end marker, looking from skip bytes on.
func (p *parser) skipPast(end string, skip int) error {
	i := strings.Index(p.s[p.pos+skip:], end)
	if i < 0 {
		return p.errorf("unterminated %q", p.s[p.pos:p.pos+skip])
	}
	p.pos += skip + i + len(end)
	return nil
}

// directive skips <!DOCTYPE ...> and other declarations, with their
// quoted strings and internal subset.
func (p *parser) directive() error {
	depth := 0
	var quote byte
	for i := p.pos + 2; i < len(p.s); i++ {
		c := p.s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '[':
			depth++
		case c == ']':
			depth--
		case c == '>' && depth <= 0:
			p.pos = i + 1
			return nil
		}
	}
	return p.errorf("unterminated declaration")
}

func (p *parser) cdata() error {
	start := p.pos + len("<![CDATA[")
	i := strings.Index(p.s[start:], "]]>")
	if i < 0 {
		return p.errorf("unterminated CDATA section")
	}
	if len(p.open) == 0 {
		return p.errorf("CDATA outside the root element")
	}
	p.appendText(p.s[start : start+i])
	p.pos = start + i + 3
	return nil
}

// charData adds text to the open element; outside the root only white
// space may appear.
func (p *parser) charData(raw string) error {
	if len(p.open) == 0 {
		if strings.TrimLeft(raw, " \t\r\n") != "" {
			return p.errorf("text outside the root element")
		}
		return nil
	}
	text, err := unescape(raw)
	if err != nil {
		return p.errorf("%v", err)
	}
	p.appendText(text)
	return nil
}

// appendText adds character data to the innermost open element. Only
// elements without child elements keep text: NFuse has no mixed content,
// and dropping it keeps the cost linear however the text is split.
// Adjacent pieces (split by comments or CDATA) are joined in catBuf and
// stored when the element's text is complete.
func (p *parser) appendText(text string) {
	idx := p.open[len(p.open)-1]
	n := &p.t.nodes[idx]
	switch {
	case n.first >= 0 || text == "":
	case idx == p.catNode:
		p.catBuf = append(p.catBuf, text...)
	case n.text == "":
		n.text = text
	default:
		p.flushText()
		p.catNode = idx
		p.catBuf = append(append(p.catBuf[:0], n.text...), text...)
	}
}

// flushText stores the joined text of catNode.
func (p *parser) flushText() {
	if p.catNode >= 0 {
		p.t.nodes[p.catNode].text = string(p.catBuf)
		p.catNode = -1
	}
}

func (p *parser) startTag() error {
	if p.rootDone {
		return p.errorf("a second root element")
	}
	if len(p.t.nodes) >= p.lim.MaxElements {
		return &limitError{fmt.Sprintf("more than %d elements", p.lim.MaxElements)}
	}
	if len(p.open) >= p.lim.MaxDepth {
		return &limitError{fmt.Sprintf("elements nested deeper than %d", p.lim.MaxDepth)}
	}
	p.flushText()
	p.pos++ // '<'
	name, err := p.name()
	if err != nil {
		return err
	}
	idx := int32(len(p.t.nodes))
	n := node{name: localName(name), first: -1, next: -1}
	n.attrs[0] = int32(len(p.t.attrs))
	selfClosing := false
	for {
		p.skipSpace()
		if p.pos >= len(p.s) {
			return p.errorf("unterminated tag <%s>", name)
		}
		if c := p.s[p.pos]; c == '>' {
			p.pos++
			break
		} else if c == '/' {
			if p.pos+1 < len(p.s) && p.s[p.pos+1] == '>' {
				p.pos += 2
				selfClosing = true
				break
			}
			return p.errorf("unexpected '/' in tag <%s>", name)
		}
		if err := p.attribute(); err != nil {
			return err
		}
	}
	n.attrs[1] = int32(len(p.t.attrs))
	p.t.nodes = append(p.t.nodes, n)
	if k := len(p.open); k > 0 {
		parent := p.open[k-1]
		if prev := p.last[k-1]; prev >= 0 {
			p.t.nodes[prev].next = idx
		} else {
			p.t.nodes[parent].first = idx
			p.t.nodes[parent].text = "" // no mixed content
		}
		p.last[k-1] = idx
	}
	if selfClosing {
		p.rootDone = len(p.open) == 0
		return nil
	}
	p.open = append(p.open, idx)
	p.last = append(p.last, -1)
	return nil
}

func (p *parser) attribute() error {
	name, err := p.name()
	if err != nil {
		return err
	}
	p.skipSpace()
	if p.pos >= len(p.s) || p.s[p.pos] != '=' {
		// A name without a value, as HTML allows.
		p.t.attrs = append(p.t.attrs, attr{name: localName(name)})
		return nil
	}
	p.pos++
	p.skipSpace()
	if p.pos >= len(p.s) {
		return p.errorf("attribute %q without a value", name)
	}
	var raw string
	if q := p.s[p.pos]; q == '"' || q == '\'' {
		end := strings.IndexByte(p.s[p.pos+1:], q)
		if end < 0 {
			return p.errorf("unterminated value of attribute %q", name)
		}
		raw = p.s[p.pos+1 : p.pos+1+end]
		p.pos += end + 2
	} else { // unquoted, as HTML allows
		start := p.pos
		for p.pos < len(p.s) && !isSpace(p.s[p.pos]) && p.s[p.pos] != '>' && !strings.HasPrefix(p.s[p.pos:], "/>") {
			p.pos++
		}
		raw = p.s[start:p.pos]
	}
	if strings.IndexByte(raw, '<') >= 0 {
		return p.errorf("'<' in the value of attribute %q", name)
	}
	value, err := unescape(raw)
	if err != nil {
		return p.errorf("%v", err)
	}
	if len(p.t.attrs) >= p.lim.MaxElements {
		return &limitError{fmt.Sprintf("more than %d attributes", p.lim.MaxElements)}
	}
	p.t.attrs = append(p.t.attrs, attr{name: localName(name), value: value})
	return nil
}

func (p *parser) endTag() error {
	p.flushText()
	p.pos += 2
	name, err := p.name()
	if err != nil {
		return err
	}
	p.skipSpace()
	if p.pos >= len(p.s) || p.s[p.pos] != '>' {
		return p.errorf("unterminated end tag </%s>", name)
	}
	p.pos++
	k := len(p.open)
	if k == 0 {
		return p.errorf("end tag </%s> without a start tag", name)
	}
	if open := p.t.nodes[p.open[k-1]].name; !strings.EqualFold(open, localName(name)) {
		return p.errorf("end tag </%s> closes <%s>", name, open)
	}
	p.open, p.last = p.open[:k-1], p.last[:k-1]
	p.rootDone = k == 1
	return nil
}

// name reads an element or attribute name.
func (p *parser) name() (string, error) {
	start := p.pos
	for p.pos < len(p.s) && !endsName[p.s[p.pos]] {
		p.pos++
	}
	name := p.s[start:p.pos]
	if name == "" {
		return "", p.errorf("missing name")
	}
	if c := name[0]; c == '-' || c == '.' || ('0' <= c && c <= '9') {
		return "", p.errorf("invalid name %q", name)
	}
	return name, nil
}

func (p *parser) skipSpace() {
	for p.pos < len(p.s) && isSpace(p.s[p.pos]) {
		p.pos++
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// endsName marks the bytes that end a name.
var endsName = [256]bool{' ': true, '\t': true, '\r': true, '\n': true, '>': true, '/': true, '=': true, '<': true, '"': true, '\'': true}

// localName drops a namespace prefix.
func localName(name string) string {
	if i := strings.LastIndexByte(name, ':'); i >= 0 && i < len(name)-1 {
		return name[i+1:]
	}
	return name
}

// unescape decodes entity and character references. A "&" that starts no
// known reference stays as it is.
func unescape(s string) (string, error) {
	i := strings.IndexByte(s, '&')
	if i < 0 {
		return s, nil
	}
	b := make([]byte, 0, len(s))
	for i >= 0 {
		b = append(b, s[:i]...)
		s = s[i:]
		end := strings.IndexByte(s, ';')
		var r rune = -1
		if end > 1 && end <= 12 {
			r = reference(s[1:end])
		}
		switch {
		case r == -1: // not a reference: a literal '&'
			b = append(b, '&')
			s = s[1:]
		case r == -2:
			return "", fmt.Errorf("invalid character reference %q", s[:end+1])
		default:
			b = utf8.AppendRune(b, r)
			s = s[end+1:]
		}
		i = strings.IndexByte(s, '&')
	}
	return string(append(b, s...)), nil
}

// reference returns the character of a reference's body ("amp", "#32",
// "#x20"), -1 when it is not a reference and -2 when it is a character
// reference to a character XML does not allow.
func reference(body string) rune {
	switch body {
	case "lt":
		return '<'
	case "gt":
		return '>'
	case "amp":
		return '&'
	case "quot":
		return '"'
	case "apos":
		return '\''
	}
	if body[0] != '#' {
		return -1
	}
	digits, base := body[1:], 10
	if len(digits) > 0 && (digits[0] == 'x' || digits[0] == 'X') {
		digits, base = digits[1:], 16
	}
	if digits == "" || digits[0] == '+' || digits[0] == '-' {
		return -1
	}
	n, err := strconv.ParseUint(digits, base, 32)
	if err != nil {
		return -1
	}
	r := rune(n)
	if !xmlChar(r) {
		return -2
	}
	return r
}

// xmlChar reports whether XML 1.0 allows the character.
func xmlChar(r rune) bool {
	return r == '\t' || r == '\n' || r == '\r' ||
		(r >= 0x20 && r <= 0xD7FF) || (r >= 0xE000 && r <= 0xFFFD) || (r >= 0x10000 && r <= 0x10FFFF)
}

// attr returns an attribute's value, in any case of its name.
func (t *tree) attr(n *node, name string) string {
	for _, a := range t.attrs[n.attrs[0]:n.attrs[1]] {
		if strings.EqualFold(a.name, name) {
			return a.value
		}
	}
	return ""
}
