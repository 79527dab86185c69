package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/blockbench"
	"github.com/usher-vdi/usher/internal/bytesize"
)

// benchHostcache runs seed 003's experiment: central storage I/O with
// VMs straight at the stream, then through host caches cold, warm and
// after a restart, and through nbdkit's cache filter.
func (m *Main) benchHostcache(ctx context.Context, args []string) error {
	fs := m.flagSet("bench hostcache", "[flags]\n\n"+
		"Seed 003 (XenServer IntelliCache) on this machine: one usher stream (--ram-cache 0, server-side write\n"+
		"caches) is the central storage, metered every second; --hosts usher hostcache daemons serve --vms VMs\n"+
		"each, played by a load generator in its own process. Each VM boots (the write-cache bench's desktop\n"+
		"workload divided by --scale: 70,000 mostly small random reads over a 320 MiB boot set, 25 MB of writes),\n"+
		"every VM at once, then works --steady at 10 IOPS, 90 % writes. Passes: baseline (VMs straight at the\n"+
		"stream), cold, warm, persist (the daemons restarted on their caches), and nbdkit's cache filter per host\n"+
		"(a cow filter per VM) cold and warm; then fio's 4 KiB random reads from a warm usher cache and from\n"+
		"nbdkit's, beside nbdkit null (the client's ceiling). Prints central IOPS beside seed 003's table and a\n"+
		"verdict per figure; --check makes a missed figure an error.")
	hosts := fs.Int("hosts", 4, "hosts, each an usher hostcache process (and an nbdkit cache filter)")
	vms := fs.Int("vms", 6, "VMs per host, booting at once")
	scale := fs.Int("scale", blockbench.DefaultHostcacheScale, "divide the workload's operation counts and sizes by this (I/O sizes and rates are kept)")
	steady := fs.Duration("steady", 20*time.Second, "each VM's steady state, at the workload's 10 IOPS")
	bootDepth := fs.Int("boot-depth", 4, "each VM's requests in flight during its boot")
	seed := fs.Uint64("seed", 1, "workload random seed")
	cacheSize := fs.String("cache-size", "", "each usher hostcache's --size (default: the image's size)")
	rounds := fs.Int("rounds", 3, "interleaved rounds of the 4 KiB read comparison (usher, nbdkit, nbdkit null)")
	runtime := fs.Duration("runtime", 5*time.Second, "length of each fio run of the read comparison")
	nbdkit := fs.String("nbdkit", "nbdkit", "nbdkit binary for the yardstick (\"\" to skip it and the read comparison)")
	fio := fs.String("fio", "fio", "fio binary for the read comparison (\"\" to skip it)")
	dir := fs.String("dir", "", "scratch directory: image store, caches, write caches (default: a temporary one, removed)")
	out := fs.String("out", filepath.Join("usher-bench", "hostcache"), "report directory: report.{md,json,csv,html}, central-iops.svg and result.json (\"\" for none)")
	check := fs.Bool("check", false, "exit with an error when a figure is measured and missed (a client-bound comparison is not a miss)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the bench process (the servers and the load generator are other processes) to this file, for go tool pprof")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	switch {
	case *hosts < 1 || *vms < 1 || *scale < 1 || *bootDepth < 1 || *rounds < 1:
		return usageError{"--hosts, --vms, --scale, --boot-depth and --rounds must be at least 1"}
	case *hosts**vms > 256:
		return usageError{"--hosts × --vms: at most 256 VMs"}
	case *steady <= 0 || *runtime <= 0:
		return usageError{"--steady and --runtime must be positive"}
	}
	cfg := blockbench.HostcacheConfig{Hosts: *hosts, VMs: *vms, Scale: *scale, Steady: *steady, BootDepth: *bootDepth, Seed: *seed,
		Rounds: *rounds, Runtime: *runtime, Progress: m.Stderr, Self: m.self()}
	if *cacheSize != "" {
		n, err := bytesize.Parse(*cacheSize)
		if err != nil || n <= 0 {
			return usageError{fmt.Sprintf("--cache-size %q is not a positive size", *cacheSize)}
		}
		cfg.CacheSize = n
	}
	if *nbdkit != "" {
		if p, err := exec.LookPath(*nbdkit); err == nil {
			cfg.Nbdkit = p
		} else {
			fmt.Fprintf(m.Stderr, "usher bench hostcache: %s not found, the nbdkit passes and the read comparison are skipped (apt-get install -y nbdkit)\n", *nbdkit)
		}
	}
	if *fio != "" {
		if p, err := exec.LookPath(*fio); err == nil {
			cfg.Fio = p
		} else {
			fmt.Fprintf(m.Stderr, "usher bench hostcache: %s not found, the read comparison is skipped (apt-get install -y fio)\n", *fio)
		}
	}
	cfg.Dir = *dir
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "usher-bench-hostcache-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		cfg.Dir = d
	} else if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return err
	}
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	res, err := blockbench.RunHostcache(ctx, cfg)
	stop()
	if res == nil {
		return err
	}
	rep, rerr := res.Report(shellCommand(append([]string{"usher", "bench", "hostcache"}, args...)...))
	if rerr != nil {
		return errors.Join(err, rerr)
	}
	fmt.Fprintln(m.Stdout)
	if werr := rep.WriteText(m.Stdout); werr != nil {
		return errors.Join(err, werr)
	}
	fmt.Fprintln(m.Stdout)
	res.WriteVerdicts(m.Stdout)
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

// benchHostcacheVMs is the host-cache bench's load generator, run in a
// process of its own: the VMs of a pass, as the spec file says.
func (m *Main) benchHostcacheVMs(ctx context.Context, args []string) error {
	fs := m.flagSet("bench hostcache-vms", "--spec FILE\n\nThe VMs of a pass of 'usher bench hostcache', which runs it in its own process: connects each VM, boots them all\n"+
		"at a line on stdin, runs their steady state at the next, and reports JSON lines on stdout.")
	spec := fs.String("spec", "", "the pass, as JSON (blockbench.VMRun)")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *spec == "" {
		return usageError{"bench hostcache-vms needs --spec"}
	}
	b, err := os.ReadFile(*spec)
	if err != nil {
		return err
	}
	var run blockbench.VMRun
	if err := json.Unmarshal(b, &run); err != nil {
		return fmt.Errorf("--spec %s: %w", *spec, err)
	}
	return blockbench.RunVMs(ctx, run, m.Stdin, m.Stdout)
}
