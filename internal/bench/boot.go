package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/benchkit"
	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/block/imageexport"
	"github.com/usher-vdi/usher/internal/blockbench"
	"github.com/usher-vdi/usher/internal/boottest"
)

// The boot experiment (issue 19, item 4; seed 001 measured on real
// boots): N VMs under QEMU (software emulation, one vCPU each) boot the
// same Debian image (internal/boottest) at once through each write-cache
// mode and run its scripted workload (USHER-BOOTED, then usher.write_mb
// MiB of random data written and synced, USHER-DONE, power off). Each
// mode starts its usher processes afresh, so every pass is a cold boot
// of the stream's RAM cache:
//
//	local               the image as a local raw file (QEMU snapshot=on): the yardstick of boot time
//	server-disk         usher stream --write-cache: each VM's writes on the stream server's disk
//	ram                 usher target --cache ram, one per VM (the device): a budget that holds the writes
//	ram-overflow        usher target --cache ram-overflow, a budget that holds the writes
//	ram-overflow-small  usher target --cache ram-overflow, a budget that does not: the rest overflows
//
// The counts come from where the I/O happened: each VM's virtio disk
// (QEMU's own counters, over its monitor), each usher target's meters
// (what reached the stream, the device RAM and the overflow file), the
// stream's meters (what it received, the blocks it read from the store,
// the server-disk write caches) and the disk holding the files
// (/sys/block diskstats, after a syncfs). Nothing is modelled: the
// figures of the issue are computed from these counts and marked met or
// not.

// Boot modes.
const (
	BootLocal            = "local"
	BootServerDisk       = "server-disk"
	BootRAM              = "ram"
	BootRAMOverflow      = "ram-overflow"
	BootRAMOverflowSmall = "ram-overflow-small"
)

// BootModes are every mode.
var BootModes = []string{BootLocal, BootServerDisk, BootRAM, BootRAMOverflow, BootRAMOverflowSmall}

// DefaultBootModes is the order the passes run by default: the local
// file first and last, around usher's modes, so that a machine whose load
// drifts over the run moves the yardstick as it moves them (the boot-time
// figure takes the local passes' mean).
var DefaultBootModes = []string{BootLocal, BootServerDisk, BootRAM, BootRAMOverflow, BootRAMOverflowSmall, BootLocal}

// Bounds of the boot experiment.
const (
	MaxBootTargets = 8
	// GoalBootRatio bounds boot time through usher over the local file's.
	GoalBootRatio = 1.2
	// GoalOverflowFewer: with a budget that does not hold the writes,
	// the disk sees this many times fewer writes than the guests made.
	GoalOverflowFewer = 5.0
	// GoalSharedReads bounds the blocks the stream reads from its store
	// with N targets booting together over those one target alone reads.
	GoalSharedReads = 1.1
)

// bootImage is the export name of the bench's image.
const bootImage = "golden"

// BootConfig configures RunBoot.
type BootConfig struct {
	Targets   int      // VMs booting at once (default 4, at most MaxBootTargets)
	Modes     []string // default DefaultBootModes; only local may come twice
	WriteMB   int      // each guest's workload writes (default 48)
	WriteMode string   // how: boottest.WriteLarge (default, dd bs=1M) or WriteSmall (a desktop's 4 KiB writes, fsyncs)
	RAM       int64    // budget of ram and ram-overflow (default 256 MiB)
	SmallRAM  int64    // budget of ram-overflow-small (default 16 MiB)
	MemoryMB  int      // each VM's memory (default 384)
	// PassTimeout bounds each mode's pass (default 6 minutes).
	PassTimeout time.Duration
	// Solo, when set, also boots one target alone before each usher
	// mode's pass, through that mode: the blocks one boot reads from the
	// store, the yardstick of the stream's sharing.
	Solo bool
	// Dir is the scratch directory: the image store, the write caches
	// and the overflow files, on the disk measured.
	Dir string
	// Self is the command line that runs usher (its stream and target).
	Self []string
	// Image is the boot image; nil: boottest.Build.
	Image    *boottest.BootImage
	Progress io.Writer
}

