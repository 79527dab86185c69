package blockbench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/usher-vdi/usher/internal/benchkit"
	"github.com/usher-vdi/usher/internal/block/hostexport"
	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/block/imageexport"
	"github.com/usher-vdi/usher/internal/block/nbd"
)

// HostcacheConfig configures RunHostcache, the host-cache experiment
// (`usher bench hostcache`): seed 003's (XenServer IntelliCache, the
// table in shared/data/seed-tables.md) on one machine.
//
//   - central storage is one `usher stream` process with its RAM cache
//     off (--ram-cache 0), so that every read it serves comes from its
//     disk, and server-side write caches (--write-cache) for clients that
//     write to it. Its meter counts what it serves: every read and write
//     of every connection passes the "writecache_disk" layer, and reads
//     that reach the image store's files also pass "image". The bench
//     reads its /metrics every second.
//   - H hosts, each an `usher hostcache` process (one cache directory,
//     one export per VM, writes to local overlays), and V VMs per host,
//     played by one load generator in a process of its own (`usher bench
//     hostcache-vms`, pinned to the client's CPU), one NBD connection
//     per VM.
//
// Each VM replays the write-cache experiment's documented desktop
// workload (the package documentation says where each figure comes
// from): a boot of 70,000 reads (90 % 4 KiB, 6 % 8 KiB, 2 % 16 KiB,
// 2 % 64 KiB, random over a 320 MiB boot set every VM shares) with
// 25 MB of writes (random in a 64 MiB hot region), then a steady state
// of 10 IOPS, 90 % writes (70 % 4 KiB; 80 % rewrites of the hot region,
// 20 % fresh data), reads half of the VM's own written blocks and half
// of the boot set. Scale divides the counts and sizes (never the I/O
// sizes); the steady state lasts Steady at the workload's 10 IOPS per
// VM. The VMs of every host boot at once (the storm), each as fast as
// BootDepth requests in flight are answered; the steady state runs on
// its schedule (an open model). Every read is checked byte for byte
// against the image (a pattern every VM can compute) or against the
// VM's own earlier write.
//
// Passes, as seed 003's stages (each VM connection is a new boot: its
// writes of the last pass are gone):
//
//	baseline     VMs straight at the stream, each with a server-side write cache
//	cold         through the host caches, their directories empty
//	warm         the same daemons again: the caches hold what cold read
//	persist      the daemons stopped and started again on their directories, then a third
//	             pass: seed 003's "Write Cache Persist" stage, run on the read cache that the
//	             cold and warm passes populated and that survived the daemons' restart
//	nbdkit-cold  the yardstick: per host, nbdkit's cache filter (cache-on-read) in front of the
//	nbdkit-warm  stream, and per VM an nbdkit cow filter in front of it (nbdkit's overlay is shared
//	             by every connection, so one per VM keeps each VM's writes its own); cold, then warm.
//	             nbdkit keeps its cache in a temporary file that goes with the process: no persist.
//
// The cold pass and the nbdkit cold pass replay the same operations as
// the baseline; warm and persist new ones of the same workload (another
// seed), as seed 003's Login VSI runs repeated a workload, not a trace.
//
// Last, fio (nbd engine, as `usher bench nbd` runs it) reads 4 KiB at
// random over the boot set, which both caches hold, from the first
// host's warm cache (its warm/IMAGE export) and from the first host's
// nbdkit cache filter, given the same threads as usher's workers,
// rounds interleaved with nbdkit's null plugin (the client's ceiling).
type HostcacheConfig struct {
	Dir  string   // scratch: image store, caches, write caches, nbdkit's files
	Self []string // the command line that runs usher
	// Hosts and VMs per host (default 4 and 6).
	Hosts, VMs int
	// Scale divides the workload's operation counts and sizes (default
	// DefaultHostcacheScale).
	Scale int
	// Steady is each VM's steady state (default 20 s).
	Steady time.Duration
	// BootDepth is each VM's requests in flight at boot (default 4).
	BootDepth int
	Seed      uint64
	// CacheSize is each host cache's --size (default: the image's size).
	CacheSize int64
	// Fio and Nbdkit are the binaries; "" skips what needs them.
	Fio, Nbdkit string
	// Runtime and Rounds shape the 4 KiB read comparison (default 5 s, 3).
	Runtime time.Duration
	Rounds  int
	// Progress receives a line now and then.
	Progress io.Writer
}

// DefaultHostcacheScale is the default divisor of the workload: 17,500
// boot reads per VM over an 80 MiB boot set, so that a default run
// (4 hosts × 6 VMs, six passes and the read comparison) takes a few
// minutes on two cores.
const DefaultHostcacheScale = 4

// The image every VM boots, and the hosts' cache block.
const (
	hostcacheImage = "desktop"
	hostcacheBlock = 64 * kib
	// nbdkitThreads is nbdkit's --threads: usher's NBD server's default
	// requests in progress per connection (nbd.Server.Workers).
	nbdkitThreads = 16
)

// Goals of the host-cache experiment (issue 16).
const (
	GoalPersistReduction = 0.999 // fewer central I/Os, persist vs baseline
	GoalStormRatio       = 1.05  // upstream reads per distinct block, cold storm
	GoalWarmReads        = 1.0   // 4 KiB random reads, warm usher over nbdkit's cache filter
)

