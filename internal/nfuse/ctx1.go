package nfuse

import (
	"errors"
	"unicode/utf16"
	"unicode/utf8"
)

// ctx1 is the Citrix password obfuscation that NFuse clients apply to
// Password elements with encoding="ctx1". It is not encryption: anyone who
// sees the string has the password.
//
// The password's UTF-16LE bytes are chained: t[i] = b[i] ^ 0xA5 ^ t[i-1]
// (t[-1] = 0), and each t[i] is written as two letters 'A'+(t>>4) and
// 'A'+(t&0xF), so the alphabet is A..P.

// Errors that DecodeCtx1 returns for strings that are not ctx1.
var (
	ErrCtx1Length   = errors.New("ctx1: length is not a multiple of 4 letters")
	ErrCtx1Alphabet = errors.New("ctx1: letter outside A..P")
	ErrCtx1UTF16    = errors.New("ctx1: not valid UTF-16")
)

// EncodeCtx1 obfuscates a password as ctx1.
func EncodeCtx1(password string) string {
	units := utf16.Encode([]rune(password))
	out := make([]byte, 0, 4*len(units))
	var prev byte
	for _, u := range units {
		for _, b := range [2]byte{byte(u), byte(u >> 8)} {
			t := b ^ 0xA5 ^ prev
			out = append(out, 'A'+t>>4, 'A'+t&0xF)
			prev = t
		}
	}
	return string(out)
}

// DecodeCtx1 recovers a password from its ctx1 form. It returns
// ErrCtx1Length, ErrCtx1Alphabet or ErrCtx1UTF16 for a string that is not
// ctx1; an empty string is the empty password.
func DecodeCtx1(s string) (string, error) {
	if len(s)%4 != 0 {
		return "", ErrCtx1Length
	}
	var stack [64]uint16
	units := stack[:0]
	var prev byte
	for i := 0; i < len(s); i += 4 {
		var pair [2]byte
		for j := range pair {
			hi, lo := s[i+2*j]-'A', s[i+2*j+1]-'A'
			if hi > 0xF || lo > 0xF {
				return "", ErrCtx1Alphabet
			}
			t := hi<<4 | lo
			pair[j] = t ^ prev ^ 0xA5
			prev = t
		}
		units = append(units, uint16(pair[0])|uint16(pair[1])<<8)
	}
	var buf [128]byte
	out := buf[:0]
	for i := 0; i < len(units); i++ {
		r := rune(units[i])
		if utf16.IsSurrogate(r) {
			if r >= 0xDC00 || i+1 == len(units) {
				return "", ErrCtx1UTF16
			}
			r = utf16.DecodeRune(r, rune(units[i+1]))
			if r == utf8.RuneError {
				return "", ErrCtx1UTF16
			}
			i++
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out), nil
}
