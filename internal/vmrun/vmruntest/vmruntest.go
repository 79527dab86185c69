// Package vmruntest is internal/vmrun for tests: it builds the boot image
// and the boot agent once per test binary and starts VMs that are killed
// when the test ends, skipping the test when this machine cannot build or
// boot a VM (failing it instead with CI=true in the environment).
//
// Only tests import this package; the benches and the usher binary use
// internal/vmrun itself.
package vmruntest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/vmrun"
)

// TB is the part of testing.TB that the package uses; a *testing.T, a
// *testing.B or any testing.TB is one.
type TB interface {
	Helper()
	Logf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skip(args ...any)
	Failed() bool
	Cleanup(func())
}

// skipOrFail ends tb for err: a skip when err is vmrun.ErrUnavailable (a
// failure under CI=true), else a failure.
func skipOrFail(tb TB, err error) {
	tb.Helper()
	switch {
	case errors.Is(err, vmrun.ErrUnavailable) && os.Getenv("CI") == "true":
		tb.Fatal(err)
	case errors.Is(err, vmrun.ErrUnavailable):
		tb.Skip(err)
	default:
		tb.Fatalf("%v", err)
	}
}

// images memoises Image within a test binary.
var images struct {
	sync.Mutex
	img *vmrun.BootImage
	err error
}

// Image returns the boot image (vmrun.Build), building it when the cache
// has none (about two minutes; progress goes to tb's log). It skips tb
// when the image cannot be built here (fails it under CI=true): no
// debootstrap or mkfs.ext4, or not root. Every test of a binary shares one
// build.
func Image(tb TB) *vmrun.BootImage {
	tb.Helper()
	images.Lock()
	defer images.Unlock()
	if images.img == nil && images.err == nil {
		images.img, images.err = vmrun.Build(context.Background(), vmrun.BuildOptions{Logf: tb.Logf})
	}
	if images.err != nil {
		skipOrFail(tb, images.err)
	}
	return images.img
}

// agents memoises Agent within a test binary.
var agents struct {
	sync.Mutex
	path string
	err  error
}

// Agent returns a statically linked usher for tb's boots
// (vmrun.BuildAgent), built once per test binary, from the code under
// test, into the cache directory's agent/ (the go command's build cache
// makes it take seconds after the first). It skips tb without a go
// command (fails it under CI=true).
func Agent(tb TB) string {
	tb.Helper()
	agents.Lock()
	defer agents.Unlock()
	if agents.path == "" && agents.err == nil {
		start := time.Now()
		agents.path, agents.err = vmrun.BuildAgent(context.Background(), filepath.Join(vmrun.CacheDir(), "agent"))
		tb.Logf("vmruntest: built the boot agent in %v", time.Since(start).Round(time.Millisecond))
	}
	if agents.err != nil {
		skipOrFail(tb, agents.err)
	}
	return agents.path
}

// Start starts a VM for tb (vmrun.StartVM) and kills it when tb ends,
// first logging its serial console when tb failed. It skips tb when QEMU
// is not installed (fails it under CI=true).
func Start(tb TB, opt vmrun.VMOptions) *vmrun.VM {
	tb.Helper()
	v, err := vmrun.StartVM(context.Background(), opt)
	if err != nil {
		skipOrFail(tb, err)
	}
	tb.Cleanup(func() {
		v.Kill()
		if tb.Failed() {
			tb.Logf("VM %s's serial console:\n%s", v.Name, v.Serial())
		}
	})
	return v
}

// Boot boots a VM for tb (Start) and waits for its workload to end and
// the VM to power off, failing tb when it does not.
func Boot(tb TB, opt vmrun.VMOptions) vmrun.Result {
	tb.Helper()
	v := Start(tb, opt)
	r, err := v.Result(context.Background())
	if err != nil {
		tb.Fatalf("%v", err) // Start's clean-up logs the serial console
	}
	return r
}
