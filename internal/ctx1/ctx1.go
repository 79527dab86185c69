// Package ctx1 is the Citrix ctx1 password encoding, which NFuse clients
// apply to Password elements with encoding="ctx1". It is obfuscation, not
// encryption: anyone who sees the string has the password.
//
// The password's UTF-16LE bytes are chained: t[i] = b[i] ^ 0xA5 ^ t[i-1]
// (t[-1] = 0), and each t[i] is written as two letters 'A'+(t>>4) and
// 'A'+(t&0xF), so the alphabet is A..P. Citrix never documented it; it was
// described publicly by Remko Weijnen ("Encoding and decoding Citrix
// passwords", 2012) and worked out with the test vectors used here by
// darthnull ("Good fun with bad crypto", 2014,
// https://darthnull.org/2014/01/15/good-fun-bad-crypto/).
//
// It imports only the standard library; internal/nfuse decodes with it and
// internal/loadgen encodes with it. Never log what it encodes or decodes.
package ctx1

import (
	"errors"
	"unicode/utf16"
	"unicode/utf8"
)

// Errors that Decode returns for strings that are not ctx1.
var (
	ErrLength   = errors.New("ctx1: length is not a multiple of 4 letters")
	ErrAlphabet = errors.New("ctx1: letter outside A..P")
	ErrUTF16    = errors.New("ctx1: not valid UTF-16")
)

// Encode obfuscates a password as ctx1.
func Encode(password string) string {
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

// Decode recovers a password from its ctx1 form. It returns ErrLength,
// ErrAlphabet or ErrUTF16 for a string that is not ctx1; an empty string
// is the empty password.
func Decode(s string) (string, error) {
	if len(s)%4 != 0 {
		return "", ErrLength
	}
	var stack [64]uint16
	units := stack[:0]
	var prev byte
	for i := 0; i < len(s); i += 4 {
		var pair [2]byte
		for j := range pair {
			hi, lo := s[i+2*j]-'A', s[i+2*j+1]-'A'
			if hi > 0xF || lo > 0xF {
				return "", ErrAlphabet
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
				return "", ErrUTF16
			}
			r = utf16.DecodeRune(r, rune(units[i+1]))
			if r == utf8.RuneError {
				return "", ErrUTF16
			}
			i++
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out), nil
}
