package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/bench"
	"github.com/usher-vdi/usher/internal/bytesize"
	"github.com/usher-vdi/usher/internal/vmrun"
)

// benchBoot runs the boot experiment: VMs under QEMU boot a real Debian
// at once through each write-cache mode (issue 19; seed 001 measured on
// real boots).
func (m *Main) benchBoot(ctx context.Context, args []string) error {
	fs := m.flagSet("bench boot", "[flags]\n\n"+
		"--targets VMs under QEMU (software emulation, one vCPU each) boot the same minimal Debian at once through each\n"+
		"write-cache mode and run a short scripted workload (--write-mb MiB of random data written and synced):\n"+
		"  local               the image as a local raw file: the yardstick of boot time\n"+
		"  server-disk         usher stream --write-cache (the stream server's disk)\n"+
		"  ram                 one usher target --cache ram per VM (the device's RAM; --ram holds the writes)\n"+
		"  ram-overflow        one usher target --cache ram-overflow per VM, --ram that holds the writes\n"+
		"  ram-overflow-small  the same with --small-ram, which does not: the rest goes to the overflow file\n"+
		"Reports per target and per layer the reads and writes of the guest's disk (QEMU), what reached the stream,\n"+
		"the blocks the stream read from its store, the server-disk caches, the device RAM, the overflow files\n"+
		"(meters on /metrics) and the disk holding --dir (diskstats), the boot time (to USHER-BOOTED) and the time\n"+
		"to USHER-DONE, beside seed 001's published figures; computes the issue's figures and marks each met or\n"+
		"not. The boot image is built once per machine (internal/vmrun: debootstrap, as root) and cached.\n"+
		"--check makes a missed figure an error.")
	targets := fs.Int("targets", 4, fmt.Sprintf("VMs booting at once (1 to %d)", bench.MaxBootTargets))
	modes := fs.String("modes", strings.Join(bench.DefaultBootModes, ","), "modes to run, in this order (local may come twice: the boot-time yardstick is the local passes' mean)")
	writeMB := fs.Int("write-mb", 48, "MiB each guest's workload writes (1 to 512)")
	writeMode := fs.String("write-mode", vmrun.WriteLarge, "how it writes them: large (one file, dd bs=1M) or small (as a desktop: 4 KiB writes at random offsets of 8 files, half of them rewrites, an fsync every 32)")
	ram := fs.String("ram", "256MiB", "RAM budget of ram and ram-overflow (it should hold the guest's writes)")
	smallRAM := fs.String("small-ram", "16MiB", "RAM budget of ram-overflow-small (it should not)")
	memory := fs.Int("memory", 384, "each VM's memory, MiB (128 to 2048)")
	passTimeout := fs.Duration("pass-timeout", 6*time.Minute, "bound of each mode's pass (1m to 30m)")
	solo := fs.Bool("solo", true, "boot one target alone before each usher mode's pass, through that mode: the blocks one boot reads from the store, the yardstick of the stream's sharing")
	dir := fs.String("dir", "", "scratch directory: image store, write caches, overflow files, on the disk to measure (default: a temporary one, removed)")
	out := fs.String("out", filepath.Join("usher-bench", "boot"), "report directory: report.{md,json,csv,html}, boot-seconds.svg and result.json (\"\" for none)")
	check := fs.Bool("check", false, "exit with an error when a figure is measured and missed")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	cfg := bench.BootConfig{Targets: *targets, WriteMB: *writeMB, WriteMode: *writeMode, MemoryMB: *memory, PassTimeout: *passTimeout, Solo: *solo,
		Self: m.self(), Progress: m.Stderr}
	switch {
	case cfg.Targets < 1 || cfg.Targets > bench.MaxBootTargets:
		return usageError{fmt.Sprintf("--targets must be 1 to %d", bench.MaxBootTargets)}
	case cfg.WriteMB < 1 || cfg.WriteMB > 512:
		return usageError{"--write-mb must be 1 to 512"}
	case cfg.WriteMode != vmrun.WriteLarge && cfg.WriteMode != vmrun.WriteSmall:
		return usageError{fmt.Sprintf("--write-mode %q is not large or small", cfg.WriteMode)}
	case cfg.MemoryMB < 128 || cfg.MemoryMB > 2048:
		return usageError{"--memory must be 128 to 2048"}
	case cfg.PassTimeout < time.Minute || cfg.PassTimeout > 30*time.Minute:
		return usageError{"--pass-timeout must be 1m to 30m"}
	}
	for _, md := range strings.Split(*modes, ",") {
		if md = strings.TrimSpace(md); md == "" {
			continue
		}
		if !slices.Contains(bench.BootModes, md) {
			return usageError{fmt.Sprintf("--modes: unknown mode %q (%s)", md, strings.Join(bench.BootModes, ", "))}
		}
		if slices.Contains(cfg.Modes, md) && md != bench.BootLocal {
			return usageError{fmt.Sprintf("--modes: %q twice", md)}
		}
		cfg.Modes = append(cfg.Modes, md)
	}
	if len(cfg.Modes) == 0 {
		return usageError{"--modes: no mode"}
	}
	var err error
	for _, b := range []struct {
		flag string
		v    string
		dst  *int64
	}{{"--ram", *ram, &cfg.RAM}, {"--small-ram", *smallRAM, &cfg.SmallRAM}} {
		if *b.dst, err = bytesize.Parse(b.v); err != nil || *b.dst < 1<<20 {
			return usageError{fmt.Sprintf("%s %q is not a size of at least 1MiB", b.flag, b.v)}
		}
	}
	if cfg.VMSlots, err = bootSlots(os.Getenv(vmrun.EnvVMs), runtime.NumCPU(), cfg.Targets); err != nil {
		return err
	}
	cfg.Dir = *dir
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "usher-bench-boot-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		cfg.Dir = d
	} else if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return err
	}
	res, err := bench.RunBoot(ctx, cfg)
	if res == nil {
		if errors.Is(err, vmrun.ErrUnavailable) {
			return fmt.Errorf("%w\n(Debian: apt-get install qemu-system-x86 debootstrap; building the image needs root)", err)
		}
		return err
	}
	rep, rerr := res.Report(shellCommand(append([]string{"usher", "bench", "boot"}, args...)...))
	if rerr != nil {
		return errors.Join(err, rerr)
	}
	fmt.Fprintln(m.Stdout)
	if werr := rep.WriteText(m.Stdout); werr != nil {
		return errors.Join(err, werr)
	}
	if werr := m.writeBlockBench(rep, *out, res); werr != nil {
		return errors.Join(err, werr)
	}
	if err != nil {
		return err
	}
	if missed := res.Missed(); *check && len(missed) > 0 {
		return fmt.Errorf("figures missed: %s", strings.Join(missed, "; "))
	}
	return nil
}

// bootSlots returns the VM slots of usher bench boot: the VMs boot at
// once, so at least as many slots as targets (vmrun's default is one per
// CPU), or the number $USHER_BOOT_VMS (env) sets, which must allow them.
func bootSlots(env string, cpus, targets int) (int, error) {
	switch n, _ := strconv.Atoi(env); {
	case n <= 0:
		return max(cpus, targets), nil
	case n < targets:
		return 0, usageError{fmt.Sprintf("%s=%d allows fewer VMs at once than --targets %d", vmrun.EnvVMs, n, targets)}
	default:
		return n, nil
	}
}
