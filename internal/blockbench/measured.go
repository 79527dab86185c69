package blockbench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/benchkit"
	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/block/imageexport"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/block/ramcache"
	"github.com/usher-vdi/usher/internal/loadgen"
)

// Phase is one part of a target's life as fio job options: every target
// runs it at once, each through its own NBD connection.
type Phase struct {
	Name string
	// Args are fio options for every target's job in this phase
	// (--rw, --bssplit, --iodepth, --rate_iops, --runtime, ...).
	Args []string
}

// DesktopPhases is the desktop-like mix the measured bench drives, per
// target (one target is one desktop):
//
//   - boot: a burst of bootBytes of I/O as fast as it goes, 80 % reads,
//     random, 4 to 64 KiB, queue depth 8. Boots read most of what they
//     touch from the image; the PVS RAM-cache paper and XenServer's
//     IntelliCache measurements both show the boot storm as the read peak
//     of a VDI day.
//   - steady: 20 % reads and 80 % writes, random, mostly 4 KiB (60 %),
//     some 8, 32 and 64 KiB, queue depth 4, at steadyIOPS for steady.
//     Steady-state VDI I/O is write-heavy: the PVS RAM-cache paper's
//     steady-state measurements and common VDI sizing guidance put it at
//     about 70 to 80 % writes, mostly small.
//
// The rates are far above one real desktop's (about 10 to 15 IOPS per
// knowledge worker in the paper's sizing) so that a short run counts
// enough operations; per-target rates scale with them.
func DesktopPhases(bootBytes int64, steady time.Duration, steadyIOPS int) []Phase {
	return []Phase{
		{Name: "boot", Args: []string{"--rw=randrw", "--rwmixread=80", "--bssplit=4k/40:16k/30:64k/30", "--iodepth=8",
			"--io_size=" + strconv.FormatInt(bootBytes, 10)}},
		{Name: "steady", Args: []string{"--rw=randrw", "--rwmixread=20", "--bssplit=4k/60:8k/20:32k/10:64k/10", "--iodepth=4",
			"--rate_iops=" + strconv.Itoa(steadyIOPS), "--time_based", fmt.Sprintf("--runtime=%dms", max(steady.Milliseconds(), 100))}},
	}
}

// MeasuredConfig configures RunMeasured.
type MeasuredConfig struct {
	Dir       string   // scratch directory: image store and cache files, on the disk measured
	Targets   int      // default 4
	Modes     []string // default Modes
	ImageSize int64    // default 256 MiB
	Phases    []Phase  // default DesktopPhases(64 MiB, 6s, 200)
	// RAMBudget is each target's RAM in the RAM modes (default 64 MiB,
	// more than a default run writes: about 13 MiB at boot and 12 MiB in
	// the steady state); SmallBudget the ram-overflow-small mode's
	// (default 1 MiB, so that it overflows).
	RAMBudget, SmallBudget int64
	ServerCache            int64 // the stream server's RAM cache (default: the image's size)
	Fio                    string
	Progress               io.Writer
}

