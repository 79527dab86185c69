package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usher-vdi/usher/internal/bench"
	"github.com/usher-vdi/usher/internal/loadgen"
	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/site"
)

const benchUsage = `EXPERIMENT [flags]

Runs a seed experiment end to end on this machine: it starts an all-in-one
usher site (embedded SQLite site DB, 57 simulated VDAs in one delivery
group, the demo's 400 applications) on a loopback port, drives load at it,
prints usher's figures beside the published ones and writes a report
directory (--out, default usher-bench/EXPERIMENT under the working
directory; --out "" writes none): report.md, report.json, report.csv,
report.html (one self-contained page) and SVG plots. writecache and nbd
start no site; their directories hold the same files (report.csv their
main table, or every fio run) and result.json, their raw result. Every
experiment takes --cpuprofile FILE.

Experiments:
  launch       the zones-and-latency test: --launches at each --concurrency (12,24,36,48,60)
               through the REST API, each launch a new session of another
               user; the zones-and-latency test launched 10,000 (--launches 10000).
               With --rtt 10ms,45ms,90ms,160ms,250ms the site DB is
               PostgreSQL (--db) across a WAN of each RTT (toxiproxy, in
               process), and an RTT-0 row is measured too.
  logon-storm  --users log on and launch at --rate per second (Citrix's
               sizing test: 100,000 at 20/s, at least 1h23m20s), then a
               ramp of rates (--ramp) for the highest usher holds with p99
               under --p99 and errors under 1%.
               With --directory: logons alone of --users directory users
               (OpenLDAP slapd started for the run, over ldaps, nested
               groups; default 500) beside as many local users, --workers
               at once (default 16): local (argon2id), local again
               (verified cache), directory cold (search, bind, group
               searches) and directory warm; logons/s, p50, p99, the
               directory's operations and slapd's CPU per logon.
  enumerate    the LHC and IMA/FMA enumeration tests: 400 applications enumerated over NFuse
               (the IMA/FMA test's RequestAppData, ctx1 credentials) at each
               --concurrency (10,20,40,60,100), beside nginx serving the
               same bytes as a static file (when /usr/sbin/nginx exists).
  writecache   the PVS RAM-cache paper: targets through every PVS write-cache mode, with
               the disk operations under each (internal/blockbench).
  display      issue 36: --sessions WebSocket viewers pulling a paced RFB-like
               stream (--rate) through usher's display gateway, in its own
               process, and through websockify in the same run: sessions per
               CPU-second, sessions at the rate per core, added echo latency,
               the viewers' CPU, every session's bytes checked.
  nbd          usher's NBD server beside nbdkit under fio.
  lhc          the Local Host Cache (seed 000): 400 applications enumerated
               over NFuse by wrk at each --concurrency with the site DB up
               and cut; then --cuts cuts of the PostgreSQL site DB (close,
               silent, crash in turn) under steady launches, logoffs and
               enumerations: takeover times, a per-second timeline and a
               history check of the site DB (nothing lost or doubled).
  hostcache    seed 003 (IntelliCache): central storage IOPS of --hosts
               usher hostcache daemons × --vms VMs booting at once and
               working, against VMs straight at the stream, cold, warm
               and after a restart, beside nbdkit's cache filter.
  boot         issue 19 and seed 001 on real boots: --targets VMs under QEMU boot
               a minimal Debian at once through each write-cache mode (local file,
               server disk, device RAM, RAM with overflow), with the I/O of every
               layer and the boot times, and the issue's figures met or not.

Every report lists its headlines (report.json "headlines": each figure with
its yardstick, client and the client's ceiling); 'usher bench figures
NAME=DIR' keeps them in docs/figures and writes the README's Figures
section from what is kept there.

Run 'usher bench EXPERIMENT -h' for its flags.`

