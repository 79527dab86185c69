package ctx1_test

import (
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/usher-vdi/usher/internal/ctx1"
)

// vectors are the published test vectors (darthnull, 2014, and
// shared/reference/nfuse.md).
var vectors = []struct{ clear, ctx1 string }{
	{"a", "MEGB"},
	{"aa", "MEGBKFAA"},
	{"ab", "MEGBKGAD"},
	{"ba", "MHGCKGAD"},
	{"A", "OEEB"},
	{"password", "NFHALEBBMHGCLEBBMDGGKMAJNOHLLKBP"},
	{"", ""},
}

func TestVectors(t *testing.T) {
	for _, v := range vectors {
		if got := ctx1.Encode(v.clear); got != v.ctx1 {
			t.Errorf("Encode(%q) = %q, want %q", v.clear, got, v.ctx1)
		}
		got, err := ctx1.Decode(v.ctx1)
		if err != nil || got != v.clear {
			t.Errorf("Decode(%q) = %q, %v; want %q", v.ctx1, got, err, v.clear)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, s := range []string{"user password", "Grüße", "пароль", "密码", "emoji 🔑 key", "a&b<c>\"'", "  spaces  "} {
		got, err := ctx1.Decode(ctx1.Encode(s))
		if err != nil || got != s {
			t.Errorf("round trip of %q = %q, %v", s, got, err)
		}
	}
}

func TestInvalid(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     error
	}{
		{"the IMA/FMA test's placeholder", "PASSWORDLOL", ctx1.ErrLength},
		{"odd length", "MEG", ctx1.ErrLength},
		{"half a code unit", "MEGBKF", ctx1.ErrLength},
		{"letter after P", "MEGQ", ctx1.ErrAlphabet},
		{"lower case", "megb", ctx1.ErrAlphabet},
		{"digit", "ME1B", ctx1.ErrAlphabet},
		{"non-ASCII", "MEG\xc3", ctx1.ErrAlphabet},
		{"lone high surrogate", encodeUnits(0xD800), ctx1.ErrUTF16},
		{"lone low surrogate", encodeUnits(0xDC00), ctx1.ErrUTF16},
		{"reversed pair", encodeUnits(0xDC00, 0xD800), ctx1.ErrUTF16},
		{"high surrogate then a letter", encodeUnits(0xD800, 'a'), ctx1.ErrUTF16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ctx1.Decode(tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode(%q) = %q, %v; want %v", tc.in, got, err, tc.want)
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
	for _, v := range vectors {
		f.Add(v.ctx1)
	}
	f.Add("PASSWORDLOL")
	f.Add(encodeUnits(0xD83D, 0xDD11))
	f.Add(encodeUnits(0xD800))
	f.Fuzz(func(t *testing.T, s string) {
		clear, err := ctx1.Decode(s)
		if err != nil {
			if clear != "" {
				t.Fatalf("error %v with a result %q", err, clear)
			}
			return
		}
		if !utf8.ValidString(clear) {
			t.Fatalf("Decode(%q) = %q, not UTF-8", s, clear)
		}
		if again := ctx1.Encode(clear); again != s {
			t.Fatalf("Encode(Decode(%q)) = %q", s, again)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	s := ctx1.Encode("demo-pass-1")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ctx1.Decode(s); err != nil {
			b.Fatal(err)
		}
	}
}
