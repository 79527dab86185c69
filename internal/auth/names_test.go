package auth

import (
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

func TestNameKey(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"bob", "bob"},
		{"BOB", "bob"},
		{" bob", "bob"},
		{"bob ", "bob"},
		{"  Bob \t", "bob"},
		{"ＢＯＢ", "bob"}, // fullwidth
		{"ｂｏｂ", "bob"},
		{"b\u00adob", "bob"},              // soft hyphen
		{"b\u200bob", "bob"},              // zero-width space
		{"bob\u00a0smith", "bob smith"},   // no-break space
		{"bob \u3000 smith", "bob smith"}, // ideographic space
		{"Straße", "strasse"},
		{"STRASSE", "strasse"},
		{"ﬁle", "file"}, // ligature
		{"Ǆ", "dž"},
		{"e\u0301", "é"},
		{"", ""},
		{"   ", ""},
		{"user0002", "user0002"},
		{"a\xffb", "a\ufffdb"},
	} {
		if got := NameKey(c.in); got != c.want {
			t.Errorf("NameKey(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzNameKey checks NameKey's contract on any input: a fixed point, valid
// UTF-8 in normal form KC, no space at either end nor two in a row, no
// control or format character left, and case and width insensitive.
func FuzzNameKey(f *testing.F) {
	for _, s := range []string{"bob", " BOB ", "ＢＯＢ", "Straße", "ﬁ", "ǅ", "a\u00adb", "a\u3000\u3000b", "\xff", "ΐ", "ᾈ", "İ", "K"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k := NameKey(s)
		if again := NameKey(k); again != k {
			t.Fatalf("NameKey(%q) = %q, but NameKey(%q) = %q", s, k, k, again)
		}
		if !utf8.ValidString(k) {
			t.Fatalf("NameKey(%q) = %q: invalid UTF-8", s, k)
		}
		if !norm.NFKC.IsNormalString(k) {
			t.Fatalf("NameKey(%q) = %q: not in NFKC", s, k)
		}
		if strings.HasPrefix(k, " ") || strings.HasSuffix(k, " ") || strings.Contains(k, "  ") {
			t.Fatalf("NameKey(%q) = %q: spaces not trimmed and collapsed", s, k)
		}
		if mapped(k) != k {
			t.Fatalf("NameKey(%q) = %q: holds a character mapped to nothing or to a space", s, k)
		}
		// Other ASCII cases, and spaces around (full Unicode case mapping
		// is not case folding: Go lowers "İ" to "i", folding keeps its dot).
		swap := strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z':
				return r - 'a' + 'A'
			case r >= 'A' && r <= 'Z':
				return r - 'A' + 'a'
			}
			return r
		}, s)
		for _, v := range []string{swap, " " + s + "\t", "\u3000" + s} {
			if utf8.ValidString(s) && NameKey(v) != k {
				t.Fatalf("NameKey(%q) = %q, but NameKey(%q) = %q", s, k, v, NameKey(v))
			}
		}
	})
}
