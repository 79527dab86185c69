// Command bootimage builds the boot image that the boot tests (cmd/usher
// TestBoot..., internal/vmrun) and `usher bench boot` boot, into the
// cache directory (vmrun.CacheDir: $USHER_BOOT_CACHE, else
// ~/.cache/usher/boot), printing its progress. An image already in the
// cache for the current recipe is reused at once.
//
// scripts/test runs it before the tests, so that no test pays the build
// (several minutes on a new machine) inside its own timeout and the
// package times show the tests' own cost.
//
// It exits 0 with the image's paths on stdout; 3 when this machine cannot
// build one (not root, no debootstrap: vmrun.ErrUnavailable), saying why;
// 1 on any other failure.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/usher-vdi/usher/internal/vmrun"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	img, err := vmrun.Build(ctx, vmrun.BuildOptions{Logf: func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "bootimage: "+format+"\n", args...)
	}})
	switch {
	case errors.Is(err, vmrun.ErrUnavailable):
		fmt.Fprintf(os.Stderr, "bootimage: %v\n", err)
		os.Exit(3)
	case ctx.Err() != nil:
		fmt.Fprintln(os.Stderr, "bootimage: interrupted")
		os.Exit(130)
	case err != nil:
		fmt.Fprintf(os.Stderr, "bootimage: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("disk %s\nkernel %s\ninitrd %s\nkey %s\n", img.Disk, img.Kernel, img.Initrd, img.Key)
	fmt.Fprintf(os.Stderr, "bootimage: ready in %v\n", time.Since(start).Round(100*time.Millisecond))
}
