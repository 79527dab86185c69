package blockbench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/block/imageexport"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/ramcache"
	"github.com/usher-vdi/usher/internal/block/writecache"
)

// Write-cache modes, in the order they are reported.
const (
	ModeServerDisk       = "server-disk"
	ModeDeviceRAM        = "device-ram"
	ModeRAMOverflow      = "ram-overflow"
	ModeRAMOverflowSmall = "ram-overflow-small"
	ModeDeviceDisk       = "device-disk"
)

// Modes lists every mode.
var Modes = []string{ModeServerDisk, ModeDeviceRAM, ModeRAMOverflow, ModeRAMOverflowSmall, ModeDeviceDisk}

// DisksPerIOPS is the IOPS one 15k RPM disk sustains in the PVS RAM-cache paper's sizing.
const DisksPerIOPS = 180

// Users is the population the PVS RAM-cache paper sizes disks for.
const Users = 500

// WritecacheConfig configures RunWritecache.
type WritecacheConfig struct {
	Targets  int
	Workload Workload
	Modes    []string // default Modes
	Dir      string   // scratch directory (image store, cache files)
	Seed     uint64
}

// ModeResult is what one mode cost the disk under the write caches.
type ModeResult struct {
	Mode   string `json:"mode"`
	Budget int64  `json:"ram_budget,omitempty"` // scaled bytes

	// Per target, averaged: operations received by the write cache and
	// operations that reached its disk.
	OpsPerTarget     float64 `json:"ops_per_target"`
	DiskOpsPerTarget float64 `json:"disk_ops_per_target"`
	DiskReads        int64   `json:"disk_reads"`
	DiskWrites       int64   `json:"disk_writes"`
	// Writes4K is the bytes written to the caches in 4 KiB units, and
	// Coalescing Writes4K per disk write (0 when nothing reached disk).
	Writes4K     int64   `json:"writes_4k"`
	Coalescing   float64 `json:"coalescing,omitempty"`
	FailedWrites int64   `json:"failed_writes"`

	// Disk IOPS per target in full-scale units: the mean over the run,
	// the mean over steady state, the 95th percentile and the peak over
	// windows.
	MeanIOPS   float64 `json:"mean_iops"`
	SteadyIOPS float64 `json:"steady_iops"`
	P95IOPS    float64 `json:"p95_iops"`
	PeakIOPS   float64 `json:"peak_iops"`
	// Disks500 is the disks 500 users need at the 95th percentile
	// (ceil(p95 × 500 / 180)); the PVS RAM-cache paper recommends at least 3 (RAID 5).
	Disks500 int `json:"disks_500"`

	// ImageReads are the reads that reached the image store (shared by
	// every target, mostly absorbed by the server RAM cache).
	ImageReads    int64   `json:"image_reads"`
	ServerHitRate float64 `json:"server_ram_cache_hit_rate"`
	Seconds       float64 `json:"seconds"`
	// WindowIOPS is the per-target disk IOPS of each window.
	WindowIOPS []float64 `json:"window_iops"`
}

// WritecacheResult is a whole run.
type WritecacheResult struct {
	Targets  int          `json:"targets"`
	Workload Workload     `json:"workload"`
	Modes    []ModeResult `json:"modes"`
	// Reduction compares ram-overflow with server-disk: 1 - p95 ratio.
	Reduction float64      `json:"reduction_vs_server_disk"`
	Seed001   []Seed001Row `json:"seed001"`
}

// Mode returns the result of mode name.
func (r *WritecacheResult) Mode(name string) (ModeResult, bool) {
	for _, m := range r.Modes {
		if m.Mode == name {
			return m, true
		}
	}
	return ModeResult{}, false
}

// RunWritecache runs every mode in turn and reports each.
func RunWritecache(ctx context.Context, cfg WritecacheConfig) (*WritecacheResult, error) {
	if cfg.Targets <= 0 {
		cfg.Targets = 8
	}
	if cfg.Workload.Scale <= 0 {
		return nil, errors.New("workload scale must be positive")
	}
	if len(cfg.Modes) == 0 {
		cfg.Modes = Modes
	}
	w := cfg.Workload
	st, name, err := makeImage(ctx, cfg.Dir, w, cfg.Seed)
	if err != nil {
		return nil, err
	}
	ops := make([][]op, cfg.Targets)
	for i := range ops {
		ops[i] = w.ops(i, cfg.Targets, cfg.Seed)
	}
	res := &WritecacheResult{Targets: cfg.Targets, Workload: w, Seed001: Seed001}
	for _, mode := range cfg.Modes {
		mr, err := runMode(ctx, cfg, st, name, mode, ops)
		if err != nil {
			return nil, fmt.Errorf("mode %s: %w", mode, err)
		}
		res.Modes = append(res.Modes, mr)
	}
	if sd, ok := res.Mode(ModeServerDisk); ok && sd.P95IOPS > 0 {
		if ro, ok := res.Mode(ModeRAMOverflow); ok {
			res.Reduction = 1 - ro.P95IOPS/sd.P95IOPS
		}
	}
	return res, nil
}