func (c *MeasuredConfig) defaults() {
	c.Targets = max(c.Targets, 1)
	if len(c.Modes) == 0 {
		c.Modes = Modes
	}
	if c.ImageSize <= 0 {
		c.ImageSize = 256 * mib
	}
	if len(c.Phases) == 0 {
		c.Phases = DesktopPhases(64*mib, 6*time.Second, 200)
	}
	if c.RAMBudget <= 0 {
		c.RAMBudget = 64 * mib
	}
	if c.SmallBudget <= 0 {
		c.SmallBudget = mib
	}
	if c.ServerCache <= 0 {
		c.ServerCache = c.ImageSize
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// MeasuredMode is what one write-cache mode's run cost, counted where it
// happened. Totals are over every target.
type MeasuredMode struct {
	Mode    string  `json:"mode"`
	Budget  int64   `json:"ram_budget,omitempty"`
	Seconds float64 `json:"seconds"` // the phases' wall time

	// Client: what fio did (from its JSON). Cache: what the write caches
	// received (the meter in front of them). Disk: what reached the
	// caches' files (their meters). Image: reads that reached the image
	// store, under the server's RAM cache.
	ClientReads, ClientWrites int64
	CacheReads, CacheWrites   int64
	DiskReads, DiskWrites     int64
	DiskWriteBytes            int64
	ImageReads                int64
	// PeakDiskOps is the most operations that reached the cache files in
	// one second, all targets together.
	PeakDiskOps int64 `json:"peak_disk_ops_per_second"`

	// Device: the block device holding Dir, from its diskstats, after a
	// syncfs at the end of the mode, over the mode's whole run: requests
	// the block layer completed (merged), everything on that device
	// included. Absent when Dir is on no block device.
	Device                               string `json:"device,omitempty"`
	DevReads, DevWrites, DevWriteSectors int64
}

// PerTargetSecond divides n operations among the targets and seconds.
func (m MeasuredMode) PerTargetSecond(n int64, targets int) float64 {
	if m.Seconds <= 0 || targets <= 0 {
		return 0
	}
	return float64(n) / float64(targets) / m.Seconds
}

// MeasuredResult is a whole measured run.
type MeasuredResult struct {
	Targets   int            `json:"targets"`
	ImageSize int64          `json:"image_size"`
	Phases    []Phase        `json:"phases"`
	Modes     []MeasuredMode `json:"modes"`
	Device    string         `json:"device"` // or why there is none
	Client    string         `json:"client"`
	Seed001   []Seed001Row   `json:"seed_001_published"`
}

// RunMeasured drives real fio jobs, one NBD connection per target,
// through each write-cache mode's layers and files (the layers usher
// stream and usher target use, stacked by newTarget: see the package
// doc), and counts the operations at the
// client, at the caches, at their files and on the disk.
func RunMeasured(ctx context.Context, cfg MeasuredConfig) (*MeasuredResult, error) {
	cfg.defaults()
	if cfg.Fio == "" {
		return nil, errors.New("fio is needed (apt-get install -y fio)")
	}
	raw := filepath.Join(cfg.Dir, "image.raw")
	if err := writeRandomFile(raw, cfg.ImageSize); err != nil {
		return nil, err
	}
	st, err := image.Create(filepath.Join(cfg.Dir, "store"))
	if err != nil {
		return nil, err
	}
	if _, err := st.Import(ctx, "img", raw); err != nil {
		return nil, err
	}
	os.Remove(raw)
	plan := benchkit.PlanCPUs()
	_, client := benchkit.Command(plan, cfg.Fio)
	res := &MeasuredResult{Targets: cfg.Targets, ImageSize: cfg.ImageSize, Phases: cfg.Phases, Client: client, Seed001: Seed001}
	disk, derr := DiskOf(cfg.Dir)
	if derr != nil {
		res.Device = derr.Error()
	} else {
		res.Device = disk.Name
	}
	for _, mode := range cfg.Modes {
		m, err := runMeasuredMode(ctx, cfg, plan, st, mode, disk, derr == nil)
		if err != nil {
			return nil, fmt.Errorf("mode %s: %w", mode, err)
		}
		res.Modes = append(res.Modes, m)
	}
	return res, nil
}

func runMeasuredMode(ctx context.Context, cfg MeasuredConfig, plan benchkit.Plan, st *image.Store, mode string, disk Disk, hasDisk bool) (MeasuredMode, error) {
	m := MeasuredMode{Mode: mode}
	dir, err := os.MkdirTemp(cfg.Dir, mode+"-")
	if err != nil {
		return m, err
	}
	defer os.RemoveAll(dir)
	var reg meter.Registry
	exports := &imageexport.Images{Store: st, Cache: ramcache.New(cfg.ServerCache, 0), Meters: &reg}
	defer exports.Close()
	devs := nbd.Devices{}
	var targets []*target
	defer func() {
		for _, t := range targets {
			t.close()
		}
	}()
	for i := range cfg.Targets {
		shared, _, err := exports.Open(ctx, "img", fmt.Sprintf("target-%d", i))
		if err != nil {
			return m, err
		}
		budget := cfg.RAMBudget
		if mode == ModeRAMOverflowSmall {
			budget = cfg.SmallBudget
		}
		t, err := newTarget(mode, shared, dir, i, budget)
		if err != nil {
			shared.Close()
			return m, err
		}
		if t.ram != nil {
			m.Budget = budget
		}
		targets = append(targets, t)
		devs[fmt.Sprintf("target-%d", i)] = t.dev
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return m, err
	}
	srv := &nbd.Server{Exports: devs}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		srv.Close()
		<-served
	}()

	diskOps := func() int64 {
		var n int64
		for _, t := range targets {
			if t.disk != nil {
				s := t.disk.Snapshot()
				n += s.Reads + s.Writes
			}
		}
		return n
	}
	var dev0 DiskStats
	if hasDisk {
		if err := syncDir(cfg.Dir); err != nil {
			return m, err
		}
		if dev0, err = disk.Read(); err != nil {
			return m, err
		}
		m.Device = disk.Name
	}
	// One-second windows of the operations reaching the cache files.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last := diskOps()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				n := diskOps()
				m.PeakDiskOps = max(m.PeakDiskOps, n-last)
				last = n
			}
		}
	})
	start := time.Now()
	for _, ph := range cfg.Phases {
		fmt.Fprintf(cfg.Progress, "%-18s %-7s %d targets: fio %v\n", mode, ph.Name, cfg.Targets, ph.Args)
		r, w, err := runFioTargets(ctx, cfg, plan, ln.Addr().String(), ph)
		if err != nil {
			close(stop)
			wg.Wait()
			return m, fmt.Errorf("%s: %w", ph.Name, err)
		}
		m.ClientReads += r
		m.ClientWrites += w
	}
	close(stop)
	wg.Wait()
	m.Seconds = time.Since(start).Seconds()
	// What the caches hold in RAM stays there; what they wrote to their
	// files reaches the disk by the syncfs, counted before the files go.
	if hasDisk {
		if err := syncDir(cfg.Dir); err != nil {
			return m, err
		}
		dev1, err := disk.Read()
		if err != nil {
			return m, err
		}
		d := dev1.Sub(dev0)
		m.DevReads, m.DevWrites, m.DevWriteSectors = d.Reads, d.Writes, d.WriteSectors
	}
	for _, t := range targets {
		c := t.cache.Snapshot()
		m.CacheReads += c.Reads
		m.CacheWrites += c.Writes
		if t.disk != nil {
			d := t.disk.Snapshot()
			m.DiskReads += d.Reads
			m.DiskWrites += d.Writes
			m.DiskWriteBytes += d.WriteBytes
		}
	}
	m.ImageReads = reg.Snapshot()[imageexport.LayerImage].Reads
	fmt.Fprintf(cfg.Progress, "%-18s client %d ops, cache files %d ops, disk %d requests\n", mode, m.ClientReads+m.ClientWrites,
		m.DiskReads+m.DiskWrites, m.DevReads+m.DevWrites)
	return m, nil
}

