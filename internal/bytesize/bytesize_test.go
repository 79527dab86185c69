package bytesize_test

import (
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/bytesize"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"4096", 4096},
		{"4096B", 4096},
		{"4096 b", 4096},
		// IEC: powers of 1024, as the flag defaults are written.
		{"256KiB", 256 << 10},
		{"512MiB", 512 << 20},
		{"1GiB", 1 << 30},
		{"4gib", 4 << 30},
		{"2TiB", 2 << 40},
		{"16Ki", 16 << 10},
		{"1.5GiB", 3 << 29},
		{" 1 MiB ", 1 << 20},
		// SI: powers of 1000.
		{"1kB", 1000},
		{"1KB", 1000},
		{"4k", 4000},
		{"2MB", 2_000_000},
		{"1G", 1_000_000_000},
		{"2gb", 2_000_000_000},
		{"3TB", 3_000_000_000_000},
		{"1,000", 1000},
		{"1.5", 1}, // a fraction of a byte is rounded down
	} {
		got, err := bytesize.Parse(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{"", " ", "-1", "-1KiB", "12x", "lots", "KiB", "1 2", "1XB", "9EiB", "99999999999999999999"} {
		got, err := bytesize.Parse(in)
		if err == nil {
			t.Errorf("Parse(%q) = %d, want an error", in, got)
			continue
		}
		if want := "want a number of bytes"; !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) error %q does not say %q", in, err, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"4096", "256KiB", "1.5 GB", "-1", "9EiB", "1,0,0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := bytesize.Parse(s); err == nil && n < 0 {
			t.Fatalf("Parse(%q) = %d", s, n)
		}
	})
}