// makeImage writes a sparse raw image with data in the boot set and
// imports it into a store in dir.
func makeImage(ctx context.Context, dir string, w Workload, seed uint64) (*image.Store, string, error) {
	l := w.layout()
	raw := filepath.Join(dir, "master.raw")
	f, err := os.Create(raw)
	if err != nil {
		return nil, "", err
	}
	defer os.Remove(raw)
	if err := f.Truncate(l.size); err != nil {
		f.Close()
		return nil, "", err
	}
	r := rand.New(rand.NewPCG(seed, 0xb007))
	buf := make([]byte, mib)
	for off := int64(0); off < l.bootSet; off += mib {
		for i := 0; i+8 <= len(buf); i += 8 {
			v := r.Uint64()
			for j := range 8 {
				buf[i+j] = byte(v >> (8 * j))
			}
		}
		if _, err := f.WriteAt(buf[:min(mib, l.bootSet-off)], off); err != nil {
			f.Close()
			return nil, "", err
		}
	}
	if err := f.Close(); err != nil {
		return nil, "", err
	}
	st, err := image.Create(filepath.Join(dir, "store"))
	if err != nil {
		return nil, "", err
	}
	if _, err := st.Import(ctx, "master", raw); err != nil {
		return nil, "", err
	}
	return st, "master", nil
}

// target is one target's stack in one mode.
type target struct {
	dev   block.Device // what the target reads and writes
	cache meter.Counters
	disk  *meter.Counters // operations reaching the cache's disk; nil: none
	ram   *writecache.RAM
	close func() error
}

// newTarget puts mode's write cache over shared, target i's export of
// the image, with its files in dir and budget bytes of RAM for the RAM
// modes, and meters what the target sends it (t.cache) and what reaches
// its disk file (t.disk). Closing the target closes shared.
func newTarget(mode string, shared block.Device, dir string, i int, budget int64) (*target, error) {
	t := &target{}
	var wc block.Device
	switch mode {
	case ModeServerDisk, ModeDeviceDisk:
		// Server disk: the overlay imageexport.Images makes per connection
		// when usher stream has --write-cache. Device disk: the one
		// usher target --cache disk makes over the upstream.
		base := shared
		if mode == ModeDeviceDisk {
			base = upstream(shared)
		}
		o, err := writecache.OpenOverlay(base, filepath.Join(dir, fmt.Sprintf("t%d.wc", i)), false)
		if err != nil {
			return nil, err
		}
		t.disk = &o.Disk
		wc = o
	case ModeDeviceRAM:
		t.ram = writecache.NewRAM(upstream(shared), writecache.RAMOptions{Budget: budget})
		wc = t.ram
	case ModeRAMOverflow, ModeRAMOverflowSmall:
		of, err := block.CreateFile(filepath.Join(dir, fmt.Sprintf("t%d.overflow", i)), shared.Size())
		if err != nil {
			return nil, err
		}
		t.disk = new(meter.Counters)
		t.ram = writecache.NewRAM(upstream(shared), writecache.RAMOptions{Budget: budget, Overflow: meter.Wrap(of, t.disk)})
		wc = t.ram
	default:
		return nil, fmt.Errorf("unknown mode %q", mode)
	}
	t.dev = meter.Wrap(wc, &t.cache)
	t.close = func() error { return errors.Join(wc.Close(), shared.Close()) }
	return t, nil
}

// upstream is the stream as a device-side cache sees it, as usher target
// does: read-only; the target closes the shared export itself.
func upstream(shared block.Device) block.Device { return block.NopCloser(block.ReadOnly(shared)) }