func (c *BootConfig) defaults() {
	if c.Targets <= 0 {
		c.Targets = 4
	}
	if len(c.Modes) == 0 {
		c.Modes = DefaultBootModes
	}
	if c.WriteMB <= 0 {
		c.WriteMB = 48
	}
	if c.WriteMode == "" {
		c.WriteMode = boottest.WriteLarge
	}
	if c.RAM <= 0 {
		c.RAM = 256 << 20
	}
	if c.SmallRAM <= 0 {
		c.SmallRAM = 16 << 20
	}
	if c.MemoryMB <= 0 {
		c.MemoryMB = 384
	}
	if c.PassTimeout <= 0 {
		c.PassTimeout = 6 * time.Minute
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// BootTarget is one VM's boot in one mode.
type BootTarget struct {
	Name string `json:"name"`
	// StartSeconds is when QEMU started, from the pass's start: the VMs
	// start at once unless they wait for a VM slot (boottest.EnvVMs)
	// that another program's VMs hold.
	StartSeconds float64 `json:"start_seconds"`
	// BootSeconds is from QEMU's start to USHER-BOOTED; DoneSeconds to
	// USHER-DONE (the workload's writes synced).
	BootSeconds float64 `json:"boot_seconds"`
	DoneSeconds float64 `json:"done_seconds"`
	Wrote       string  `json:"wrote"`
	// Guest: the VM's virtio disk as QEMU counted it (query-blockstats).
	Guest LayerIO `json:"guest"`
	// Stream: what this target's usher target sent the stream (device
	// modes); RAM: what reached its write cache (the meter in front of
	// it, the guest's I/O as it reached the device); Overflow: what
	// reached its overflow file.
	Stream   *LayerIO `json:"stream,omitempty"`
	RAM      *LayerIO `json:"device_ram,omitempty"`
	Overflow *LayerIO `json:"overflow,omitempty"`
	// UsherCPUSeconds is the CPU its usher target used over the pass.
	UsherCPUSeconds float64 `json:"usher_target_cpu_seconds,omitempty"`
}

// BootMode is one mode's pass: every target booting at once.
type BootMode struct {
	Mode    string       `json:"mode"`
	Budget  int64        `json:"ram_budget,omitempty"`
	Targets []BootTarget `json:"targets"`
	Seconds float64      `json:"seconds"` // the pass, first VM start to the last one's end
	// Load is the machine's 1-minute load average at the pass's start
	// and end; OtherVMs the QEMU processes of other programs running at
	// its start: both say how shared the machine was.
	Load     [2]float64 `json:"load_average"`
	OtherVMs int        `json:"other_vms"`

	// The stream's meters (usher modes): what it received from the
	// targets (through its RAM cache), the blocks it read from the store
	// under that cache (64 KiB each, a block once while cached), and what
	// reached the server-disk write caches.
	StreamReceived *LayerIO `json:"stream_received,omitempty"`
	StoreReads     *LayerIO `json:"store_reads,omitempty"`
	ServerDisk     *LayerIO `json:"server_disk,omitempty"`
	Private        *LayerIO `json:"private,omitempty"`
	// StreamCPUSeconds is the CPU usher stream used over the pass.
	StreamCPUSeconds float64 `json:"stream_cpu_seconds,omitempty"`

	// Disk: the block device holding the files, from its diskstats
	// around the pass (after a syncfs), everything on it included.
	Disk *blockbench.DiskStats `json:"disk,omitempty"`

	// Solo is one target booting alone through the mode just before
	// (BootConfig.Solo).
	Solo *BootMode `json:"solo,omitempty"`
}

// Guest sums the targets' guest I/O.
func (m BootMode) Guest() LayerIO {
	var s LayerIO
	for _, t := range m.Targets {
		s = s.Add(t.Guest)
	}
	return s
}

// Sum sums a per-target layer (nil where the mode has none).
func (m BootMode) Sum(layer func(BootTarget) *LayerIO) *LayerIO {
	var s *LayerIO
	for _, t := range m.Targets {
		if l := layer(t); l != nil {
			if s == nil {
				s = new(LayerIO)
			}
			*s = s.Add(*l)
		}
	}
	return s
}

// BootSeconds returns the median and the largest boot time.
func (m BootMode) BootSeconds() (median, most float64) {
	return medianMax(m.Targets, func(t BootTarget) float64 { return t.BootSeconds })
}

// DoneSeconds returns the median and the largest time to USHER-DONE.
func (m BootMode) DoneSeconds() (median, most float64) {
	return medianMax(m.Targets, func(t BootTarget) float64 { return t.DoneSeconds })
}

func medianMax(ts []BootTarget, f func(BootTarget) float64) (float64, float64) {
	if len(ts) == 0 {
		return 0, 0
	}
	v := make([]float64, len(ts))
	for i, t := range ts {
		v[i] = f(t)
	}
	sort.Float64s(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return med, v[len(v)-1]
}

// DiskWrites returns the writes that reached a disk through usher's
// write caches, by their meters: the overflow files, the server-disk
// write caches and the image itself (private).
func (m BootMode) DiskWrites() int64 {
	var n int64
	for _, l := range []*LayerIO{m.Sum(func(t BootTarget) *LayerIO { return t.Overflow }), m.ServerDisk, m.Private} {
		if l != nil {
			n += l.Writes
		}
	}
	return n
}

// BootResult is a whole run.
type BootResult struct {
	Targets   int                     `json:"targets"`
	WriteMB   int                     `json:"write_mb"`
	WriteMode string                  `json:"write_mode"` // boottest.WriteLarge or WriteSmall
	MemoryMB  int                     `json:"memory_mb"`
	Image     string                  `json:"image"` // its recipe's key
	Modes     []BootMode              `json:"modes"`
	Device    string                  `json:"device"` // the disk measured, or why none
	CPUs      int                     `json:"cpus"`
	Seed001   []blockbench.Seed001Row `json:"seed_001_published"`
	Figures   []BootFigure            `json:"figures"`
	Errors    map[string]string       `json:"errors,omitempty"`
}

// Mode returns a mode's pass.
func (r *BootResult) Mode(name string) (BootMode, bool) {
	for _, m := range r.Modes {
		if m.Mode == name {
			return m, true
		}
	}
	return BootMode{}, false
}

// RunBoot runs the boot experiment. It returns what was measured with an
// error when a pass fails, and an error wrapping
// boottest.ErrUnavailable when this machine cannot boot the VMs.
func RunBoot(ctx context.Context, cfg BootConfig) (*BootResult, error) {
	cfg.defaults()
	switch {
	case cfg.Targets > MaxBootTargets:
		return nil, fmt.Errorf("at most %d targets", MaxBootTargets)
	case len(cfg.Self) == 0:
		return nil, errors.New("the boot bench needs the usher binary to start usher stream and usher target")
	case cfg.Dir == "":
		return nil, errors.New("the boot bench needs a scratch directory")
	}
	for _, m := range cfg.Modes {
		if !slices.Contains(BootModes, m) {
			return nil, fmt.Errorf("unknown boot mode %q (%s)", m, strings.Join(BootModes, ", "))
		}
	}
	img := cfg.Image
	if img == nil {
		var err error
		img, err = boottest.Build(ctx, boottest.BuildOptions{Logf: func(f string, a ...any) { fmt.Fprintf(cfg.Progress, f+"\n", a...) }})
		if err != nil {
			return nil, err
		}
	}
	b := &bootBench{cfg: cfg, img: img}
	res := &BootResult{Targets: cfg.Targets, WriteMB: cfg.WriteMB, WriteMode: cfg.WriteMode, MemoryMB: cfg.MemoryMB, Image: img.Key, CPUs: runtime.NumCPU(),
		Seed001: blockbench.Seed001, Errors: map[string]string{}}
	if disk, err := blockbench.DiskOf(cfg.Dir); err != nil {
		res.Device = err.Error()
	} else {
		res.Device, b.disk = disk.Name, &disk
	}
	if usherModes(cfg.Modes) {
		start := time.Now()
		// A store of the run's own, removed at its end (--dir may be
		// kept across runs).
		dir, err := os.MkdirTemp(cfg.Dir, "store-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		b.store = filepath.Join(dir, "store")
		st, err := image.Create(b.store)
		if err == nil {
			_, err = st.Import(ctx, bootImage, img.Disk)
		}
		if err != nil {
			return nil, fmt.Errorf("import the boot image: %w", err)
		}
		b.progress("imported the boot image %s into the store in %v", img.Key, time.Since(start).Round(time.Millisecond))
	}
	var errs []error
	for _, mode := range cfg.Modes {
		var solo *BootMode
		if cfg.Solo && mode != BootLocal {
			s, err := b.pass(ctx, mode, 1, "solo-"+mode)
			if err != nil {
				res.Errors["solo-"+mode] = err.Error()
				errs = append(errs, fmt.Errorf("solo %s: %w", mode, err))
			} else {
				solo = &s
			}
		}
		m, err := b.pass(ctx, mode, cfg.Targets, mode)
		m.Solo = solo
		if err != nil {
			res.Errors[mode] = err.Error()
			errs = append(errs, fmt.Errorf("%s: %w", mode, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		res.Modes = append(res.Modes, m)
	}
	bootMetricsClient.CloseIdleConnections()
	res.Figures = res.figures()
	if len(res.Errors) == 0 {
		res.Errors = nil
	}
	return res, errors.Join(errs...)
}

func usherModes(modes []string) bool {
	return slices.ContainsFunc(modes, func(m string) bool { return m != BootLocal })
}

type bootBench struct {
	cfg   BootConfig
	img   *boottest.BootImage
	store string // the image store's directory
	disk  *blockbench.Disk
}

func (b *bootBench) progress(format string, args ...any) {
	fmt.Fprintf(b.cfg.Progress, "boot: "+format+"\n", args...)
}

// bootVM is one target of a pass: its usher target (device modes) and
// its VM.
type bootVM struct {
	name   string
	target *bootProc
	cpu    benchkit.Meter
	cpu0   benchkit.Usage
	disk   string // what QEMU opens
	qmp    string
	out    BootTarget
	err    error
}

// pass boots n targets at once through mode.
func (b *bootBench) pass(ctx context.Context, mode string, n int, label string) (BootMode, error) {
	m := BootMode{Mode: mode}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.PassTimeout)
	defer cancel()
	dir, err := os.MkdirTemp(b.cfg.Dir, label+"-")
	if err != nil {
		return m, err
	}
	defer os.RemoveAll(dir)
	b.progress("%s: %d target(s), mode %s", label, n, mode)

	var stream *bootProc
	var streamCPU benchkit.Meter
	var streamCPU0 benchkit.Usage
	var streamAddr, streamMetrics string
	if mode != BootLocal {
		if streamAddr, err = freeTCP(); err == nil {
			streamMetrics, err = freeTCP()
		}
		if err != nil {
			return m, err
		}
		args := []string{"stream", "--store", b.store, "--listen", streamAddr,
			"--metrics-listen", streamMetrics, "--log-level", "warn"}
		if mode == BootServerDisk {
			args = append(args, "--write-cache", filepath.Join(dir, "server-wc"))
		}
		if stream, err = startBootProc(ctx, "usher stream", b.cfg.Self, args, "tcp", streamAddr, streamMetrics); err != nil {
			return m, err
		}
		defer stream.kill()
		streamCPU = stream.cpu()
	}

	vms := make([]*bootVM, n)
	defer func() {
		for _, v := range vms {
			if v != nil && v.target != nil {
				v.target.kill()
			}
		}
	}()
	for i := range vms {
		v := &bootVM{name: fmt.Sprintf("%s-%d", label, i+1), qmp: filepath.Join(dir, fmt.Sprintf("qmp-%d.sock", i+1))}
		vms[i] = v
		switch mode {
		case BootLocal:
			v.disk = b.img.Disk
		case BootServerDisk:
			v.disk = "nbd://" + streamAddr + "/" + bootImage
		default:
			sock := filepath.Join(dir, fmt.Sprintf("target-%d.sock", i+1))
			metrics, err := freeTCP()
			if err != nil {
				return m, err
			}
			args := []string{"target", "--upstream", "nbd://" + streamAddr + "/" + bootImage, "--listen", "unix:" + sock,
				"--metrics-listen", metrics, "--log-level", "warn"}
			switch mode {
			case BootRAM:
				args = append(args, "--cache", "ram", "--ram", strconv.FormatInt(b.cfg.RAM, 10))
				m.Budget = b.cfg.RAM
			case BootRAMOverflow, BootRAMOverflowSmall:
				budget := b.cfg.RAM
				if mode == BootRAMOverflowSmall {
					budget = b.cfg.SmallRAM
				}
				args = append(args, "--cache", "ram-overflow", "--ram", strconv.FormatInt(budget, 10),
					"--overflow", filepath.Join(dir, fmt.Sprintf("overflow-%d.bin", i+1)))
				m.Budget = budget
			}
			if v.target, err = startBootProc(ctx, "usher target "+v.name, b.cfg.Self, args, "unix", sock, metrics); err != nil {
				return m, err
			}
			v.cpu = v.target.cpu()
			v.disk = "nbd+unix:///?socket=" + sock
		}
	}

	// Counters from here: the disk after a syncfs, the processes' CPU.
	var disk0 blockbench.DiskStats
	if b.disk != nil {
		if err := syncFS(b.cfg.Dir); err != nil {
			return m, err
		}
		if disk0, err = b.disk.Read(); err != nil {
			return m, err
		}
	}
	if streamCPU != nil {
		if streamCPU0, err = streamCPU(); err != nil {
			return m, err
		}
	}
	for _, v := range vms {
		if v.cpu != nil {
			if v.cpu0, err = v.cpu(); err != nil {
				return m, err
			}
		}
	}

	m.Load[0], m.OtherVMs = loadAverage(), runningQEMUs()
	start := time.Now()
	var wg sync.WaitGroup
	for _, v := range vms {
		wg.Go(func() { v.out, v.err = b.boot(ctx, v, mode, start) })
	}
	wg.Wait()
	m.Seconds = time.Since(start).Seconds()
	m.Load[1] = loadAverage()
	var errs []error
	for _, v := range vms {
		if v.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", v.name, v.err))
		}
	}
	if len(errs) > 0 {
		return m, errors.Join(errs...)
	}

	// What each layer counted.
	for _, v := range vms {
		if v.target == nil {
			continue
		}
		layers, err := scrapeLayers(ctx, v.target.metrics)
		if err != nil {
			return m, err
		}
		up, ram := layers["upstream"], layers["writecache_ram"]
		v.out.Stream, v.out.RAM = &up, &ram
		if mode != BootRAM {
			of := layers["overflow"]
			v.out.Overflow = &of
		}
		u, err := v.cpu()
		if err != nil {
			return m, err
		}
		v.out.UsherCPUSeconds = u.Sub(v.cpu0).CPU().Seconds()
	}
	if stream != nil {
		layers, err := scrapeLayers(ctx, streamMetrics)
		if err != nil {
			return m, err
		}
		recv, store, private := layers[imageexport.LayerRAMCache], layers[imageexport.LayerImage], layers[imageexport.LayerPrivate]
		m.StreamReceived, m.StoreReads, m.Private = &recv, &store, &private
		if mode == BootServerDisk {
			sd := layers[imageexport.LayerWriteDisk]
			m.ServerDisk = &sd
		}
		u, err := streamCPU()
		if err != nil {
			return m, err
		}
		m.StreamCPUSeconds = u.Sub(streamCPU0).CPU().Seconds()
	}
	for _, v := range vms {
		if v.target != nil {
			if err := v.target.stop(); err != nil {
				return m, err
			}
		}
		m.Targets = append(m.Targets, v.out)
	}
	if stream != nil {
		if err := stream.stop(); err != nil {
			return m, err
		}
	}
	// What the caches wrote has reached the disk by the syncfs, counted
	// before the scratch files go.
	if b.disk != nil {
		if err := syncFS(b.cfg.Dir); err != nil {
			return m, err
		}
		disk1, err := b.disk.Read()
		if err != nil {
			return m, err
		}
		d := disk1.Sub(disk0)
		m.Disk = &d
	}
	med, _ := m.BootSeconds()
	g := m.Guest()
	b.progress("%s: booted in %.1f s (median), %.0f s for the pass; the guests made %d reads and %d writes, %d writes reached usher's disk files",
		label, med, m.Seconds, g.Reads, g.Writes, m.DiskWrites())
	return m, nil
}

// boot boots one VM to its workload's end and reads its disk's counters
// before QEMU goes.
func (b *bootBench) boot(ctx context.Context, v *bootVM, mode string, passStart time.Time) (BootTarget, error) {
	t := BootTarget{Name: v.name}
	opt := boottest.VMOptions{Name: v.name, Image: b.img, Disk: v.disk, Snapshot: mode == BootLocal, WriteMB: b.cfg.WriteMB, WriteMode: b.cfg.WriteMode,
		MemoryMB: b.cfg.MemoryMB, Timeout: b.cfg.PassTimeout,
		QEMUArgs: []string{"-qmp", "unix:" + v.qmp + ",server=on,wait=off", "-no-shutdown"}}
	vm, err := boottest.StartVM(ctx, opt)
	if err != nil {
		return t, err
	}
	t.StartSeconds = time.Since(passStart).Seconds()
	defer vm.Kill()
	if _, err := vm.WaitFor(ctx, boottest.MarkerDone); err != nil {
		return t, fmt.Errorf("%w\n%s", err, lastLines(vm.Serial(), 15))
	}
	q, err := dialQMP(ctx, v.qmp)
	if err != nil {
		return t, err
	}
	defer q.close()
	if err := q.waitShutdown(ctx, time.Minute); err != nil {
		return t, err
	}
	if t.Guest, err = q.blockStats(); err != nil {
		return t, err
	}
	// The server-disk write cache goes with the VM's connection and the
	// overflow file with its target: write back what they hold before
	// (a real device's overflow file lives the whole session, its writes
	// all reach the disk), so that the disk's counters see it.
	if err := syncFS(b.cfg.Dir); err != nil {
		return t, err
	}
	q.do("quit") // QEMU may close the monitor before it answers
	r, err := vm.Result(ctx)
	if err != nil {
		return t, err
	}
	done, _ := vm.At(boottest.MarkerDone)
	t.BootSeconds, t.DoneSeconds, t.Wrote = r.BootTime.Seconds(), done.Seconds(), r.Wrote
	if want := fmt.Sprintf("%s %d MiB", boottest.MarkerWrote, b.cfg.WriteMB); r.Wrote != want {
		return t, fmt.Errorf("the workload said %q, want %q", r.Wrote, want)
	}
	if r.Marker != "" {
		return t, fmt.Errorf("a first boot found an earlier boot's marker %q", r.Marker)
	}
	return t, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// loadAverage returns the machine's 1-minute load average, 0 when
// unknown.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// runningQEMUs counts the qemu-system processes running on the machine.
func runningQEMUs() int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm")); err == nil && strings.HasPrefix(string(b), "qemu-system") {
			n++
		}
	}
	return n
}
