package bytesize

import (
	"fmt"
	"math"
	"strings"

	"github.com/dustin/go-humanize"
)

// Parse reads a size in bytes: a number ("4096", "1.5", "1,000") with
// an optional unit, case-insensitive and optionally after a space:
//
//	B                                  bytes
//	kB, MB, GB, TB, PB (or k, M, ...)  powers of 1000
//	KiB, MiB, GiB, TiB, PiB (Ki, ...)  powers of 1024
//
// A fraction of a byte is rounded down. Parse fails on an empty or
// negative size, an unknown unit, or one beyond the range of an int64.
func Parse(s string) (int64, error) {
	n, err := humanize.ParseBytes(strings.TrimSpace(s))
	if err != nil || n > math.MaxInt64 {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit: kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)", s)
	}
	return int64(n), nil
}