func (m *Main) bench(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		m.subUsage(args, "bench", benchUsage)
		if len(args) == 0 {
			return usageError{"which experiment? launch, logon-storm, enumerate, writecache, nbd, lhc, hostcache, boot or display"}
		}
		return flag.ErrHelp
	}
	switch args[0] {
	case "launch":
		return m.benchLaunch(ctx, args[1:])
	case "logon-storm":
		return m.benchLogonStorm(ctx, args[1:])
	case "enumerate":
		return m.benchEnumerate(ctx, args[1:])
	case "writecache":
		return m.benchWritecache(ctx, args[1:])
	case "nbd":
		return m.benchNBD(ctx, args[1:])
	case "lhc":
		return m.benchLHC(ctx, args[1:])
	case "hostcache":
		return m.benchHostcache(ctx, args[1:])
	case "boot":
		return m.benchBoot(ctx, args[1:])
	case "display":
		return m.benchDisplay(ctx, args[1:])
	case "display-gateway":
		return m.benchDisplayGateway(ctx, args[1:])
	case "hostcache-vms":
		return m.benchHostcacheVMs(ctx, args[1:])
	case "figures":
		return m.benchFigures(ctx, args[1:])
	case "coldstart-client":
		return m.benchColdStartClient(ctx, args[1:])
	}
	return usageError{fmt.Sprintf("unknown experiment %q: launch, logon-storm, enumerate, writecache, nbd, lhc, hostcache or boot", args[0])}
}

// benchColdStartClient is the client of enumerate's cold start, which
// the bench runs in its own process: it posts one body many times at
// once and prints what it measured as one line of JSON.
func (m *Main) benchColdStartClient(ctx context.Context, args []string) error {
	fs := m.flagSet("bench coldstart-client", "--url URL --body FILE [--requests N] [--ca FILE]\n\nThe cold start's client, run by 'usher bench enumerate' in its own process: posts FILE to URL N times at once, each on its own connection, and prints the latency and errors as JSON.")
	url := fs.String("url", "", "NFuse endpoint")
	body := fs.String("body", "", "file holding the request body")
	n := fs.Int("requests", bench.ColdStartRequests, "requests sent at once")
	ca := fs.String("ca", "", "PEM CA certificates that verify an https --url's certificate (default: the system roots)")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *url == "" || *body == "" || *n < 1 {
		return usageError{"bench coldstart-client needs --url, --body and --requests of at least 1"}
	}
	b, err := os.ReadFile(*body)
	if err != nil {
		return err
	}
	return json.NewEncoder(m.Stdout).Encode(bench.ColdStartClient(ctx, *url, *ca, string(b), *n))
}

// benchFlags are every experiment's.
type benchFlags struct {
	out, data  string
	cpuProfile string
	timeout    time.Duration
	logs       logFlags
}

func (b *benchFlags) register(fs *flag.FlagSet, experiment string) {
	fs.StringVar(&b.out, "out", filepath.Join("usher-bench", experiment), "report directory")
	fs.StringVar(&b.data, "data", "", "data directory of the bench site (default: a temporary one, removed at the end)")
	fs.DurationVar(&b.timeout, "timeout", loadgen.DefaultTimeout, "bound of each transaction")
	fs.StringVar(&b.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (load generator and bench site) to this file, for go tool pprof")
	b.logs.register(fs)
	fs.Lookup("log-level").DefValue = "error"
	fs.Set("log-level", "error")
}

// env makes the experiment's environment: a logger, the site starter and
// a progress line. The returned function removes what it made.
func (m *Main) benchEnv(b benchFlags) (bench.Env, func(), error) {
	log, err := b.logs.logger(m.Stderr)
	if err != nil {
		return bench.Env{}, nil, err
	}
	root, cleanup := b.data, func() {}
	if root == "" {
		if root, err = os.MkdirTemp("", "usher-bench-*"); err != nil {
			return bench.Env{}, nil, err
		}
		cleanup = func() { os.RemoveAll(root) }
	}
	stopProfile, err := startCPUProfile(b.cpuProfile)
	if err != nil {
		cleanup()
		return bench.Env{}, nil, err
	}
	progress := m.progressLine()
	env := bench.Env{Start: m.benchStarter(root, log), StartDB: m.benchDBStarter(root, log),
		StartLHC: m.benchLHCStarter(root, log), Log: log, Stdout: m.Stdout, Timeout: b.timeout,
		Progress: progress.update, Self: m.self()}
	return env, sync.OnceFunc(func() { stopProfile(); progress.clear(); cleanup() }), nil
}

// startCPUProfile starts a CPU profile into path, when path is set, and
// returns what stops it.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return sync.OnceFunc(func() { pprof.StopCPUProfile(); f.Close() }), nil
}