func runMode(ctx context.Context, cfg WritecacheConfig, st *image.Store, name, mode string, ops [][]op) (ModeResult, error) {
	w := cfg.Workload
	dir, err := os.MkdirTemp(cfg.Dir, mode+"-")
	if err != nil {
		return ModeResult{}, err
	}
	defer os.RemoveAll(dir)
	// The stream server's side: the production version, shared and read
	// only, through the server RAM cache, metered as usher stream does.
	var reg meter.Registry
	cache := ramcache.New(w.scaled(w.ServerCache), 0)
	exports := &imageexport.Images{Store: st, Cache: cache, Meters: &reg}
	defer exports.Close()

	mr := ModeResult{Mode: mode}
	targets := make([]*target, len(ops))
	defer func() {
		for _, t := range targets {
			if t != nil {
				t.close()
			}
		}
	}()
	for i := range targets {
		shared, _, err := exports.Open(ctx, name, fmt.Sprintf("target-%d", i))
		if err != nil {
			return mr, err
		}
		budget := w.scaled(w.RAMHolds)
		if mode == ModeRAMOverflowSmall {
			budget = w.scaled(w.RAMDoesNotHold)
		}
		t, err := newTarget(mode, shared, dir, i, budget)
		if err != nil {
			shared.Close()
			return mr, err
		}
		if t.ram != nil {
			mr.Budget = budget
		}
		targets[i] = t
	}

	window := w.scaledDur(w.Window)
	end := (w.BootWindow + w.SteadyDuration) / time.Duration(w.Scale)
	nwin := int(end/window) + 1
	perTarget := make([][]int64, len(ops))
	failed := make([]int64, len(ops))
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, len(ops))
	for i := range ops {
		wins := make([]int64, nwin)
		perTarget[i] = wins
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := replay(ctx, targets[i], ops[i], window, wins, &failed[i]); err != nil {
				errc <- fmt.Errorf("target %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return mr, err
	}
	mr.Seconds = time.Since(start).Seconds()

	n := float64(len(ops))
	var received, writeBytes int64
	for i, t := range targets {
		s := t.cache.Snapshot()
		received += s.Reads + s.Writes
		writeBytes += s.WriteBytes
		mr.FailedWrites += failed[i]
		if t.disk != nil {
			d := t.disk.Snapshot()
			mr.DiskReads += d.Reads
			mr.DiskWrites += d.Writes
		}
	}
	mr.OpsPerTarget = float64(received) / n
	mr.DiskOpsPerTarget = float64(mr.DiskReads+mr.DiskWrites) / n
	mr.Writes4K = writeBytes / (4 * kib)
	if mr.DiskWrites > 0 {
		mr.Coalescing = float64(mr.Writes4K) / float64(mr.DiskWrites)
	}
	img := reg.Snapshot()[imageexport.LayerImage]
	mr.ImageReads = img.Reads
	if h, m := cache.Hits.Load(), cache.Misses.Load(); h+m > 0 {
		mr.ServerHitRate = float64(h) / float64(h+m)
	}

	// Per-target IOPS of each window, in full-scale units: the scaled
	// window holds 1/Scale of the operations in 1/Scale of the time.
	mr.WindowIOPS = make([]float64, nwin)
	secs := window.Seconds()
	var total int64
	for k := range nwin {
		var sum int64
		for i := range perTarget {
			sum += perTarget[i][k]
		}
		total += sum
		mr.WindowIOPS[k] = float64(sum) / n / secs
	}
	mr.MeanIOPS = float64(total) / n / end.Seconds()
	// Steady state: every target has booted.
	steadyFrom := int((w.BootWindow + w.BootDuration) / time.Duration(w.Scale) / window)
	var ss float64
	var sn int
	for k := steadyFrom; k < nwin-1; k++ {
		ss += mr.WindowIOPS[k]
		sn++
	}
	if sn > 0 {
		mr.SteadyIOPS = ss / float64(sn)
	}
	mr.P95IOPS = percentile(mr.WindowIOPS[:max(1, nwin-1)], 0.95)
	for _, v := range mr.WindowIOPS {
		mr.PeakIOPS = max(mr.PeakIOPS, v)
	}
	mr.Disks500 = int(math.Ceil(mr.P95IOPS * Users / DisksPerIOPS))
	return mr, nil
}

// replay runs a target's operations in order, counting the disk
// operations each causes into the window of its time. The target's
// caches are its own, so what its disk counters gain during an
// operation is that operation's doing.
func replay(ctx context.Context, t *target, ops []op, window time.Duration, wins []int64, failed *int64) error {
	buf := make([]byte, 64*kib)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	var last int64
	for _, o := range ops {
		p := buf[:o.n]
		var err error
		if o.write {
			err = t.dev.WriteAt(ctx, p, o.off, 0)
			if errors.Is(err, block.ErrNoSpace) {
				*failed++
				err = nil
			}
		} else {
			err = t.dev.ReadAt(ctx, p, o.off)
		}
		if err != nil {
			return err
		}
		if t.disk != nil {
			now := t.disk.Reads.Load() + t.disk.Writes.Load()
			wins[min(int(o.at/window), len(wins)-1)] += now - last
			last = now
		}
	}
	return ctx.Err()
}

func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}
