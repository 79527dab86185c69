package site_test

import (
	"testing"

	"github.com/usher-vdi/usher/internal/site"
)

func TestValidateAddress(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"vda-01.example.com:3389", true},
		{"10.0.0.7", true},
		{"[fe80::1%eth0]:3389", true},
		{"host_name:1", true},
		{"", false},
		{"vda:3389\r\nalternate shell:s:calc", false},
		{"vda:3389\n", false},
		{"vda 3389", false},
		{"vda;x", false},
		{"vda\u2028x", false},
		{"vdä", false},
	} {
		if err := site.ValidateAddress(tc.addr); (err == nil) != tc.ok {
			t.Errorf("ValidateAddress(%q) = %v, want ok %v", tc.addr, err, tc.ok)
		}
	}
}

func TestValidateText(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"Office Writer — 2024 (ü)", true},
		{"", true},
		{"a\r\nb", false},
		{"a\tb", false},
		{"a\x85b", false},
		{"a\u2029b", false},
		{"a\xffb", false},
	} {
		if err := site.ValidateText("display_name", tc.v); (err == nil) != tc.ok {
			t.Errorf("ValidateText(%q) = %v, want ok %v", tc.v, err, tc.ok)
		}
	}
}
