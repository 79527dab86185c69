package nfuse_test

import (
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/usher-vdi/usher/internal/nfuse"
)

// ctx1Vectors are the published test vectors.
var ctx1Vectors = []struct{ clear, ctx1 string }{
	{"a", "MEGB"},
	{"aa", "MEGBKFAA"},
	{"ab", "MEGBKGAD"},
	{"ba", "MHGCKGAD"},
	{"A", "OEEB"},
	{"password", "NFHALEBBMHGCLEBBMDGGKMAJNOHLLKBP"},
	{"", ""},
}

func TestCtx1Vectors(t *testing.T) {
	for _, v := range ctx1Vectors {
		if got := nfuse.EncodeCtx1(v.clear); got != v.ctx1 {
			t.Errorf("EncodeCtx1(%q) = %q, want %q", v.clear, got, v.ctx1)
		}
		got, err := nfuse.DecodeCtx1(v.ctx1)
		if err != nil || got != v.clear {
			t.Errorf("DecodeCtx1(%q) = %q, %v; want %q", v.ctx1, got, err, v.clear)
		}
	}
}

func TestCtx1RoundTrip(t *testing.T) {
	for _, s := range []string{"user password", "Grüße", "пароль", "密码", "emoji 🔑 key", "a&b<c>\"'", "  spaces  "} {
		got, err := nfuse.DecodeCtx1(nfuse.EncodeCtx1(s))
		if err != nil || got != s {
			t.Errorf("round trip of %q = %q, %v", s, got, err)
		}
	}
}

func TestCtx1Invalid(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     error
	}{
		{"seed 004's placeholder", "PASSWORDLOL", nfuse.ErrCtx1Length},
		{"odd length", "MEG", nfuse.ErrCtx1Length},
		{"half a code unit", "MEGBKF", nfuse.ErrCtx1Length},
		{"letter after P", "MEGQ", nfuse.ErrCtx1Alphabet},
		{"lower case", "megb", nfuse.ErrCtx1Alphabet},
		{"digit", "ME1B", nfuse.ErrCtx1Alphabet},
		{"non-ASCII", "MEG\xc3", nfuse.ErrCtx1Alphabet},
		{"lone high surrogate", encodeUnits(0xD800), nfuse.ErrCtx1UTF16},
		{"lone low surrogate", encodeUnits(0xDC00), nfuse.ErrCtx1UTF16},
		{"reversed pair", encodeUnits(0xDC00, 0xD800), nfuse.ErrCtx1UTF16},
		{"high surrogate then a letter", encodeUnits(0xD800, 'a'), nfuse.ErrCtx1UTF16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := nfuse.DecodeCtx1(tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("DecodeCtx1(%q) = %q, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

// encodeUnits ctx1-encodes raw UTF-16 code units, valid or not.
func encodeUnits(units ...uint16) string {
	var out []byte
	var prev byte
	for _, u := range units {
		for _, b := range []byte{byte(u), byte(u >> 8)} {
			t := b ^ 0xA5 ^ prev
			out = append(out, 'A'+t>>4, 'A'+t&0xF)
			prev = t
		}
	}
	return string(out)
}

func FuzzCtx1Decode(f *testing.F) {
	for _, v := range ctx1Vectors {
		f.Add(v.ctx1)
	}
	f.Add("PASSWORDLOL")
	f.Add(encodeUnits(0xD83D, 0xDD11))
	f.Add(encodeUnits(0xD800))
	f.Fuzz(func(t *testing.T, s string) {
		clear, err := nfuse.DecodeCtx1(s)
		if err != nil {
			if clear != "" {
				t.Fatalf("error %v with a result %q", err, clear)
			}
			return
		}
		if !utf8.ValidString(clear) {
			t.Fatalf("DecodeCtx1(%q) = %q, not UTF-8", s, clear)
		}
		if again := nfuse.EncodeCtx1(clear); again != s {
			t.Fatalf("EncodeCtx1(DecodeCtx1(%q)) = %q", s, again)
		}
	})
}
