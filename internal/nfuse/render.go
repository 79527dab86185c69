package nfuse

import (
	"strconv"
	"unicode/utf8"
)

// Dialect is the protocol version usher answers in, whatever the client
// sent: the one FMA 7.x brokers answer in.
const Dialect = "5.9"

// ContentType is the media type of every answer.
const ContentType = "text/xml"

// prolog starts every answer; epilog ends it.
const (
	prolog = `<?xml version="1.0" encoding="UTF-8"?>` + "\r\n" +
		`<!DOCTYPE NFuseProtocol SYSTEM "NFuse.dtd">` + "\r\n" +
		`<NFuseProtocol version="` + Dialect + `">`
	epilog = "</NFuseProtocol>\r\n"
)

// xmlw appends XML to a byte slice. Text and attribute values are escaped;
// element and attribute names are the caller's constants.
type xmlw struct{ b []byte }

func (w *xmlw) raw(s string)      { w.b = append(w.b, s...) }
func (w *xmlw) rawb(b []byte)     { w.b = append(w.b, b...) }
func (w *xmlw) start(name string) { w.b = append(append(append(w.b, '<'), name...), '>') }
func (w *xmlw) end(name string)   { w.b = append(append(append(w.b, "</"...), name...), '>') }

// startAttrs opens an element with attributes given as name, value pairs;
// it is closed by end, or by close for an empty element.
func (w *xmlw) startAttrs(name string, kv ...string) {
	w.b = append(append(w.b, '<'), name...)
	for i := 0; i+1 < len(kv); i += 2 {
		w.b = append(append(w.b, ' '), kv[i]...)
		w.b = append(w.b, `="`...)
		w.b = appendEscaped(w.b, kv[i+1])
		w.b = append(w.b, '"')
	}
	w.b = append(w.b, '>')
}

// empty writes <name a="v"/>.
func (w *xmlw) empty(name string, kv ...string) {
	w.startAttrs(name, kv...)
	w.b = append(w.b[:len(w.b)-1], "/>"...)
}

// elem writes <name>text</name>.
func (w *xmlw) elem(name, text string) {
	w.start(name)
	w.b = appendEscaped(w.b, text)
	w.end(name)
}

func (w *xmlw) elemInt(name string, n int64) {
	w.start(name)
	w.b = strconv.AppendInt(w.b, n, 10)
	w.end(name)
}

// appendEscaped appends s as XML text or attribute value: markup
// characters become entity references, and what XML cannot carry at all
// (invalid UTF-8, control characters) becomes U+FFFD.
func appendEscaped(b []byte, s string) []byte {
	last := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < utf8.RuneSelf && c != '&' && c != '<' && c != '>' && c != '"' && c != '\'' {
			i++
			continue
		}
		r, size := rune(c), 1
		if c >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(s[i:])
		}
		var esc string
		switch {
		case r == '&':
			esc = "&amp;"
		case r == '<':
			esc = "&lt;"
		case r == '>':
			esc = "&gt;"
		case r == '"':
			esc = "&quot;"
		case r == '\'':
			esc = "&apos;"
		case r == '\t':
			esc = "&#9;"
		case r == '\n':
			esc = "&#10;"
		case r == '\r':
			esc = "&#13;"
		case r == utf8.RuneError && size == 1, !xmlChar(r):
			esc = "\uFFFD"
		default:
			i += size
			continue
		}
		b = append(append(b, s[last:i]...), esc...)
		i += size
		last = i
	}
	return append(b, s[last:]...)
}
