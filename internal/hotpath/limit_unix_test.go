//go:build linux || darwin

package hotpath_test

import (
	"syscall"
	"testing"

	"github.com/usher-vdi/usher/internal/hotpath"
)

// TestRaiseFileLimit: a soft limit on open files below the hard one is
// raised to it, and the default total is the limit less the reserve.
func TestRaiseFileLimit(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Max < 512 {
		t.Skipf("hard limit %d", lim.Max)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) })
	low := lim
	low.Cur = lim.Max - 256
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	before, after, hard, err := hotpath.RaiseFileLimit()
	if err != nil || before != low.Cur || after != lim.Max || hard != lim.Max {
		t.Fatalf("RaiseFileLimit: %d, %d, %d, %v; want %d, %d, %d", before, after, hard, err, low.Cur, lim.Max, lim.Max)
	}
	var now syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now); err != nil || now.Cur != lim.Max {
		t.Fatalf("soft limit %d after raising, want %d", now.Cur, lim.Max)
	}
	if n := int(lim.Max); n < 1<<20 {
		want := max(n-max(hotpath.DefaultReserve, n/10), 64)
		if got := hotpath.DefaultMaxConns(); got != want {
			t.Fatalf("DefaultMaxConns with %d open files: %d, want %d", n, got, want)
		}
	}
}
