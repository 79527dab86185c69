package blockbench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/usher-vdi/usher/internal/benchkit"
	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/block/imageexport"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/block/ramcache"
	"github.com/usher-vdi/usher/internal/block/writecache"
	"github.com/usher-vdi/usher/internal/loadgen"
)

// NBDConfig configures RunNBD.
type NBDConfig struct {
	Dir       string        // scratch directory
	ImageSize int64         // bytes of random data in the image
	Runtime   time.Duration // each fio run
	Rounds    int           // A B rounds per test
	Fio       string        // fio binary
	Nbdkit    string        // nbdkit binary; "" skips its columns
	Workers   int           // usher stream --workers
	RAMCache  int64         // usher stream --ram-cache
	Tests     []string      // default NBDTests
	// Cold skips the unmeasured warm-up before each test's rounds: a
	// read of the whole image through usher's exports (filling the
	// server RAM cache, as the first target of a running usher stream
	// does) and through the kernel's page cache, which nbdkit reads.
	// With Cold, usher's first round fills its cache inside the
	// measurement while nbdkit's page cache is warm from the start.
	Cold bool
	// Progress, when set, receives a line per run.
	Progress io.Writer

	plan benchkit.Plan // how fio, nbdkit and usher share the CPUs
}

// NBD tests, as fio jobs.
const (
	TestRandRead = "randread-4k"
	TestSeqRead  = "seqread-256k"
	TestCOWWrite = "cow-randwrite-4k"
)

// NBDTests lists the tests in order.
var NBDTests = []string{TestRandRead, TestSeqRead, TestCOWWrite}

// NBDRun is one fio run.
type NBDRun struct {
	Server string  `json:"server"` // "usher", "nbdkit" or "ceiling" (nbdkit null)
	Round  int     `json:"round"`
	IOPS   float64 `json:"iops"`
	BW     float64 `json:"bytes_per_second"`
	// ClientCores is fio's CPU use (1: a core kept busy); CPUPerIO the
	// server's CPU time per I/O in seconds (0 for the ceiling, not
	// measured).
	ClientCores float64 `json:"client_cores"`
	CPUPerIO    float64 `json:"server_cpu_per_io,omitempty"`
}

// NBDTest is one test's runs and medians.
type NBDTest struct {
	Test         string   `json:"test"`
	Fio          string   `json:"fio_args"`
	Runs         []NBDRun `json:"runs"`
	UsherIOPS    float64  `json:"usher_iops"`
	UsherBW      float64  `json:"usher_bytes_per_second"`
	NbdkitIOPS   float64  `json:"nbdkit_iops,omitempty"`
	NbdkitBW     float64  `json:"nbdkit_bytes_per_second,omitempty"`
	Ratio        float64  `json:"ratio_usher_nbdkit,omitempty"`
	NbdkitServer string   `json:"nbdkit_server,omitempty"`
	// CeilingIOPS is fio's median against nbdkit's null plugin, a server
	// that does no work: the client's ceiling. Verdict is usher over
	// nbdkit, or why there is no ratio (benchkit.Compare with
	// benchkit.Headroom); then the CPU per I/O speaks instead.
	CeilingIOPS    float64 `json:"ceiling_iops,omitempty"`
	Verdict        string  `json:"verdict,omitempty"`
	UsherCPUPerIO  float64 `json:"usher_cpu_per_io,omitempty"`
	NbdkitCPUPerIO float64 `json:"nbdkit_cpu_per_io,omitempty"`
	ClientCores    float64 `json:"client_cores,omitempty"` // the most fio used in any run
}

// NBDResult is a whole run of the NBD comparison.
type NBDResult struct {
	ImageSize   int64     `json:"image_size"`
	Runtime     string    `json:"runtime"`
	Rounds      int       `json:"rounds"`
	NbdkitNote  string    `json:"nbdkit_note,omitempty"`
	Tests       []NBDTest `json:"tests"`
	Environment string    `json:"environment"`
	// Client says how fio ran (its process, its CPUs).
	Client string `json:"client"`
	// CPUs says how the servers and the client shared the machine.
	CPUs string `json:"cpus"`
}