// runBench runs one experiment in the environment b sets up, prints its
// report and writes its directory (as bench NAME args). A report comes
// back with the experiment's error, if any: what was measured before the
// failure is kept.
func (m *Main) runBench(b benchFlags, args []string, name string, run func(bench.Env) (*loadgen.Report, error)) error {
	env, done, err := m.benchEnv(b)
	if err != nil {
		return err
	}
	defer done()
	rep, err := run(env)
	done() // the profile and the bench's data go before the report is written
	if rep == nil {
		return err
	}
	if rerr := m.benchReport(rep, b, args, name); rerr != nil {
		return rerr
	}
	return err
}

// benchReport prints a report's tables and writes its directory.
func (m *Main) benchReport(rep *loadgen.Report, b benchFlags, args []string, name string) error {
	rep.Command = shellCommand(append([]string{"usher", "bench", name}, args...)...)
	fmt.Fprintln(m.Stdout)
	rep.WriteText(m.Stdout)
	return m.writeBenchDir(rep, b.out)
}

// writeBenchDir writes a report directory, when out is set, and says
// where it went.
func (m *Main) writeBenchDir(rep *loadgen.Report, out string) error {
	if out == "" {
		return nil
	}
	if err := rep.WriteDir(out); err != nil {
		return err
	}
	where := filepath.Join(out, "report.html")
	if abs, err := filepath.Abs(where); err == nil {
		where = abs
	}
	fmt.Fprintf(m.Stdout, "\nReport: %s\n", where)
	return nil
}

func (m *Main) benchLaunch(ctx context.Context, args []string) error {
	cfg := bench.DefaultLaunchConfig
	var b benchFlags
	fs := m.flagSet("bench launch", "[flags]\n\nCitrix's zones-and-latency test (docs/published-results.md): launches through the REST API at fixed concurrency, onto 57 simulated VDAs of one delivery group. With --rtt, the site DB is PostgreSQL across a simulated WAN of each RTT.")
	fs.IntVar(&cfg.Launches, "launches", cfg.Launches, "launches at each concurrency (the zones-and-latency test: 10000)")
	conc := fs.String("concurrency", "12,24,36,48,60", "concurrent launches of each step: C1,C2,... or START:STEP:MAX")
	fs.IntVar(&cfg.LogonConcurrency, "logon-concurrency", cfg.LogonConcurrency, "users logging on at once before the run (untimed; 0: two per CPU)")
	rtts := fs.String("rtt", "", "round-trip times between the broker and the site DB, RTT1,RTT2,... (the zones-and-latency test: 10ms,45ms,90ms,160ms,250ms): "+
		"the site DB is then PostgreSQL (--db) across a WAN of each RTT, simulated by toxiproxy in this process, and an RTT-0 row is measured too")
	db := fs.String("db", "", "with --rtt: the PostgreSQL server (DSN of a user who may create schemas; each run makes a schema of its own and drops it) "+
		"(default: $USHER_DB, else "+bench.DefaultDB+")")
	cellLimit := fs.Duration("cell-limit", bench.DefaultCellLimit, "with --rtt: a cell (an RTT and a concurrency) not done by then is cut off and reported as such")
	b.register(fs, "launch")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	lv, err := loadgen.ParseLevels(*conc)
	if err != nil {
		return usageError{"--concurrency " + err.Error()}
	}
	cfg.Concurrency = lv.Concurrencies()
	if cfg.Launches < 1 {
		return usageError{"--launches must be at least 1"}
	}
	var wan bench.LatencyConfig
	if *rtts != "" {
		if wan.RTTs, err = parseRTTs(*rtts); err != nil {
			return usageError{"--rtt " + err.Error()}
		}
		if *cellLimit <= 0 {
			return usageError{"--cell-limit must be positive"}
		}
		wan.LaunchConfig, wan.CellLimit = cfg, *cellLimit
		wan.DB = cmp.Or(*db, m.Getenv("USHER_DB"), bench.DefaultDB)
		if err := server.CheckDB(wan.DB); err != nil || wan.DB == "" {
			return usageError{"--db takes a PostgreSQL URL (postgres://user@host:5432/dbname) or key=value DSN (host=... dbname=...)"}
		}
	} else if *db != "" {
		return usageError{"--db needs --rtt: without it the bench site runs on embedded SQLite"}
	}
	return m.runBench(b, args, "launch", func(env bench.Env) (*loadgen.Report, error) {
		if wan.RTTs == nil {
			return bench.Launch(ctx, env, cfg)
		}
		rep, err := bench.LaunchOverLatency(ctx, env, wan)
		if errors.Is(err, bench.ErrNoPostgres) {
			err = fmt.Errorf("%w\nStart the local server (pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start, "+
				"which answers at %s), or name another with --db or $USHER_DB", err, bench.DefaultDB)
		}
		return rep, err
	})
}