func (c *HostcacheConfig) defaults() {
	if c.Hosts <= 0 {
		c.Hosts = 4
	}
	if c.VMs <= 0 {
		c.VMs = 6
	}
	if c.Scale <= 0 {
		c.Scale = DefaultHostcacheScale
	}
	if c.Steady <= 0 {
		c.Steady = 20 * time.Second
	}
	if c.BootDepth <= 0 {
		c.BootDepth = 4
	}
	if c.Runtime <= 0 {
		c.Runtime = 5 * time.Second
	}
	if c.Rounds <= 0 {
		c.Rounds = 3
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// HostcacheWorkload is the workload of each VM at scale, in the form
// Workload.ops takes it: every boot starts at once, and the steady
// state lasts steady at the workload's full-scale rate.
func HostcacheWorkload(scale int, steady time.Duration) Workload {
	w := DefaultWorkload()
	w.Scale = scale
	w.BootWindow = 0
	w.SteadyDuration = steady*time.Duration(scale) + w.BootDuration
	return w
}

// CentralSecond is one second of central storage I/O.
type CentralSecond struct {
	At     float64 `json:"at"` // seconds from the pass's start, at the second's end
	Reads  float64 `json:"reads"`
	Writes float64 `json:"writes"`
}

// CentralIO is the central storage's I/O over a stage or a pass:
// operations the stream served (reads and writes of every connection,
// at its "writecache_disk" layer) and, of the reads, those that reached
// the image store's files ("image"). The per-second maxima are over
// one-second windows (a last window shorter than a second counts its
// operations, not their rate).
type CentralIO struct {
	Seconds    float64         `json:"seconds"`
	Reads      int64           `json:"reads"`
	Writes     int64           `json:"writes"`
	ImageReads int64           `json:"image_reads"`
	MaxReads   float64         `json:"max_read_iops"`
	MaxWrites  float64         `json:"max_write_iops"`
	MaxTotal   float64         `json:"max_total_iops"`
	PerSecond  []CentralSecond `json:"per_second"`
}

// Total is reads and writes.
func (c CentralIO) Total() int64 { return c.Reads + c.Writes }

// Mean is the mean total IOPS.
func (c CentralIO) Mean() float64 {
	if c.Seconds <= 0 {
		return 0
	}
	return float64(c.Total()) / c.Seconds
}

// join is c then b.
func (c CentralIO) join(b CentralIO) CentralIO {
	out := CentralIO{Seconds: c.Seconds + b.Seconds, Reads: c.Reads + b.Reads, Writes: c.Writes + b.Writes, ImageReads: c.ImageReads + b.ImageReads,
		MaxReads: max(c.MaxReads, b.MaxReads), MaxWrites: max(c.MaxWrites, b.MaxWrites), MaxTotal: max(c.MaxTotal, b.MaxTotal)}
	out.PerSecond = append(out.PerSecond, c.PerSecond...)
	for _, s := range b.PerSecond {
		s.At += c.Seconds
		out.PerSecond = append(out.PerSecond, s)
	}
	return out
}

// HostUpstream is what one host cache read from the stream in a pass
// (its "hostcache_upstream" layer: one read per block fetched).
type HostUpstream struct {
	Host       int   `json:"host"`
	BootReads  int64 `json:"boot_reads"`
	BootBytes  int64 `json:"boot_bytes"`
	Reads      int64 `json:"reads"`
	Bytes      int64 `json:"bytes"`
	BootBlocks int64 `json:"boot_distinct_blocks"` // the host's VMs', from the generator
}

// Ratio is the host's upstream reads at boot per distinct block its
// VMs read.
func (h HostUpstream) Ratio() float64 {
	if h.BootBlocks == 0 {
		return 0
	}
	return float64(h.BootReads) / float64(h.BootBlocks)
}

// HostcachePass is one pass of every VM: a storm of boots, then the
// steady state.
type HostcachePass struct {
	Name  string `json:"name"`
	Setup string `json:"setup"`
	Seed  uint64 `json:"seed"`
	// Boot, Steady and Total are the central storage's I/O.
	Boot   CentralIO `json:"boot"`
	Steady CentralIO `json:"steady"`
	Total  CentralIO `json:"total"`
	VMs    VMResult  `json:"vms"`
	// ClientCores and ServerCores are the CPU the load generator and the
	// servers (stream, host caches or nbdkits) used during the storm.
	ClientCores float64        `json:"client_cores_boot"`
	ServerCores float64        `json:"server_cores_boot"`
	Upstream    []HostUpstream `json:"host_upstream,omitempty"`
}

// BootBlocks is the distinct blocks the VMs read at boot, summed over
// the hosts.
func (p HostcachePass) BootBlocks() int64 {
	var n int64
	for _, h := range p.VMs.Hosts {
		n += h.BootBlocks
	}
	return n
}

// Seed003Row is one row of seed 003's table: central storage IOPS
// (maximum per second) during a Login VSI medium workload.
type Seed003Row struct {
	Setup          string  `json:"setup"`
	Baseline       float64 `json:"baseline_max_total_iops"`
	BaselineReads  float64 `json:"baseline_max_read_iops"`
	BaselineWrites float64 `json:"baseline_max_write_iops"`
	Cold           float64 `json:"cold_max_total_iops"`
	Warm           float64 `json:"warm_max_total_iops"`
	Persist        float64 `json:"persist_max_total_iops"`
	Stated         string  `json:"stated"`
}

// Seed003 is seed 003's table (XenDesktop 5.6 FP1 on XenServer 6.1).
var Seed003 = []Seed003Row{
	{"8 hosts, 1,350 VDAs", 22729, 10820, 10979, 51.1, 22.2, 15.3, "21,799 → 21 IOPS (99.9% less)"},
	{"16 hosts, 2,700 VDAs", 29281, 23455, 15752, 3188.6, 103.2, 93.6, "39,207 → 126 IOPS (99.7% less)"},
}

// HostcacheFigure is one figure the experiment must reach, and whether
// it did: Status is "met", "missed", "client-bound" (the client's
// ceiling decides, so there is no ratio and no verdict), "met (usher at
// the client's ceiling ...)" (no ratio, but usher's rate, held back by
// the client alone, is above the goal anyway) or "not run".
type HostcacheFigure struct {
	Name     string `json:"name"`
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	Status   string `json:"status"`
}

// Missed reports whether the figure was measured and fell short.
func (f HostcacheFigure) Missed() bool { return f.Status == "missed" }

// HostcacheResult is a whole run.
type HostcacheResult struct {
	Hosts     int             `json:"hosts"`
	VMs       int             `json:"vms_per_host"`
	Scale     int             `json:"scale"`
	Workload  Workload        `json:"workload"`
	Steady    string          `json:"steady"`
	BootDepth int             `json:"boot_depth"`
	ImageSize int64           `json:"image_size"`
	BootSet   int64           `json:"boot_set"`
	CacheSize int64           `json:"cache_size"`
	Passes    []HostcachePass `json:"passes"`
	// RestartReads are the central reads of the daemons' restart before
	// persist (each reads its version's table of digests).
	RestartReads int64             `json:"restart_central_reads"`
	Reads        *NBDTest          `json:"warm_reads,omitempty"`
	Figures      []HostcacheFigure `json:"figures"`
	Seed003      []Seed003Row      `json:"seed_003_published"`
	Client       string            `json:"client"`
	FioClient    string            `json:"fio_client,omitempty"`
	CPUs         string            `json:"cpus"`
	Notes        []string          `json:"notes,omitempty"`
}

// Pass returns the pass of that name.
func (r *HostcacheResult) Pass(name string) (HostcachePass, bool) {
	for _, p := range r.Passes {
		if p.Name == name {
			return p, true
		}
	}
	return HostcachePass{}, false
}

// hcBench is one run of the experiment.
type hcBench struct {
	cfg     HostcacheConfig
	w       Workload
	l       layout
	pattern Pattern
	plan    benchkit.Plan
	stream  *proc
	res     *HostcacheResult
}

// RunHostcache runs the host-cache experiment (see the comment above
// HostcacheConfig). It returns the result so far with an error when a
// pass fails.
func RunHostcache(ctx context.Context, cfg HostcacheConfig) (*HostcacheResult, error) {
	cfg.defaults()
	if len(cfg.Self) == 0 {
		return nil, errors.New("the bench needs the usher binary (its own executable) to start usher stream and usher hostcache")
	}
	b := &hcBench{cfg: cfg, w: HostcacheWorkload(cfg.Scale, cfg.Steady), plan: benchkit.PlanCPUs()}
	b.l = b.w.layout()
	b.pattern = Pattern{Seed: 0x5eed003, End: b.l.growStart}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = b.l.size
		b.cfg.CacheSize = b.l.size
	}
	client := "usher bench hostcache-vms in its own process, not pinned"
	if b.plan.Pinned() {
		client = "usher bench hostcache-vms in its own process on CPU " + cpuList(b.plan.Client)
	}
	b.res = &HostcacheResult{Hosts: cfg.Hosts, VMs: cfg.VMs, Scale: cfg.Scale, Workload: DefaultWorkload(), Steady: cfg.Steady.String(),
		BootDepth: cfg.BootDepth, ImageSize: b.l.size, BootSet: b.l.bootSet, CacheSize: b.cfg.CacheSize, Seed003: Seed003,
		Client: client + ", one NBD connection per VM",
		CPUs:   b.plan.String() + "; the stream, the host caches and nbdkit run under taskset on the servers' CPUs"}
	b.res.Workload.Scale = cfg.Scale
	err := b.run(ctx)
	metricsClient.CloseIdleConnections()
	b.res.Figures = b.figures()
	return b.res, err
}

func (b *hcBench) progress(format string, args ...any) {
	fmt.Fprintf(b.cfg.Progress, "hostcache: "+format+"\n", args...)
}

func (b *hcBench) run(ctx context.Context) error {
	if err := b.makeImage(ctx); err != nil {
		return err
	}
	var err error
	streamAddr, streamMetrics, err := twoAddrs()
	if err != nil {
		return err
	}
	b.stream, err = startProc(ctx, b.plan, "usher stream", append(append([]string{}, b.cfg.Self...), "stream", "--store", b.path("store"),
		"--listen", streamAddr, "--ram-cache", "0", "--write-cache", b.path("stream-wc"), "--metrics-listen", streamMetrics,
		"--log-level", "error"), nil, streamAddr, streamMetrics)
	if err != nil {
		return err
	}
	defer b.stream.kill()

	seedBase := b.cfg.Seed * 1000
	coldSeed, warmSeed, persistSeed := seedBase+1, seedBase+2, seedBase+3
	vms := func(uri func(h, v int) string) []VM {
		var out []VM
		for h := range b.cfg.Hosts {
			for v := range b.cfg.VMs {
				out = append(out, VM{Name: vmName(h, v), Host: h, Index: h*b.cfg.VMs + v, URI: uri(h, v)})
			}
		}
		return out
	}

	// Baseline: no host cache.
	direct := vms(func(int, int) string { return "nbd://" + streamAddr + "/" + hostcacheImage })
	if err := b.pass(ctx, "baseline", "VMs straight at the stream, a server-side write cache each", coldSeed, direct, nil, nil); err != nil {
		return err
	}

	// usher hostcache: cold, warm, then restarted: persist.
	hosts := make([]*proc, b.cfg.Hosts)
	defer func() {
		for _, h := range hosts {
			if h != nil {
				h.kill()
			}
		}
	}()
	for h := range hosts {
		if hosts[h], err = b.startHost(ctx, h); err != nil {
			return err
		}
	}
	via := func() []VM {
		return vms(func(h, v int) string { return "nbd://" + hosts[h].addr + "/" + vmName(h, v) })
	}
	if err := b.pass(ctx, "cold", "usher hostcache per host, cache directories empty", coldSeed, via(), hosts, nil); err != nil {
		return err
	}
	if err := b.pass(ctx, "warm", "the same daemons, the VMs booted again", warmSeed, via(), hosts, nil); err != nil {
		return err
	}
	before, err := scrapeBlocks(ctx, b.stream.metrics)
	if err != nil {
		return err
	}
	b.progress("restarting the %d host caches on their directories", len(hosts))
	for h, p := range hosts {
		hosts[h] = nil
		if err := p.stop(); err != nil {
			return fmt.Errorf("stop host %d: %w", h, err)
		}
		if hosts[h], err = b.startHost(ctx, h); err != nil {
			return err
		}
	}
	after, err := scrapeBlocks(ctx, b.stream.metrics)
	if err != nil {
		return err
	}
	b.res.RestartReads = after.op(imageexport.LayerWriteDisk, "read") - before.op(imageexport.LayerWriteDisk, "read")
	if err := b.pass(ctx, "persist", "the daemons stopped and started again on their cache directories, the VMs booted a third time", persistSeed, via(), hosts, nil); err != nil {
		return err
	}

	// The yardstick: nbdkit's cache filter per host, a cow filter per VM.
	var caches []*proc
	var cows [][]*proc
	defer func() {
		for _, vs := range cows {
			for _, c := range vs {
				c.kill()
			}
		}
		for _, c := range caches {
			c.kill()
		}
	}()
	if b.cfg.Nbdkit == "" {
		b.res.Notes = append(b.res.Notes, "nbdkit not found: its passes and the read comparison are skipped (apt-get install -y nbdkit)")
	} else {
		for h := range b.cfg.Hosts {
			c, err := b.startNbdkitCache(ctx, h, streamAddr)
			if err != nil {
				return err
			}
			caches = append(caches, c)
		}
		startCows := func() error {
			cows = make([][]*proc, len(caches))
			for h, c := range caches {
				for v := range b.cfg.VMs {
					p, err := b.startNbdkitCow(ctx, h, v, c.addr)
					if err != nil {
						return err
					}
					cows[h] = append(cows[h], p)
				}
			}
			return nil
		}
		stopCows := func() {
			for _, vs := range cows {
				for _, c := range vs {
					c.kill()
				}
			}
			cows = nil
		}
		viaCow := func() []VM { return vms(func(h, v int) string { return "nbd://" + cows[h][v].addr + "/" }) }
		nbdkits := func() []*proc {
			out := append([]*proc{}, caches...)
			for _, vs := range cows {
				out = append(out, vs...)
			}
			return out
		}
		if err := startCows(); err != nil {
			return err
		}
		if err := b.pass(ctx, "nbdkit-cold", "nbdkit per host: cache filter (cache-on-read) in front of the stream, empty; a cow filter per VM", coldSeed, viaCow(), nil, nbdkits()); err != nil {
			return err
		}
		// A new boot: each VM's overlay goes with its nbdkit.
		stopCows()
		if err := startCows(); err != nil {
			return err
		}
		if err := b.pass(ctx, "nbdkit-warm", "the same cache filters, new cow filters, the VMs booted again", warmSeed, viaCow(), nil, nbdkits()); err != nil {
			return err
		}
		stopCows()
	}

	if b.cfg.Fio == "" || b.cfg.Nbdkit == "" {
		b.res.Notes = append(b.res.Notes, "fio or nbdkit not found: the 4 KiB read comparison is skipped (apt-get install -y fio nbdkit)")
		return nil
	}
	t, err := b.compareReads(ctx, hosts[0], caches[0])
	if err != nil {
		return fmt.Errorf("4 KiB reads: %w", err)
	}
	b.res.Reads = t
	_, b.res.FioClient = benchkit.Command(b.plan, b.cfg.Fio)
	return nil
}

func vmName(h, v int) string { return fmt.Sprintf("h%d-vm%02d", h, v) }

func (b *hcBench) path(name string) string { return filepath.Join(b.cfg.Dir, name) }

// twoAddrs returns two free loopback addresses.
func twoAddrs() (string, string, error) {
	p1, err := freePort()
	if err != nil {
		return "", "", err
	}
	p2, err := freePort()
	if err != nil {
		return "", "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", p1), fmt.Sprintf("127.0.0.1:%d", p2), nil
}

// makeImage writes the image (the pattern up to the end of the hot
// region, sparse after it) and imports it into a new store.
func (b *hcBench) makeImage(ctx context.Context) error {
	raw := b.path("image.raw")
	f, err := os.Create(raw)
	if err != nil {
		return err
	}
	buf := make([]byte, mib)
	for off := int64(0); off < b.pattern.End; off += mib {
		n := min(mib, b.pattern.End-off)
		b.pattern.Fill(buf[:n], off)
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Truncate(b.l.size); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	defer os.Remove(raw)
	st, err := image.Create(b.path("store"))
	if err != nil {
		return err
	}
	_, err = st.Import(ctx, hostcacheImage, raw)
	return err
}

// startHost starts host h's usher hostcache on its directory.
func (b *hcBench) startHost(ctx context.Context, h int) (*proc, error) {
	addr, metrics, err := twoAddrs()
	if err != nil {
		return nil, err
	}
	argv := append(append([]string{}, b.cfg.Self...), "hostcache", "--upstream", "nbd://"+b.stream.addr, "--dir", b.path(fmt.Sprintf("host-%d", h)),
		"--size", strconv.FormatInt(b.cfg.CacheSize, 10), "--block-size", strconv.FormatInt(hostcacheBlock, 10),
		"--listen", addr, "--metrics-listen", metrics, "--log-level", "error")
	for v := range b.cfg.VMs {
		argv = append(argv, "--vm", vmName(h, v)+"="+hostcacheImage)
	}
	return startProc(ctx, b.plan, fmt.Sprintf("usher hostcache (host %d)", h), argv, nil, addr, metrics)
}

// nbdkitArgs starts an nbdkit command line on a free loopback port.
func (b *hcBench) nbdkitArgs() ([]string, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	return []string{b.cfg.Nbdkit, "-f", "--exit-with-parent", "-i", "127.0.0.1", "-p", strconv.Itoa(port), "-t", strconv.Itoa(nbdkitThreads)},
		fmt.Sprintf("127.0.0.1:%d", port), nil
}

// startNbdkitCache starts host h's nbdkit cache filter in front of the
// stream, keeping its cache file under the scratch directory.
func (b *hcBench) startNbdkitCache(ctx context.Context, h int, stream string) (*proc, error) {
	argv, addr, err := b.nbdkitArgs()
	if err != nil {
		return nil, err
	}
	host, port, _ := strings.Cut(stream, ":")
	tmp := b.path(fmt.Sprintf("nbdkit-%d", h))
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, err
	}
	argv = append(argv, "--filter=cache", "nbd", "hostname="+host, "port="+port, "export="+hostcacheImage,
		"cache-on-read=true", fmt.Sprintf("cache-min-block-size=%d", hostcacheBlock))
	return startProc(ctx, b.plan, fmt.Sprintf("nbdkit cache (host %d)", h), argv, []string{"TMPDIR=" + tmp}, addr, "")
}

// startNbdkitCow starts VM v of host h's nbdkit cow filter in front of
// its host's cache filter.
func (b *hcBench) startNbdkitCow(ctx context.Context, h, v int, cache string) (*proc, error) {
	argv, addr, err := b.nbdkitArgs()
	if err != nil {
		return nil, err
	}
	host, port, _ := strings.Cut(cache, ":")
	argv = append(argv, "--filter=cow", "nbd", "hostname="+host, "port="+port)
	if out, _ := exec.CommandContext(ctx, b.cfg.Nbdkit, "--filter=cow", "null", "--help").CombinedOutput(); strings.Contains(string(out), "cow-block-size") {
		argv = append(argv, fmt.Sprintf("cow-block-size=%d", pageSize))
	}
	return startProc(ctx, b.plan, fmt.Sprintf("nbdkit cow (%s)", vmName(h, v)), argv, []string{"TMPDIR=" + b.path(fmt.Sprintf("nbdkit-%d", h))}, addr, "")
}

// centralReading is the stream's meter at one moment.
type centralReading struct {
	at                   time.Time
	reads, writes, image int64
}

func (b *hcBench) readCentral(ctx context.Context) (centralReading, error) {
	m, err := scrapeBlocks(ctx, b.stream.metrics)
	if err != nil {
		return centralReading{}, fmt.Errorf("the stream's metrics: %w", err)
	}
	return centralReading{at: time.Now(), reads: m.op(imageexport.LayerWriteDisk, "read"),
		writes: m.op(imageexport.LayerWriteDisk, "write") + m.op(imageexport.LayerWriteDisk, "zero") + m.op(imageexport.LayerWriteDisk, "trim"),
		image:  m.op(imageexport.LayerImage, "read")}, nil
}

// sampler measures the central storage's I/O from its start to its
// stop, a window a second.
type sampler struct {
	b     *hcBench
	label string
	first centralReading
	stopc chan struct{}
	done  chan struct{}
	io    CentralIO
	err   error
}

func (b *hcBench) startSampler(ctx context.Context, label string) (*sampler, error) {
	first, err := b.readCentral(ctx)
	if err != nil {
		return nil, err
	}
	s := &sampler{b: b, label: label, first: first, stopc: make(chan struct{}), done: make(chan struct{})}
	go s.loop(ctx)
	return s, nil
}

func (s *sampler) loop(ctx context.Context) {
	defer close(s.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := s.first
	add := func(r centralReading, whole bool) {
		d := r.at.Sub(last.at).Seconds()
		sec := CentralSecond{At: r.at.Sub(s.first.at).Seconds(), Reads: float64(r.reads - last.reads), Writes: float64(r.writes - last.writes)}
		if whole && d > 0 {
			sec.Reads, sec.Writes = sec.Reads/d, sec.Writes/d
		}
		s.io.PerSecond = append(s.io.PerSecond, sec)
		s.io.MaxReads, s.io.MaxWrites = max(s.io.MaxReads, sec.Reads), max(s.io.MaxWrites, sec.Writes)
		s.io.MaxTotal = max(s.io.MaxTotal, sec.Reads+sec.Writes)
		last = r
	}
	for n := 1; ; n++ {
		select {
		case <-tick.C:
			r, err := s.b.readCentral(ctx)
			if err != nil {
				s.err = err
				return
			}
			add(r, true)
			if n%5 == 0 {
				sec := s.io.PerSecond[len(s.io.PerSecond)-1]
				s.b.progress("%s: %ds, central %.0f read + %.0f write IOPS", s.label, n, sec.Reads, sec.Writes)
			}
		case <-s.stopc:
			r, err := s.b.readCentral(ctx)
			if err != nil {
				s.err = err
				return
			}
			if r.at.Sub(last.at) > 50*time.Millisecond || r.reads+r.writes > last.reads+last.writes {
				add(r, r.at.Sub(last.at) >= time.Second)
			}
			s.io.Seconds = r.at.Sub(s.first.at).Seconds()
			s.io.Reads, s.io.Writes, s.io.ImageReads = r.reads-s.first.reads, r.writes-s.first.writes, r.image-s.first.image
			return
		}
	}
}

func (s *sampler) stop() (CentralIO, error) {
	close(s.stopc)
	<-s.done
	return s.io, s.err
}

// upstreamReading is every host cache's upstream counters.
func (b *hcBench) readUpstream(ctx context.Context, hosts []*proc) ([][2]int64, error) {
	out := make([][2]int64, len(hosts))
	for h, p := range hosts {
		m, err := scrapeBlocks(ctx, p.metrics)
		if err != nil {
			return nil, fmt.Errorf("host %d's metrics: %w", h, err)
		}
		out[h] = [2]int64{m.op(hostexport.LayerUpstream, "read"), m.bytesOf(hostexport.LayerUpstream, "read")}
	}
	return out, nil
}

// serverMeters measures the CPU of the stream and the given servers.
func serverMeters(procs ...*proc) func() (benchkit.Usage, error) {
	return func() (benchkit.Usage, error) {
		var u benchkit.Usage
		for _, p := range procs {
			x, err := benchkit.TreeCPU(p.pid())()
			if err != nil {
				return u, err
			}
			u.Wall, u.User, u.Sys = x.Wall, u.User+x.User, u.Sys+x.Sys
		}
		return u, nil
	}
}

// pass runs every VM once through the load generator: connect, the
// storm of boots, the steady state. hosts, when set, are usher host
// caches whose upstream reads are counted; servers are the other
// servers the VMs go through (nbdkit), whose CPU is measured with the
// stream's and the hosts'.
func (b *hcBench) pass(ctx context.Context, name, setup string, seed uint64, vms []VM, hosts, servers []*proc) error {
	p := HostcachePass{Name: name, Setup: setup, Seed: seed}
	if err := waitIdle(ctx, hosts); err != nil {
		return fmt.Errorf("pass %s: %w", name, err)
	}
	spec := VMRun{VMs: vms, Workload: b.w, Seed: seed, BootDepth: b.cfg.BootDepth, SteadyDepth: 8, Image: b.pattern,
		BlockSize: hostcacheBlock, OpTimeout: time.Minute}
	file := b.path("vms-" + name + ".json")
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if err := os.WriteFile(file, data, 0o600); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute+4*b.cfg.Steady)
	defer cancel()
	cmd, _ := benchkit.Command(b.plan, b.cfg.Self[0], append(append([]string{}, b.cfg.Self[1:]...), "bench", "hostcache-vms", "--spec", file)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	errOut := &tail{max: 8 << 10}
	cmd.Stderr = errOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := false
	defer func() {
		if !exited {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			cmd.Wait()
		}
	}()
	go func() {
		<-ctx.Done()
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}()
	servers = append(append([]*proc{b.stream}, hosts...), servers...)
	fail := func(err error) error {
		return fmt.Errorf("pass %s: %w: %s", name, err, errOut)
	}
	b.progress("%s: %d VMs on %d hosts connecting (%s)", name, len(vms), b.cfg.Hosts, setup)
	events := json.NewDecoder(bufio.NewReader(stdout))
	next := func(want string) (vmEvent, error) {
		var ev vmEvent
		if err := events.Decode(&ev); err != nil {
			return ev, fmt.Errorf("the load generator's %s: %w", want, err)
		}
		if ev.Event != want {
			return ev, fmt.Errorf("the load generator said %q, not %q", ev.Event, want)
		}
		return ev, nil
	}
	if _, err := next("connected"); err != nil {
		return fail(err)
	}
	up0, err := b.readUpstream(ctx, hosts)
	if err != nil {
		return fail(err)
	}
	client := benchkit.TreeCPU(cmd.Process.Pid)
	srv := serverMeters(servers...)
	c0, err1 := client()
	s0, err2 := srv()
	if err := errors.Join(err1, err2); err != nil {
		return fail(err)
	}
	smp, err := b.startSampler(ctx, name+" boot")
	if err != nil {
		return fail(err)
	}
	b.progress("%s: the storm: %d VMs boot at once, %d reads each", name, len(vms), b.w.BootReads/b.w.Scale)
	if _, err := io.WriteString(stdin, "boot\n"); err != nil {
		smp.stop()
		return fail(err)
	}
	_, err = next("booted")
	p.Boot, _ = smp.stop()
	if err != nil {
		return fail(err)
	}
	c1, err1 := client()
	s1, err2 := srv()
	if err := errors.Join(err1, err2); err != nil {
		return fail(err)
	}
	p.ClientCores, p.ServerCores = c1.Sub(c0).Cores(), s1.Sub(s0).Cores()
	up1, err := b.readUpstream(ctx, hosts)
	if err != nil {
		return fail(err)
	}
	b.progress("%s: booted in %.1f s; central %d reads, %d writes, at most %.0f IOPS", name, p.Boot.Seconds, p.Boot.Reads, p.Boot.Writes, p.Boot.MaxTotal)
	if smp, err = b.startSampler(ctx, name+" steady"); err != nil {
		return fail(err)
	}
	b.progress("%s: steady state for %s", name, b.cfg.Steady)
	if _, err := io.WriteString(stdin, "steady\n"); err != nil {
		smp.stop()
		return fail(err)
	}
	ev, err := next("done")
	p.Steady, _ = smp.stop()
	if err != nil {
		return fail(err)
	}
	stdin.Close()
	werr := cmd.Wait()
	exited = true
	if werr != nil {
		return fail(werr)
	}
	up2, err := b.readUpstream(ctx, hosts)
	if err != nil {
		return fail(err)
	}
	for _, s := range servers {
		if err := s.alive(); err != nil {
			return fail(err)
		}
	}
	p.VMs = *ev.Result
	p.Total = p.Boot.join(p.Steady)
	for h := range hosts {
		u := HostUpstream{Host: h, BootReads: up1[h][0] - up0[h][0], BootBytes: up1[h][1] - up0[h][1], Reads: up2[h][0] - up0[h][0], Bytes: up2[h][1] - up0[h][1]}
		for _, vh := range p.VMs.Hosts {
			if vh.Host == h {
				u.BootBlocks = vh.BootBlocks
			}
		}
		p.Upstream = append(p.Upstream, u)
	}
	b.res.Passes = append(b.res.Passes, p)
	b.progress("%s: done; central %d I/Os (%d reads, %d writes), at most %.0f IOPS; VMs: %d errors, %d wrong reads",
		name, p.Total.Total(), p.Total.Reads, p.Total.Writes, p.Total.MaxTotal, p.VMs.Boot.Errors+p.VMs.Steady.Errors,
		p.VMs.Boot.Mismatches+p.VMs.Steady.Mismatches)
	return nil
}

// compareReads runs fio's 4 KiB random reads over the boot set against
// usher's warm host cache and nbdkit's, interleaved with nbdkit null
// (the client's ceiling), and takes the medians.
func (b *hcBench) compareReads(ctx context.Context, host, cache *proc) (*NBDTest, error) {
	cfg := NBDConfig{Dir: b.cfg.Dir, ImageSize: b.l.size, Runtime: b.cfg.Runtime, Rounds: b.cfg.Rounds, Fio: b.cfg.Fio, Nbdkit: b.cfg.Nbdkit, plan: b.plan}
	args := append(fioArgs(TestRandRead, b.cfg.Runtime), fmt.Sprintf("--size=%d", b.l.bootSet))
	usherURI := "nbd://" + host.addr + "/" + hostexport.WarmPrefix + hostcacheImage
	nbdkitURI := "nbd://" + cache.addr + "/"
	// Both caches hold the boot set from their passes; one read of it
	// through each makes sure of it, unmeasured.
	for _, uri := range []string{usherURI, nbdkitURI} {
		if err := readThrough(ctx, uri, b.l.bootSet); err != nil {
			return nil, fmt.Errorf("warm-up read of %s: %w", uri, err)
		}
	}
	t := &NBDTest{Test: TestRandRead + " (warm host cache)", Fio: fmt.Sprint(args),
		NbdkitServer: fmt.Sprintf("nbdkit --filter=cache nbd (cache-on-read=true, cache-min-block-size=64K, -t %d)", nbdkitThreads)}
	var u, k, c []NBDRun
	for round := 1; round <= b.cfg.Rounds; round++ {
		r, err := runFio(ctx, cfg, "usher", usherURI, args, benchkit.TreeCPU(host.pid()))
		if err != nil {
			return nil, fmt.Errorf("usher round %d: %w", round, err)
		}
		r.Round = round
		u, t.Runs = append(u, r), append(t.Runs, r)
		b.progress("4 KiB reads round %d: usher  %8.0f IOPS", round, r.IOPS)
		if r, err = runFio(ctx, cfg, "nbdkit", nbdkitURI, args, benchkit.TreeCPU(cache.pid())); err != nil {
			return nil, fmt.Errorf("nbdkit round %d: %w", round, err)
		}
		r.Round = round
		k, t.Runs = append(k, r), append(t.Runs, r)
		b.progress("4 KiB reads round %d: nbdkit %8.0f IOPS", round, r.IOPS)
		if r, err = runNbdkitNull(ctx, cfg, args); err != nil {
			return nil, fmt.Errorf("ceiling round %d: %w", round, err)
		}
		r.Round = round
		c, t.Runs = append(c, r), append(t.Runs, r)
		b.progress("4 KiB reads round %d: null   %8.0f IOPS (the client's ceiling)", round, r.IOPS)
	}
	t.UsherIOPS, t.UsherBW = medianRuns(u)
	t.NbdkitIOPS, t.NbdkitBW = medianRuns(k)
	t.CeilingIOPS, _ = medianRuns(c)
	t.UsherCPUPerIO, t.NbdkitCPUPerIO = medianCPU(u), medianCPU(k)
	t.Verdict = benchkit.Compare(benchkit.Step{Rate: t.UsherIOPS, Ceiling: t.CeilingIOPS}, benchkit.Step{Rate: t.NbdkitIOPS, Ceiling: t.CeilingIOPS}, benchkit.Headroom)
	if benchkit.Ratio(t.Verdict) {
		t.Ratio = t.UsherIOPS / t.NbdkitIOPS
	}
	for _, r := range t.Runs {
		t.ClientCores = max(t.ClientCores, r.ClientCores)
	}
	return t, nil
}

// readThrough reads the first n bytes of an NBD export, 1 MiB at a time.
func readThrough(ctx context.Context, uri string, n int64) error {
	c, err := nbd.DialURI(ctx, uri)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, mib)
	for off := int64(0); off < n; off += mib {
		if err := c.ReadAt(ctx, buf[:min(mib, n-off)], off); err != nil {
			return err
		}
	}
	return nil
}

// reduction is 1 - x/base, or 0 without a base.
func reduction(x, base float64) float64 {
	if base <= 0 {
		return 0
	}
	return 1 - x/base
}

// figures judges the run against the goals.
func (b *hcBench) figures() []HostcacheFigure {
	r := b.res
	var out []HostcacheFigure
	status := func(ok bool) string {
		if ok {
			return "met"
		}
		return "missed"
	}
	base, okB := r.Pass("baseline")
	persist, okP := r.Pass("persist")
	if okB && okP {
		tot := reduction(float64(persist.Total.Total()), float64(base.Total.Total()))
		out = append(out, HostcacheFigure{Name: "persist: central I/Os over the pass, reads and writes, vs baseline",
			Goal:     fmt.Sprintf("≥ %.1f%% fewer", 100*GoalPersistReduction),
			Measured: fmt.Sprintf("%.3f%% fewer (%d vs %d)", 100*tot, persist.Total.Total(), base.Total.Total()),
			Status:   status(tot >= GoalPersistReduction)})
		mx := reduction(persist.Total.MaxTotal, base.Total.MaxTotal)
		out = append(out, HostcacheFigure{Name: "persist: central IOPS, per-second maximum, reads and writes, vs baseline",
			Goal:     fmt.Sprintf("≥ %.1f%% fewer", 100*GoalPersistReduction),
			Measured: fmt.Sprintf("%.3f%% fewer (%.0f vs %.0f IOPS)", 100*mx, persist.Total.MaxTotal, base.Total.MaxTotal),
			Status:   status(mx >= GoalPersistReduction)})
	} else {
		out = append(out, HostcacheFigure{Name: "persist vs baseline", Goal: fmt.Sprintf("≥ %.1f%% fewer", 100*GoalPersistReduction), Status: "not run"})
	}
	if cold, ok := r.Pass("cold"); ok && len(cold.Upstream) > 0 {
		worst, at := 0.0, 0
		var parts []string
		for _, h := range cold.Upstream {
			if h.Ratio() >= worst {
				worst, at = h.Ratio(), h.Host
			}
			parts = append(parts, fmt.Sprintf("%d/%d", h.BootReads, h.BootBlocks))
		}
		out = append(out, HostcacheFigure{Name: "cold storm: upstream block reads per distinct 64 KiB block the host's VMs read at boot",
			Goal:     fmt.Sprintf("≤ %.2f on every host", GoalStormRatio),
			Measured: fmt.Sprintf("worst %.3f (host %d); per host %s", worst, at, strings.Join(parts, ", ")),
			Status:   status(worst <= GoalStormRatio && worst > 0)})
	} else {
		out = append(out, HostcacheFigure{Name: "cold storm", Goal: fmt.Sprintf("≤ %.2f", GoalStormRatio), Status: "not run"})
	}
	f := HostcacheFigure{Name: "4 KiB random reads from a warm host cache vs nbdkit's cache filter (fio, 1 connection)",
		Goal: fmt.Sprintf("≥ %.1f ×", GoalWarmReads), Status: "not run"}
	if t := r.Reads; t != nil {
		f.Measured = fmt.Sprintf("usher %.0f IOPS, nbdkit %.0f IOPS, ceiling %.0f IOPS: %s", t.UsherIOPS, t.NbdkitIOPS, t.CeilingIOPS, t.Verdict)
		usher, yard := benchkit.Step{Rate: t.UsherIOPS, Ceiling: t.CeilingIOPS}, benchkit.Step{Rate: t.NbdkitIOPS, Ceiling: t.CeilingIOPS}
		switch {
		case benchkit.Ratio(t.Verdict):
			f.Status = status(t.Ratio >= GoalWarmReads)
		case usher.Bound() && !yard.Bound() && t.UsherIOPS >= GoalWarmReads*t.NbdkitIOPS:
			// The client held usher back and not nbdkit: usher's rate is
			// a lower bound, and already above nbdkit's. No ratio.
			f.Status = "met (usher at the client's ceiling: a lower bound, no ratio)"
		default:
			f.Status = "client-bound"
		}
		if !benchkit.Ratio(t.Verdict) && t.UsherCPUPerIO > 0 && t.NbdkitCPUPerIO > 0 {
			f.Measured += fmt.Sprintf("; CPU per I/O usher %.1f µs, nbdkit %.1f µs (%.2f)", t.UsherCPUPerIO*1e6, t.NbdkitCPUPerIO*1e6, t.UsherCPUPerIO/t.NbdkitCPUPerIO)
		}
	}
	out = append(out, f)
	var errs, wrong int64
	for _, p := range r.Passes {
		errs += p.VMs.Boot.Errors + p.VMs.Steady.Errors
		wrong += p.VMs.Boot.Mismatches + p.VMs.Steady.Mismatches
	}
	v := HostcacheFigure{Name: "every pass: the VMs' I/O errors and reads whose bytes were wrong", Goal: "none",
		Measured: fmt.Sprintf("%d errors, %d wrong reads in %d passes", errs, wrong, len(r.Passes)), Status: status(errs == 0 && wrong == 0)}
	if len(r.Passes) == 0 {
		v.Status = "not run"
	}
	return append(out, v)
}