func fioArgs(test string, runtime time.Duration) []string {
	common := []string{"--ioengine=nbd", "--numjobs=1", "--time_based", fmt.Sprintf("--runtime=%ds", max(1, int(runtime.Seconds()))),
		"--ramp_time=1s", "--output-format=json", "--verify_state_save=0"}
	switch test {
	case TestRandRead:
		return append(common, "--name=randread", "--rw=randread", "--bs=4k", "--iodepth=32")
	case TestSeqRead:
		return append(common, "--name=seqread", "--rw=read", "--bs=256k", "--iodepth=32")
	case TestCOWWrite:
		return append(common, "--name=cowwrite", "--rw=randwrite", "--bs=4k", "--iodepth=32")
	}
	return nil
}

// RunNBD runs fio against usher's NBD server (the stack usher stream
// builds: image store, server RAM cache, and for the copy-on-write test
// a server-disk write cache per connection, served in process by
// nbd.Server on loopback TCP) and against nbdkit's file plugin (with
// --filter=cow for the write test) on the same image, alternating
// usher and nbdkit run by run. The rounds of a test share one set of
// exports, as the targets of one running usher stream do, warmed (unless
// cfg.Cold) by one unmeasured read of the image.
func RunNBD(ctx context.Context, cfg NBDConfig) (*NBDResult, error) {
	if cfg.Rounds <= 0 {
		cfg.Rounds = 2
	}
	if cfg.Runtime <= 0 {
		cfg.Runtime = 5 * time.Second
	}
	if len(cfg.Tests) == 0 {
		cfg.Tests = NBDTests
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
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
	res := &NBDResult{ImageSize: cfg.ImageSize, Runtime: cfg.Runtime.String(), Rounds: cfg.Rounds,
		Environment: "loopback TCP, 1 connection, caches warmed by one unmeasured read of the image before each test"}
	if cfg.Cold {
		res.Environment = "loopback TCP, 1 connection, usher's RAM cache cold at each test's first round"
	}
	if cfg.Nbdkit == "" {
		res.NbdkitNote = "nbdkit not found: its columns are skipped (apt-get install -y nbdkit)"
	}
	// nbdkit's cow filter works in 64 KiB blocks unless told otherwise;
	// it is given usher's write-cache block size when it can take it,
	// so that both copy on write at the same granularity.
	cowArgs := []string{"--filter=cow"}
	if cfg.Nbdkit != "" {
		if out, _ := exec.CommandContext(ctx, cfg.Nbdkit, "--filter=cow", "null", "--help").CombinedOutput(); bytes.Contains(out, []byte("cow-block-size")) {
			cowArgs = append(cowArgs, fmt.Sprintf("cow-block-size=%d", writecache.BlockSize))
		}
	}
	plan := benchkit.PlanCPUs()
	_, res.Client = benchkit.Command(plan, cfg.Fio)
	res.CPUs = fmt.Sprintf("%s; usher runs in the bench process, nbdkit under taskset", plan)
	restore, err := plan.PinServer()
	if err != nil {
		return nil, err
	}
	defer restore()
	cfg.plan = plan
	wcDir := filepath.Join(cfg.Dir, "writecache")
	if err := os.MkdirAll(wcDir, 0o755); err != nil {
		return nil, err
	}
	for _, test := range cfg.Tests {
		args := fioArgs(test, cfg.Runtime)
		if args == nil {
			return nil, fmt.Errorf("unknown test %q", test)
		}
		t := NBDTest{Test: test, Fio: fmt.Sprint(args)}
		cow := test == TestCOWWrite
		// One set of exports for the test's rounds, as one running usher
		// stream: its RAM cache starts cold in round 1 and stays, as
		// the kernel's page cache does for nbdkit. Each connection
		// still gets a new write cache.
		exports := &imageexport.Images{Store: st}
		if cfg.RAMCache > 0 {
			exports.Cache = ramcache.New(cfg.RAMCache, 0)
		}
		if cow {
			exports.WriteCacheDir = wcDir
		}
		if !cfg.Cold {
			if err := warm(ctx, exports, raw); err != nil {
				exports.Close()
				return nil, fmt.Errorf("%s warm-up: %w", test, err)
			}
		}
		var u, k, c []NBDRun
		for round := 1; round <= cfg.Rounds; round++ {
			// Each run starts with nothing dirty in the page cache: the
			// image's creation, or the last run's writes, would otherwise
			// be written back during the next run and throttle its writes.
			if err := syncDir(cfg.Dir); err != nil {
				exports.Close()
				return nil, err
			}
			r, err := runUsher(ctx, cfg, exports, args)
			if err != nil {
				exports.Close()
				return nil, fmt.Errorf("%s usher round %d: %w", test, round, err)
			}
			r.Round = round
			u = append(u, r)
			t.Runs = append(t.Runs, r)
			fmt.Fprintf(cfg.Progress, "%-17s round %d usher  %10.0f IOPS %8.1f MiB/s\n", test, round, r.IOPS, r.BW/float64(mib))
			if cfg.Nbdkit == "" {
				continue
			}
			if err := syncDir(cfg.Dir); err != nil {
				exports.Close()
				return nil, err
			}
			r, err = runNbdkit(ctx, cfg, raw, cow, cowArgs, args)
			if err != nil {
				exports.Close()
				return nil, fmt.Errorf("%s nbdkit round %d: %w", test, round, err)
			}
			r.Round = round
			k = append(k, r)
			t.Runs = append(t.Runs, r)
			fmt.Fprintf(cfg.Progress, "%-17s round %d nbdkit %10.0f IOPS %8.1f MiB/s\n", test, round, r.IOPS, r.BW/float64(mib))
			r, err = runNbdkitNull(ctx, cfg, args)
			if err != nil {
				exports.Close()
				return nil, fmt.Errorf("%s ceiling round %d: %w", test, round, err)
			}
			r.Round = round
			c = append(c, r)
			t.Runs = append(t.Runs, r)
			fmt.Fprintf(cfg.Progress, "%-17s round %d null   %10.0f IOPS %8.1f MiB/s (the client's ceiling)\n", test, round, r.IOPS, r.BW/float64(mib))
		}
		exports.Close()
		t.UsherIOPS, t.UsherBW = medianRuns(u)
		if len(k) > 0 {
			t.NbdkitIOPS, t.NbdkitBW = medianRuns(k)
			t.NbdkitServer = "nbdkit file"
			if cow {
				t.NbdkitServer = strings.Join(append([]string{"nbdkit --filter=cow file"}, cowArgs[1:]...), " ")
			}
			t.CeilingIOPS, _ = medianRuns(c)
			t.UsherCPUPerIO, t.NbdkitCPUPerIO = medianCPU(u), medianCPU(k)
			t.Verdict = benchkit.Compare(benchkit.Step{Rate: t.UsherIOPS, Ceiling: t.CeilingIOPS},
				benchkit.Step{Rate: t.NbdkitIOPS, Ceiling: t.CeilingIOPS}, benchkit.Headroom)
			if benchkit.Ratio(t.Verdict) {
				t.Ratio = t.UsherIOPS / t.NbdkitIOPS
			}
		}
		for _, r := range t.Runs {
			t.ClientCores = max(t.ClientCores, r.ClientCores)
		}
		res.Tests = append(res.Tests, t)
	}
	return res, nil
}

// warm reads the image once through an export and once from its raw
// file, in 1 MiB pieces, so that the rounds start with the caches of a
// server that has been streaming: usher's RAM cache, the page cache.
func warm(ctx context.Context, exports *imageexport.Images, raw string) error {
	dev, _, err := exports.Open(ctx, "img", "warm-up")
	if err != nil {
		return err
	}
	defer dev.Close()
	buf := make([]byte, mib)
	for off := int64(0); off < dev.Size(); off += int64(len(buf)) {
		p := buf[:min(int64(len(buf)), dev.Size()-off)]
		if err := dev.ReadAt(ctx, p, off); err != nil {
			return err
		}
	}
	f, err := os.Open(raw)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.CopyBuffer(io.Discard, f, buf)
	return err
}

func medianRuns(rs []NBDRun) (iops, bw float64) {
	a, b := make([]float64, len(rs)), make([]float64, len(rs))
	for i, r := range rs {
		a[i], b[i] = r.IOPS, r.BW
	}
	return median(a), median(b)
}

// medianCPU is the median server CPU per I/O of runs.
func medianCPU(rs []NBDRun) float64 {
	var v []float64
	for _, r := range rs {
		v = append(v, r.CPUPerIO)
	}
	return median(v)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func writeRandomFile(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(7, 7))
	buf := make([]byte, mib)
	for off := int64(0); off < size; off += mib {
		for i := 0; i+8 <= len(buf); i += 8 {
			v := r.Uint64()
			for j := range 8 {
				buf[i+j] = byte(v >> (8 * j))
			}
		}
		if _, err := f.Write(buf[:min(mib, size-off)]); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// runUsher serves exports as usher stream does and runs fio once.
func runUsher(ctx context.Context, cfg NBDConfig, exports *imageexport.Images, args []string) (NBDRun, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return NBDRun{}, err
	}
	srv := &nbd.Server{Exports: exports, Workers: cfg.Workers}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	defer func() {
		srv.Close()
		<-done
	}()
	uri := fmt.Sprintf("nbd://%s/img", ln.Addr())
	return runFio(ctx, cfg, "usher", uri, args, benchkit.SelfCPU)
}

// runNbdkitNull runs fio once against nbdkit's null plugin, a server
// that does no work (reads return zeros, writes are dropped): the
// client's ceiling for the test.
func runNbdkitNull(ctx context.Context, cfg NBDConfig, args []string) (NBDRun, error) {
	r, err := startNbdkit(ctx, cfg, "ceiling", []string{"null", fmt.Sprintf("size=%d", cfg.ImageSize)}, args, false)
	r.CPUPerIO = 0
	return r, err
}

// runNbdkit starts nbdkit's file plugin (with the cow filter for cow)
// on a free loopback port, runs fio once and kills nbdkit.
func runNbdkit(ctx context.Context, cfg NBDConfig, raw string, cow bool, cowArgs, args []string) (NBDRun, error) {
	var a []string
	if cow {
		a = append([]string{"--filter=cow", "file", raw}, cowArgs[1:]...)
	} else {
		a = []string{"-r", "file", raw}
	}
	return startNbdkit(ctx, cfg, "nbdkit", a, args, true)
}

// startNbdkit runs nbdkit with plugin arguments a, pinned to the
// servers' CPUs, and fio once against it, metering nbdkit's CPU when
// meter is set.
func startNbdkit(ctx context.Context, cfg NBDConfig, server string, a, args []string, meter bool) (NBDRun, error) {
	port, err := freePort()
	if err != nil {
		return NBDRun{}, err
	}
	a = append([]string{"-f", "--exit-with-parent", "-i", "127.0.0.1", "-p", strconv.Itoa(port)}, a...)
	name := cfg.Nbdkit
	if len(cfg.plan.Server) > 0 {
		if ts, err := exec.LookPath("taskset"); err == nil {
			name, a = ts, append([]string{"-c", cpuList(cfg.plan.Server), cfg.Nbdkit}, a...)
		}
	}
	cmd := exec.CommandContext(ctx, name, a...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return NBDRun{}, err
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := waitListening(ctx, addr, 10*time.Second); err != nil {
		return NBDRun{}, fmt.Errorf("nbdkit did not listen: %w: %s", err, stderr.String())
	}
	var m benchkit.Meter
	if meter {
		m = benchkit.TreeCPU(cmd.Process.Pid)
	}
	return runFio(ctx, cfg, server, "nbd://"+addr+"/", args, m)
}

func cpuList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func waitListening(ctx context.Context, addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type fioOutput struct {
	Jobs []struct {
		Read  fioStats `json:"read"`
		Write fioStats `json:"write"`
	} `json:"jobs"`
}

type fioStats struct {
	IOPS    float64 `json:"iops"`
	BWBytes float64 `json:"bw_bytes"`
}

// runFio runs fio once against uri, in its own process pinned as the
// plan says, bounded by the runtime plus a margin (fio is killed if it
// overstays), and measures fio's CPU and, with meter, the server's.
func runFio(ctx context.Context, cfg NBDConfig, server, uri string, args []string, meter benchkit.Meter) (NBDRun, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Runtime+30*time.Second)
	defer cancel()
	cmd, _ := benchkit.Command(cfg.plan, cfg.Fio, append(args, "--uri="+uri)...)
	cmd.Dir = cfg.Dir
	var before benchkit.Usage
	var err error
	if meter != nil {
		if before, err = meter(); err != nil {
			return NBDRun{}, err
		}
	}
	out, use, err := benchkit.Run(ctx, cmd)
	if err != nil {
		return NBDRun{}, fmt.Errorf("fio: %w: %s", err, out)
	}
	var srv benchkit.Usage
	if meter != nil {
		after, err := meter()
		if err != nil {
			return NBDRun{}, err
		}
		srv = after.Sub(before)
	}
	// fio may print warnings before the JSON.
	if i := bytes.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	var fo fioOutput
	if err := json.Unmarshal(out, &fo); err != nil {
		return NBDRun{}, fmt.Errorf("fio output: %w", err)
	}
	if len(fo.Jobs) == 0 {
		return NBDRun{}, errors.New("fio reported no jobs")
	}
	j := fo.Jobs[0]
	r := NBDRun{Server: server, IOPS: j.Read.IOPS + j.Write.IOPS, BW: j.Read.BWBytes + j.Write.BWBytes, ClientCores: use.Cores()}
	// The server's CPU over fio's whole life (start, ramp, measured time)
	// over the I/Os it would make at the measured rate in that time: the
	// same estimate for every server, within fio's start-up of the truth.
	if r.IOPS > 0 && srv.Wall > 0 {
		r.CPUPerIO = srv.CPU().Seconds() / (r.IOPS * srv.Wall.Seconds())
	}
	return r, nil
}

// WriteTable prints the comparison.
func (r *NBDResult) WriteTable(out io.Writer) error {
	fmt.Fprintf(out, "usher bench nbd: fio nbd engine (%s), %s, %s per run, %d interleaved rounds (usher, nbdkit, nbdkit null, ...), medians\n",
		r.Client, r.Environment, r.Runtime, r.Rounds)
	fmt.Fprintf(out, "CPUs: %s\n", r.CPUs)
	if r.NbdkitNote != "" {
		fmt.Fprintln(out, r.NbdkitNote)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	t := r.medians()
	fmt.Fprintln(tw, strings.Join(t.Header, "\t")+"\t")
	for _, row := range t.Rows {
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "\n"+ceilingNote)
	return nil
}

const ceilingNote = "The client's ceiling is fio against nbdkit's null plugin, a server that does no work. " +
	"usher / nbdkit is printed only where that ceiling is at least 1.5 × both servers' IOPS; elsewhere the client limits the test, and each server's CPU time per I/O (same run) compares them instead."

// medians tabulates each test's medians.
func (r *NBDResult) medians() loadgen.Table {
	t := loadgen.Table{Title: "Medians of the rounds", Header: []string{"test", "usher IOPS", "usher MiB/s", "nbdkit IOPS", "nbdkit MiB/s",
		"ceiling IOPS", "fio CPU (cores)", "usher µs CPU/IO", "nbdkit µs CPU/IO", "usher / nbdkit", "nbdkit server"}}
	us := func(v float64) string {
		if v <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", v*1e6)
	}
	for _, x := range r.Tests {
		kI, kB, ceil, verdict := "-", "-", "-", "-"
		if x.NbdkitIOPS > 0 {
			kI, kB = fmt.Sprintf("%.0f", x.NbdkitIOPS), fmt.Sprintf("%.1f", x.NbdkitBW/float64(mib))
			verdict = x.Verdict
		}
		if x.CeilingIOPS > 0 {
			ceil = fmt.Sprintf("%.0f", x.CeilingIOPS)
		}
		t.Rows = append(t.Rows, []string{x.Test, fmt.Sprintf("%.0f", x.UsherIOPS), fmt.Sprintf("%.1f", x.UsherBW/float64(mib)), kI, kB,
			ceil, fmt.Sprintf("%.2f", x.ClientCores), us(x.UsherCPUPerIO), us(x.NbdkitCPUPerIO), verdict, x.NbdkitServer})
	}
	return t
}

// headlines offers each test to a summary: the ratio where the client
// leaves room, the CPU per I/O of both servers where it does not.
func (r *NBDResult) headlines() []loadgen.Headline {
	var hs []loadgen.Headline
	for _, x := range r.Tests {
		h := loadgen.Headline{
			What:   "NBD " + x.Test + " (fio, 1 connection)",
			Usher:  fmt.Sprintf("%.0f IOPS, %.1f µs CPU/IO", x.UsherIOPS, x.UsherCPUPerIO*1e6),
			Client: r.Client,
		}
		if x.NbdkitIOPS > 0 {
			h.Yardstick = fmt.Sprintf("%s %.0f IOPS, %.1f µs CPU/IO", x.NbdkitServer, x.NbdkitIOPS, x.NbdkitCPUPerIO*1e6)
			h.Ratio = x.Verdict
			if !benchkit.Ratio(x.Verdict) && x.NbdkitCPUPerIO > 0 && x.UsherCPUPerIO > 0 {
				h.Ratio = fmt.Sprintf("%s; CPU/IO usher / nbdkit %.2f", x.Verdict, x.UsherCPUPerIO/x.NbdkitCPUPerIO)
			}
		}
		if x.CeilingIOPS > 0 {
			h.Ceiling = fmt.Sprintf("%.0f IOPS (nbdkit null)", x.CeilingIOPS)
		}
		hs = append(hs, h)
	}
	return hs
}