// runFioTargets runs one fio process with a job per target, each on its
// own NBD connection to target-i at addr, and returns the reads and
// writes fio completed.
func runFioTargets(ctx context.Context, cfg MeasuredConfig, plan benchkit.Plan, addr string, ph Phase) (reads, writes int64, err error) {
	args := append([]string{"--ioengine=nbd", "--output-format=json", "--verify_state_save=0", "--group_reporting=0"}, ph.Args...)
	for i := range cfg.Targets {
		args = append(args, fmt.Sprintf("--name=%s-%d", ph.Name, i), fmt.Sprintf("--uri=nbd://%s/target-%d", addr, i))
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd, _ := benchkit.Command(plan, cfg.Fio, args...)
	cmd.Dir = cfg.Dir
	out, _, err := benchkit.Run(ctx, cmd)
	if err != nil {
		return 0, 0, fmt.Errorf("fio: %w: %.500s", err, out)
	}
	if i := bytes.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	var fo struct {
		Jobs []struct {
			Read struct {
				TotalIOs int64 `json:"total_ios"`
			} `json:"read"`
			Write struct {
				TotalIOs int64 `json:"total_ios"`
			} `json:"write"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &fo); err != nil {
		return 0, 0, fmt.Errorf("fio output: %w", err)
	}
	if len(fo.Jobs) != cfg.Targets {
		return 0, 0, fmt.Errorf("fio reported %d jobs for %d targets", len(fo.Jobs), cfg.Targets)
	}
	for _, j := range fo.Jobs {
		reads += j.Read.TotalIOs
		writes += j.Write.TotalIOs
	}
	return reads, writes, nil
}

// table sets the modes out per target and per second.
func (r *MeasuredResult) table() loadgen.Table {
	t := loadgen.Table{
		Title: fmt.Sprintf("Write caches measured: %d targets, each a real fio job on its own NBD connection; operations per target per second", r.Targets),
		Header: []string{"mode", "RAM budget", "client IOPS", "client writes %", "cache IOPS", "cache-file IOPS", "peak cache-file ops/s (all)",
			"cache-file MiB written", "image reads", "disk requests/s (diskstats)", "disk MiB written (diskstats)", "cache-file ops / server-disk's"},
	}
	var base float64
	for _, m := range r.Modes {
		if m.Mode == ModeServerDisk {
			base = m.PerTargetSecond(m.DiskReads+m.DiskWrites, r.Targets)
		}
	}
	for _, m := range r.Modes {
		budget, dev, devMiB, rel := "-", "-", "-", "-"
		if m.Budget > 0 {
			budget = fmt.Sprintf("%d MiB", m.Budget/mib)
		}
		if m.Device != "" {
			dev = fmt.Sprintf("%.1f", m.PerTargetSecond(m.DevReads+m.DevWrites, r.Targets))
			devMiB = fmt.Sprintf("%.1f", float64(m.DevWriteSectors*512)/float64(mib))
		}
		fileOps := m.PerTargetSecond(m.DiskReads+m.DiskWrites, r.Targets)
		if base > 0 {
			rel = fmt.Sprintf("%.3f", fileOps/base)
		}
		client := m.ClientReads + m.ClientWrites
		wpct := 0.0
		if client > 0 {
			wpct = 100 * float64(m.ClientWrites) / float64(client)
		}
		t.Rows = append(t.Rows, []string{m.Mode, budget, fmt.Sprintf("%.0f", m.PerTargetSecond(client, r.Targets)), fmt.Sprintf("%.0f", wpct),
			fmt.Sprintf("%.0f", m.PerTargetSecond(m.CacheReads+m.CacheWrites, r.Targets)), fmt.Sprintf("%.1f", fileOps),
			strconv.FormatInt(m.PeakDiskOps, 10), fmt.Sprintf("%.1f", float64(m.DiskWriteBytes)/float64(mib)), strconv.FormatInt(m.ImageReads, 10),
			dev, devMiB, rel})
	}
	return t
}

// seedTable prints the PVS RAM-cache paper's table as published, beside
// the measurement and not fed into it.
func seedTable() loadgen.Table {
	t := loadgen.Table{Title: "The PVS RAM-cache paper, as published (500 users; printed beside, not an input)",
		Header: []string{"platform", "hypervisor", "disk cache p95 IOPS", "disks", "RAM with overflow p95 IOPS", "disks", "saving %"}}
	for _, s := range Seed001 {
		t.Rows = append(t.Rows, []string{s.Platform, s.Hypervisor, strconv.Itoa(s.DiskIOPS), strconv.Itoa(s.DiskDisks), strconv.Itoa(s.RAMIOPS),
			strconv.Itoa(s.RAMDisks), strconv.Itoa(s.Saving)})
	}
	return t
}

// WriteTable prints the result for people.
func (r *MeasuredResult) WriteTable(out io.Writer) error {
	rep, err := r.Report("")
	if err != nil {
		return err
	}
	return rep.WriteText(out)
}

// Report returns the measured run as a report.
func (r *MeasuredResult) Report(command string) (*loadgen.Report, error) {
	rep := loadgen.NewReport("usher bench writecache: write-cache I/O measured under fio", command)
	main := r.table()
	rep.Tables = []loadgen.Table{main, seedTable()}
	rep.CSV = &main
	var phases []string
	for _, p := range r.Phases {
		phases = append(phases, fmt.Sprintf("%s %v", p.Name, p.Args))
	}
	rep.Notes = append(rep.Notes,
		fmt.Sprintf("Each target is one desktop: %s, one NBD connection per target to usher's NBD server, through the mode's write cache (the layers usher stream --write-cache and usher target --cache build) into real files. Phases: %s.",
			r.Client, strings.Join(phases, "; ")),
		"client: what fio completed; cache: what the write caches received (a meter in front); cache file: what reached the write-cache or overflow file (a meter under the cache); "+
			"image reads: reads that reached the image store, under the server's RAM cache.",
		fmt.Sprintf("disk: the requests and sectors of the block device holding the files (%s) from its diskstats, after a syncfs at the end of each mode, over the mode's run: "+
			"the block layer merges adjacent requests and the page cache gathers writes, the file system adds its journal, and anything else on that disk counts too, so it is a bound from above on what the caches cost the disk.", r.Device),
		"The PVS RAM-cache paper's figures are per 500 users on real desktops; they are printed beside, not fed in: this run's rates are a synthetic desktop mix, so compare the modes' ratios, not the absolute IOPS.",
	)
	for _, m := range r.Modes {
		h := loadgen.Headline{
			What:   fmt.Sprintf("Write cache %s, %d targets under a fio desktop mix", m.Mode, r.Targets),
			Usher:  fmt.Sprintf("%.1f cache-file ops per target per second for %.0f client IOPS", m.PerTargetSecond(m.DiskReads+m.DiskWrites, r.Targets), m.PerTargetSecond(m.ClientReads+m.ClientWrites, r.Targets)),
			Client: r.Client,
		}
		if m.Device != "" {
			h.Usher += fmt.Sprintf("; disk %.1f requests/s per target (diskstats)", m.PerTargetSecond(m.DevReads+m.DevWrites, r.Targets))
		}
		switch m.Mode {
		case ModeServerDisk, ModeDeviceDisk:
			h.Yardstick = "the PVS RAM-cache paper's disk cache: 4,968–7,455 p95 IOPS for 500 users (published)"
		case ModeRAMOverflow, ModeRAMOverflowSmall:
			h.Yardstick = "the PVS RAM-cache paper's RAM with overflow: 73–4,268 p95 IOPS for 500 users (published)"
		}
		rep.Headlines = append(rep.Headlines, h)
	}
	return rep, nil
}