func (m *Main) benchLogonStorm(ctx context.Context, args []string) error {
	cfg := bench.DefaultStormConfig
	var b benchFlags
	fs := m.flagSet("bench logon-storm", "[flags]\n\nUsers log on and launch at a fixed rate (Citrix's LHC sizing test: 100,000 at 20/s), then a ramp of rates for the highest usher holds.")
	fs.IntVar(&cfg.Users, "users", cfg.Users, "users in the storm (Citrix: 100000)")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "logons+launches per second of the storm")
	ramp := fs.String("ramp", loadgen.FormatRates(cfg.Ramp), "rates tried after the storm, each with fresh users, until one is not held (\"none\" to skip)")
	fs.DurationVar(&cfg.RampStep, "ramp-step", cfg.RampStep, "how long each rate of the ramp lasts")
	fs.DurationVar(&cfg.P99, "p99", cfg.P99, "a rate is held while p99 stays under this (and errors under 1%)")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "most logons in flight; arrivals beyond wait, and the wait counts (with --directory: logons at once, default 16)")
	fs.Int("warm-rounds", bench.DefaultDirectoryStormConfig.WarmRounds, "with --directory: logons of each user in each warm phase")
	directory := fs.Bool("directory", false, "logons alone of directory users (slapd started for the run) beside local users, cold and warm, --users each (default 500); --rate and --ramp do not apply")
	b.register(fs, "logon-storm")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *directory {
		return m.benchDirectoryStorm(ctx, fs, args, b, cfg)
	}
	switch {
	case cfg.Users < 1 || cfg.Users > 1_000_000:
		return usageError{"--users must be 1 to 1000000"}
	case cfg.Rate <= 0:
		return usageError{"--rate must be positive"}
	case cfg.RampStep <= 0 || cfg.P99 <= 0 || cfg.Workers < 1:
		return usageError{"--ramp-step, --p99 and --workers must be positive"}
	}
	cfg.Ramp = nil
	if *ramp != "none" && *ramp != "" {
		var err error
		if cfg.Ramp, err = loadgen.ParseRates(*ramp); err != nil {
			return usageError{"--ramp " + err.Error()}
		}
	}
	return m.runBench(b, args, "logon-storm", func(env bench.Env) (*loadgen.Report, error) { return bench.LogonStorm(ctx, env, cfg) })
}

