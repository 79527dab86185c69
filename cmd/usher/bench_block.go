package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/blockbench"
	"github.com/usher-vdi/usher/internal/bytesize"
	"github.com/usher-vdi/usher/internal/loadgen"
)

// benchWritecache runs the PVS RAM-cache paper's write-cache experiment:
// by default measured, fio jobs through every write-cache mode with the
// operations counted where they land; with --model, the replay of a
// modelled workload on a virtual clock.
func (m *Main) benchWritecache(ctx context.Context, args []string) error {
	fs := m.flagSet("bench writecache", "[flags]\n\nN targets, each a real fio job (nbd engine) on its own NBD connection to usher's NBD server, run a\n"+
		"desktop-like mix (a read-heavy boot burst of --boot bytes, then 80 % writes at --steady-iops) through each write-cache mode\n"+
		"into real files; the operations are counted at the client (fio), at the caches, at their files (meters) and on\n"+
		"the disk holding --dir (diskstats, after a syncfs). The PVS RAM-cache paper's table is printed beside.\n"+
		"--model instead replays the paper's modelled workload on a virtual clock (a model, not a measurement).")
	targets := fs.Int("targets", 4, "targets (each its own write cache and NBD connection)")
	modes := fs.String("modes", strings.Join(blockbench.Modes, ","), "write-cache modes to run")
	out := fs.String("out", filepath.Join("usher-bench", "writecache"), "report directory: report.{md,json,csv,html} and result.json (\"\" for none)")
	dir := fs.String("dir", "", "scratch directory for the image store and cache files, on the disk to measure (default: a temporary one, removed)")
	size := fs.String("size", "256MiB", "image size")
	boot := fs.String("boot", "64MiB", "the I/O of each target's boot burst")
	steady := fs.Duration("steady", 6*time.Second, "the steady state of each target")
	steadyIOPS := fs.Int("steady-iops", 200, "each target's IOPS in the steady state")
	ramBudget := fs.String("ram-budget", "64MiB", "each target's RAM in the RAM modes (ram-overflow-small: 1MiB)")
	model := fs.Bool("model", false, "replay the modelled workload on a virtual clock instead of measuring (labelled a model)")
	scale := fs.Int("scale", blockbench.DefaultWorkload().Scale, "with --model: divide sizes, operation counts and durations by this (rates and ratios are kept)")
	seed := fs.Uint64("seed", 1, "with --model: workload random seed")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file, for go tool pprof")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *targets < 1 || *scale < 1 || *steadyIOPS < 1 {
		return usageError{"--targets, --scale and --steady-iops must be at least 1"}
	}
	if *targets > 64 {
		return usageError{"--targets: at most 64"}
	}
	var chosen []string
	for _, md := range strings.Split(*modes, ",") {
		md = strings.TrimSpace(md)
		if md == "" {
			continue
		}
		if !slices.Contains(blockbench.Modes, md) {
			return usageError{fmt.Sprintf("--modes: unknown mode %q (%s)", md, strings.Join(blockbench.Modes, ", "))}
		}
		chosen = append(chosen, md)
	}
	imgSize, err := bytesize.Parse(*size)
	if err != nil {
		return usageError{"--size: " + err.Error()}
	}
	budget, err := bytesize.Parse(*ramBudget)
	if err != nil {
		return usageError{"--ram-budget: " + err.Error()}
	}
	bootBytes, err := bytesize.Parse(*boot)
	if err != nil {
		return usageError{"--boot: " + err.Error()}
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
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	command := shellCommand(append([]string{"usher", "bench", "writecache"}, args...)...)
	if *model {
		w := blockbench.DefaultWorkload()
		w.Scale = *scale
		res, err := blockbench.RunWritecache(ctx, blockbench.WritecacheConfig{Targets: *targets, Workload: w, Seed: *seed, Modes: chosen, Dir: scratch})
		stop()
		if err != nil {
			return err
		}
		fmt.Fprintln(m.Stdout, "A MODEL on a virtual clock, not a measurement: the per-target rates are the paper's own.")
		if err := res.WriteTable(m.Stdout); err != nil {
			return err
		}
		rep, err := res.Report(command)
		if err != nil {
			return err
		}
		rep.Title = "MODEL (virtual clock, not a measurement): " + rep.Title
		rep.Notes = append([]string{"A model: the targets replay the paper's workload on a virtual clock with per-target rates from the paper's own figures, so its disk counts restate that input. `usher bench writecache` without --model measures."}, rep.Notes...)
		return m.writeBlockBench(rep, *out, res)
	}
	fio, err := exec.LookPath("fio")
	if err != nil {
		return fmt.Errorf("fio is needed (apt-get install -y fio): %w", err)
	}
	res, err := blockbench.RunMeasured(ctx, blockbench.MeasuredConfig{Dir: scratch, Targets: *targets, Modes: chosen, ImageSize: imgSize,
		Phases: blockbench.DesktopPhases(bootBytes, *steady, *steadyIOPS), RAMBudget: budget, Fio: fio, Progress: m.Stderr})
	stop()
	if err != nil {
		return err
	}
	rep, err := res.Report(command)
	if err != nil {
		return err
	}
	if err := rep.WriteText(m.Stdout); err != nil {
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
