package vdaproto

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func TestValidPin(t *testing.T) {
	sum := sha256.Sum256([]byte("cert"))
	good := hex.EncodeToString(sum[:])
	for _, tc := range []struct {
		pin string
		ok  bool
	}{
		{good, true},
		{"", false},
		{good[:63], false},
		{good + "0", false},
		{strings.ToUpper(good), false},
		{"sha256:" + good[7:], false},
		{strings.Repeat("g", 64), false},
	} {
		if got := ValidPin(tc.pin); got != tc.ok {
			t.Errorf("ValidPin(%q) = %v, want %v", tc.pin, got, tc.ok)
		}
	}
}

// FuzzValidPin: a valid pin is exactly what hex-decodes to 32 bytes and
// encodes back to itself.
func FuzzValidPin(f *testing.F) {
	sum := sha256.Sum256([]byte("cert"))
	f.Add(hex.EncodeToString(sum[:]))
	f.Add("")
	f.Add(strings.Repeat("A", 64))
	f.Fuzz(func(t *testing.T, pin string) {
		b, err := hex.DecodeString(pin)
		want := err == nil && len(b) == sha256.Size && hex.EncodeToString(b) == pin
		if got := ValidPin(pin); got != want {
			t.Fatalf("ValidPin(%q) = %v, want %v", pin, got, want)
		}
	})
}

func TestTicketFromSubprotocols(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"binary"}, ""},
		{[]string{"binary", TicketSubprotocol("abc_-1")}, "abc_-1"},
		{[]string{"binary, usher.ticket.xyz"}, "xyz"},
		{[]string{"usher.ticket."}, ""},
	} {
		if got := TicketFromSubprotocols(c.in); got != c.want {
			t.Errorf("TicketFromSubprotocols(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