// benchDirectoryStorm is bench logon-storm --directory: the flags the
// user set of --users, --workers and --out, the directory storm's
// defaults otherwise (its report in usher-bench/logon-storm-directory).
func (m *Main) benchDirectoryStorm(ctx context.Context, fs *flag.FlagSet, args []string, b benchFlags, storm bench.StormConfig) error {
	cfg := bench.DefaultDirectoryStormConfig
	b.out = filepath.Join("usher-bench", "logon-storm-directory")
	var usage error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "out":
			b.out = fs.Lookup("out").Value.String()
		case "users":
			cfg.Users = storm.Users
		case "workers":
			cfg.Workers = storm.Workers
		case "warm-rounds":
			cfg.WarmRounds = f.Value.(flag.Getter).Get().(int)
		case "rate", "ramp", "ramp-step", "p99":
			usage = usageError{"--" + f.Name + " does not apply with --directory: its logons are a closed model (--workers at once)"}
		}
	})
	switch {
	case usage != nil:
		return usage
	case cfg.Users < 1 || cfg.Users > 100_000:
		return usageError{"--users must be 1 to 100000 with --directory"}
	case cfg.Workers < 1:
		return usageError{"--workers must be positive"}
	case cfg.WarmRounds < 1 || cfg.WarmRounds > 1000:
		return usageError{"--warm-rounds must be 1 to 1000"}
	}
	return m.runBench(b, args, "logon-storm", func(env bench.Env) (*loadgen.Report, error) {
		return bench.DirectoryLogonStorm(ctx, env, cfg)
	})
}

func (m *Main) benchEnumerate(ctx context.Context, args []string) error {
	cfg := bench.DefaultEnumerateConfig
	var b benchFlags
	fs := m.flagSet("bench enumerate", "[flags]\n\nThe published LHC and IMA/FMA enumeration tests (docs/published-results.md): 400 applications enumerated over NFuse at stepped concurrency, beside nginx serving the same bytes.")
	conc := fs.String("concurrency", "10,20,40,60,100", "concurrency levels: C1,C2,... or START:STEP:MAX (the IMA/FMA test went to 800 and beyond: 100:100:2000)")
	fs.DurationVar(&cfg.StepDuration, "step-duration", cfg.StepDuration, "how long each level lasts")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "the start of each level not measured")
	fs.StringVar(&cfg.URL, "url", "", "NFuse endpoint to load (default: the bench site's "+bench.NFusePath+"); it must accept the bench site's users")
	fs.StringVar(&cfg.CA, "ca", "", "PEM CA certificates that verify an https --url's certificate, the server's own for a self-signed one (default: the system roots; never skipped)")
	fs.StringVar(&cfg.Nginx, "nginx", cfg.Nginx, "nginx binary for the yardstick column (\"\" to skip)")
	fs.IntVar(&cfg.Users, "users", cfg.Users, "users taking turns; each enumerates once, cold, before the steps")
	fs.IntVar(&cfg.Rounds, "rounds", 1, "repeat the steps this many times (in process: usher's then nginx's; with wrk: usher, nginx and the ceiling in turn at each level) and report each level's median round")
	fs.StringVar(&cfg.Wrk, "wrk", bench.DefaultWrk, "wrk binary that then drives usher (NFuse and REST), nginx and nginx's null answer (the client's ceiling) from another process, pinned to its own CPU, at each level, a step each (\"\" to skip; skipped with a note when missing)")
	b.register(fs, "enumerate")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	lv, err := loadgen.ParseLevels(*conc)
	if err != nil {
		return usageError{"--concurrency " + err.Error()}
	}
	if !lv.Rising() {
		return usageError{fmt.Sprintf("--concurrency %q must rise", *conc)}
	}
	cfg.Concurrency = lv.Concurrencies()
	// The bench site keeps usher serve's default send buffer.
	cfg.SendBuffer = server.DefaultSendBuffer
	if cfg.Users < 1 {
		return usageError{"--users must be at least 1"}
	}
	if cfg.Rounds < 1 {
		return usageError{"--rounds must be at least 1"}
	}
	if cfg.StepDuration <= cfg.Warmup || cfg.Warmup < 0 {
		return usageError{"--step-duration must be longer than --warmup"}
	}
	if cfg.URL != "" && !strings.HasPrefix(cfg.URL, "http://") && !strings.HasPrefix(cfg.URL, "https://") {
		return usageError{fmt.Sprintf("--url %q is not an http:// or https:// URL", cfg.URL)}
	}
	if cfg.CA != "" && !strings.HasPrefix(cfg.URL, "https://") {
		return usageError{"--ca verifies an https:// --url"}
	}
	return m.runBench(b, args, "enumerate", func(env bench.Env) (*loadgen.Report, error) { return bench.Enumerate(ctx, env, cfg) })
}

