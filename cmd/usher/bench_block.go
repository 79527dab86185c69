package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/blockbench"
	"github.com/usher-vdi/usher/internal/bytesize"
	"github.com/usher-vdi/usher/internal/loadgen"
)

// benchWritecache runs the PVS RAM-cache paper's write-cache experiment: N targets boot
// and work through every PVS write-cache mode, and the disk operations
// under each cache are reported beside the PVS RAM-cache paper's table.
func (m *Main) benchWritecache(ctx context.Context, args []string) error {
	fs := m.flagSet("bench writecache", "[flags]\n\nN targets replay a Windows boot and an hour of steady-state VDI work (scaled down by --scale)\nthrough each write-cache mode; see the package doc of internal/blockbench for the workload.")
	targets := fs.Int("targets", 8, "targets (each its own write cache)")
	scale := fs.Int("scale", blockbench.DefaultWorkload().Scale, "divide sizes, operation counts and durations by this (rates and ratios are kept)")
	modes := fs.String("modes", strings.Join(blockbench.Modes, ","), "write-cache modes to run")
	out := fs.String("out", filepath.Join("usher-bench", "writecache"), "report directory: report.{md,json,csv,html}, disk-iops.svg and result.json (\"\" for none)")
	dir := fs.String("dir", "", "scratch directory for the image store and cache files (default: a temporary one, removed)")
	seed := fs.Uint64("seed", 1, "workload random seed")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file, for go tool pprof")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *targets < 1 || *scale < 1 {
		return usageError{"--targets and --scale must be at least 1"}
	}
	w := blockbench.DefaultWorkload()
	w.Scale = *scale
	cfg := blockbench.WritecacheConfig{Targets: *targets, Workload: w, Seed: *seed}
	for _, md := range strings.Split(*modes, ",") {
		md = strings.TrimSpace(md)
		if md == "" {
			continue
		}
		known := false
		for _, k := range blockbench.Modes {
			known = known || k == md
		}
		if !known {
			return usageError{fmt.Sprintf("--modes: unknown mode %q (%s)", md, strings.Join(blockbench.Modes, ", "))}
		}
		cfg.Modes = append(cfg.Modes, md)
	}
	scratch := *dir
	if scratch == "" {
		d, err := os.MkdirTemp("", "usher-bench-writecache-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		scratch = d
	} else if err := os.MkdirAll(scratch, 0o755); err != nil {
		return err
	}
	cfg.Dir = scratch
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	res, err := blockbench.RunWritecache(ctx, cfg)
	stop()
	if err != nil {
		return err
	}
	if err := res.WriteTable(m.Stdout); err != nil {
		return err
	}
	rep, err := res.Report(shellCommand(append([]string{"usher", "bench", "writecache"}, args...)...))
	if err != nil {
		return err
	}
	return m.writeBlockBench(rep, *out, res)
}

// writeBlockBench writes a block experiment's report directory and its
// raw result beside it, as result.json.
func (m *Main) writeBlockBench(rep *loadgen.Report, out string, res any) error {
	if out == "" {
		return nil
	}
	if err := blockbench.WriteJSON(out, "result.json", res); err != nil {
		return err
	}
	return m.writeBenchDir(rep, out)
}

// benchNBD compares usher's NBD server with nbdkit under fio, run by
// run on the same image.
func (m *Main) benchNBD(ctx context.Context, args []string) error {
	fs := m.flagSet("bench nbd", "[flags]\n\nfio (nbd engine, loopback, 1 connection) against usher's NBD server and nbdkit on the same image,\ninterleaved usher, nbdkit, usher, nbdkit: 4 KiB random reads (iodepth 32), 256 KiB sequential reads,\n4 KiB random writes into usher's server-disk write cache and nbdkit's cow filter (both in 4 KiB blocks\nwhen the nbdkit installed takes cow-block-size).")
	size := fs.String("size", "1GiB", "image size (random data)")
	runtime := fs.Duration("runtime", 5*time.Second, "length of each fio run")
	rounds := fs.Int("rounds", 2, "interleaved rounds per test")
	cold := fs.Bool("cold", false, "skip the unmeasured read of the whole image that warms usher's RAM cache and the page cache before each test")
	tests := fs.String("tests", strings.Join(blockbench.NBDTests, ","), "tests to run")
	workers := fs.Int("workers", 16, "usher stream --workers")
	ramCache := fs.String("ram-cache", "1GiB", "usher stream --ram-cache")
	out := fs.String("out", filepath.Join("usher-bench", "nbd"), "report directory: report.{md,json,csv,html}, usher-over-nbdkit.svg (with nbdkit) and result.json (\"\" for none)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of usher's side (fio and nbdkit are other processes) to this file, for go tool pprof")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	imgSize, err := bytesize.Parse(*size)
	if err != nil {
		return usageError{"--size: " + err.Error()}
	}
	cache, err := bytesize.Parse(*ramCache)
	if err != nil {
		return usageError{"--ram-cache: " + err.Error()}
	}
	fio, err := exec.LookPath("fio")
	if err != nil {
		return fmt.Errorf("fio is needed (apt-get install -y fio): %w", err)
	}
	nbdkit, _ := exec.LookPath("nbdkit")
	if nbdkit == "" {
		fmt.Fprintln(m.Stderr, "usher bench nbd: nbdkit not found, its columns are skipped (apt-get install -y nbdkit)")
	}
	dir, err := os.MkdirTemp("", "usher-bench-nbd-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := blockbench.NBDConfig{Dir: dir, ImageSize: imgSize, Runtime: *runtime, Rounds: *rounds, Fio: fio, Nbdkit: nbdkit,
		Workers: *workers, RAMCache: cache, Cold: *cold, Progress: m.Stderr}
	for _, t := range strings.Split(*tests, ",") {
		if t = strings.TrimSpace(t); t != "" {
			cfg.Tests = append(cfg.Tests, t)
		}
	}
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	res, err := blockbench.RunNBD(ctx, cfg)
	stop()
	if err != nil {
		return err
	}
	if err := res.WriteTable(m.Stdout); err != nil {
		return err
	}
	rep, err := res.Report(shellCommand(append([]string{"usher", "bench", "nbd"}, args...)...))
	if err != nil {
		return err
	}
	return m.writeBlockBench(rep, *out, res)
}
