// Package boottest boots a real operating system for usher's tests: a
// minimal Debian (bookworm) built once per machine with debootstrap into a
// raw ext4 disk image, booted under qemu-system-x86_64 with the image's own
// kernel and initramfs, from a local file, from an NBD export (QEMU's own
// NBD client, or the initramfs's nbd-client, as a diskless machine boots),
// or over the network with QEMU's iPXE.
//
// The image's user space is one shell script (usher-init, run as init): it
// prints USHER-BOOTED on the serial console, says whether an earlier boot's
// marker file is there (USHER-MARKER present|absent), writes the marker and
// usher.write_mb MiB of data (usher.write_mode: large, dd bs=1M; or small,
// a desktop's 4 KiB writes at random offsets with an fsync every 32),
// syncs, prints USHER-DONE and powers off. A boot takes about 15 s under
// software emulation (TCG, one vCPU).
//
// BuildAgent and Agent build a statically linked usher from the code
// under test, the boot agent that runs a device-side write cache in a
// network-booted target's initramfs (usher serve --boot-agent).
//
// Image builds the image or finds it in the cache directory
// ($USHER_BOOT_CACHE, default os.UserCacheDir()/usher/boot; about 1.7 GB,
// safe to delete), in two layers keyed by digests of their recipes: the
// base, debootstrap's tree (800 MB of packages from the Debian mirror of
// this machine's apt sources, as root: two minutes on an idle machine, half
// an hour on a loaded one), and the workload written into a copy of its
// disk (seconds), so that a change to the workload does not run debootstrap
// again. A file lock per layer makes parallel test binaries build it once.
// Start and Boot run VMs, at most one per CPU on the machine at once
// (USHER_BOOT_VMS changes that), across test binaries.
//
// Without debootstrap, mkfs.ext4 or qemu-system-x86_64 (or without root, to
// build the image) Image, Start and Boot skip the test, saying why; with
// CI=true in the environment they fail it instead. Build and StartVM do
// the same without a test, for the benches: they return an error wrapping
// ErrUnavailable.
//
// Tests, internal/bench and cmd/usher (`usher bench boot`, through
// internal/bench and directly) import this package, so the usher binary
// links it; it does not import package testing (TB is the part of
// testing.TB it uses), so that the binary does not link that.
package boottest

import (
	"errors"
	"fmt"
	"os"
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

// ErrUnavailable is the error (wrapped, with the reason) of Build and
// StartVM when this machine cannot build the image or run a VM: a program
// is missing (Debian: apt-get install qemu-system-x86 debootstrap), or
// building needs root.
var ErrUnavailable = errors.New("boottest: cannot build or boot a VM here")

// skipOrFail ends tb for err: a skip when err is ErrUnavailable (a
// failure under CI=true), else a failure.
func skipOrFail(tb TB, err error) {
	tb.Helper()
	switch {
	case errors.Is(err, ErrUnavailable) && os.Getenv("CI") == "true":
		tb.Fatal(err)
	case errors.Is(err, ErrUnavailable):
		tb.Skip(err)
	default:
		tb.Fatalf("%v", err)
	}
}

// unavailable returns an error wrapping ErrUnavailable.
func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnavailable, fmt.Sprintf(format, args...))
}