// benchSite is an all-in-one site run for a bench.
type benchSite struct{ s *server.Server }

func (b benchSite) URL() string  { return b.s.URL() }
func (b benchSite) Close() error { return b.s.Close() }

// Hashes counts the site's password checks and decoy hashes (bench.Hasher).
func (b benchSite) Hashes() (checks, decoys int64) { return b.s.Broker().Verified().Hashes() }

// CheckTime is the time the site's password checks took (bench.CheckTimer).
func (b benchSite) CheckTime() time.Duration { return b.s.Broker().Verified().CheckTime() }

// benchStarter starts bench sites in data directories under root: each
// gets the configuration applied to a new site DB, then runs as usher
// serve does, with every machine played by a simulated VDA.
func (m *Main) benchStarter(root string, log *slog.Logger) bench.StartFunc {
	var n atomic.Int64
	return func(ctx context.Context, cfg *site.Config) (bench.Site, error) {
		data := filepath.Join(root, fmt.Sprintf("site-%d", n.Add(1)))
		if err := server.ApplySite(ctx, server.StoreConfig{DataDir: data, Logger: log}, cfg); err != nil {
			return nil, fmt.Errorf("apply the bench site: %w", err)
		}
		// Simulated users log on at once, so that a launch's cost is the
		// broker's alone.
		// Every client of the bench is on this host: no per-source
		// throttling, and no bound on one address's connections (wrk and
		// the in-process clients hold up to 2,000 from 127.0.0.1).
		s, err := server.Open(ctx, server.Config{DataDir: data, Listen: "127.0.0.1:0", SimVDAs: -1, SimLogonDelay: -1, Logger: log, SourceFree: -1, MaxConnsPerClient: -1})
		if err != nil {
			return nil, err
		}
		if err := s.WaitRegistered(ctx, time.Minute); err != nil {
			s.Close()
			return nil, err
		}
		return benchSite{s}, nil
	}
}

// benchDBStarter starts bench sites on PostgreSQL site DBs, with data
// directories (token key, enrolment secret) under root: the configuration
// is applied through load, then the site runs as usher serve --db serve
// does, with every machine played by a simulated VDA.
func (m *Main) benchDBStarter(root string, log *slog.Logger) bench.DBStartFunc {
	var n atomic.Int64
	return func(ctx context.Context, cfg *site.Config, load, serve string) (bench.Site, error) {
		if err := server.ApplySite(ctx, server.StoreConfig{DB: load, Logger: log}, cfg); err != nil {
			return nil, fmt.Errorf("apply the bench site: %w", err)
		}
		data := filepath.Join(root, fmt.Sprintf("pg-site-%d", n.Add(1)))
		s, err := server.Open(ctx, server.Config{DataDir: data, DB: serve, Listen: "127.0.0.1:0", SimVDAs: -1, SimLogonDelay: -1, Logger: log, SourceFree: -1, MaxConnsPerClient: -1})
		if err != nil {
			return nil, err
		}
		if err := s.WaitRegistered(ctx, time.Minute); err != nil {
			s.Close()
			return nil, err
		}
		return benchSite{s}, nil
	}
}

// parseRTTs reads --rtt: durations separated by commas, each a whole
// number of milliseconds (0 is the RTT-0 row, which runs anyway).
func parseRTTs(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "0" {
			out = append(out, 0)
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration (10ms, 0.25s)", f)
		}
		if d < 0 || d%time.Millisecond != 0 {
			return nil, fmt.Errorf("%s is not a whole, non-negative number of milliseconds (toxiproxy's latency is in milliseconds)", d)
		}
		out = append(out, d)
	}
	return out, nil
}
