// Package vmrun is a VM runner: it boots a real operating system under
// QEMU for the benches and the tests, a minimal Debian (bookworm) built
// once per machine with debootstrap into a raw ext4 disk image, booted
// under qemu-system-x86_64 with the image's own kernel and initramfs, from
// a local file, from an NBD export (QEMU's own NBD client, or the
// initramfs's nbd-client, as a diskless machine boots), or over the
// network with QEMU's iPXE.
//
// The image's user space is one shell script (usher-init, run as init): it
// prints USHER-BOOTED on the serial console, says whether an earlier boot's
// marker file is there (USHER-MARKER present|absent), writes the marker and
// usher.write_mb MiB of data (usher.write_mode: large, dd bs=1M; or small,
// a desktop's 4 KiB writes at random offsets with an fsync every 32),
// syncs, prints USHER-DONE and powers off. A boot takes about 15 s under
// software emulation (TCG, one vCPU).
//
// BuildAgent builds a statically linked usher from the code of the module
// in the working directory: the boot agent that runs a device-side write
// cache in a network-booted target's initramfs (usher serve --boot-agent).
//
// Build builds the image or finds it in the cache directory
// ($USHER_BOOT_CACHE, default os.UserCacheDir()/usher/boot; about 1.7 GB,
// safe to delete), in two layers keyed by digests of their recipes: the
// base, debootstrap's tree (800 MB of packages from the Debian mirror of
// this machine's apt sources, as root: two minutes on an idle machine, half
// an hour on a loaded one), and the workload written into a copy of its
// disk (seconds), so that a change to the workload does not run debootstrap
// again. A file lock per layer makes parallel processes build it once.
// StartVM runs a VM once one of the machine's VM slots is free, across
// processes: VMOptions.Slots of them (0: $USHER_BOOT_VMS, else one per
// CPU).
//
// Without debootstrap, mkfs.ext4 or qemu-system-x86_64 (or without root, to
// build the image) Build, BuildAgent and StartVM return an error wrapping
// ErrUnavailable.
//
// Only commands (usher bench boot), internal/bench and tests import this
// package; it takes no testing.TB. The helpers that skip or fail a test
// and clean up after it are internal/vmrun/vmruntest's, which only tests
// import.
package vmrun

import (
	"errors"
	"fmt"
)

// ErrUnavailable is the error (wrapped, with the reason) of Build and
// StartVM when this machine cannot build the image or run a VM: a program
// is missing (Debian: apt-get install qemu-system-x86 debootstrap), or
// building needs root.
var ErrUnavailable = errors.New("vmrun: cannot build or boot a VM here")

// unavailable returns an error wrapping ErrUnavailable.
func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnavailable, fmt.Sprintf(format, args...))
}
