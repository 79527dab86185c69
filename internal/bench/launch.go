package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"strconv"
	"time"

	"github.com/usher-vdi/usher/internal/loadgen"
)

// LaunchConfig sizes the zones-and-latency test's experiment.
type LaunchConfig struct {
	// Launches at each concurrency (the zones-and-latency test: 10,000).
	Launches    int
	Concurrency []int
	// LogonConcurrency is how many users log on at once before the run
	// (untimed; each costs an argon2id hash); 0 is two per CPU. More is
	// slower: concurrent argon2id hashes evict each other's 19 MiB from
	// the caches.
	LogonConcurrency int
}

// DefaultLaunchConfig finishes in a few minutes on two cores; the zones-and-latency test's
// full size is Launches 10,000.
var DefaultLaunchConfig = LaunchConfig{Launches: 2000, Concurrency: []int{12, 24, 36, 48, 60}}

// logOnFirst logs rest's n users on before a run, saying so on out first
// (each logon costs one password hash, so that it takes a while: seconds
// per thousand users on two cores) and how long it took after. conc is
// how many at once (0: two per CPU); note goes in the first line's
// parentheses beside "untimed".
func logOnFirst(ctx context.Context, out io.Writer, rest *loadgen.REST, n, conc int, note string) (time.Duration, error) {
	if conc <= 0 {
		conc = 2 * runtime.NumCPU()
	}
	fmt.Fprintf(out, "Logging %d users on first (untimed%s: one password hash each, %d at a time)...\n", n, note, conc)
	start := time.Now()
	if err := rest.LogOn(ctx, conc); err != nil {
		return 0, fmt.Errorf("log users on: %w", err)
	}
	took := time.Since(start)
	fmt.Fprintf(out, "%d users logged on in %s.\n", n, took.Round(10*time.Millisecond))
	return took, nil
}

// Launch runs the zones-and-latency test on the embedded site DB: Launches launches through
// the REST API at each concurrency, each by another user, onto 57
// simulated VDAs of one delivery group. Users log on before the run; a
// step's sessions are logged off before the next, so every launch makes a
// new session.
func Launch(ctx context.Context, env Env, cfg LaunchConfig) (*loadgen.Report, error) {
	if cfg.Launches < 1 || len(cfg.Concurrency) == 0 {
		return nil, fmt.Errorf("launch bench needs launches and concurrencies")
	}
	log := env.logger()
	s, password, err := env.startSite(ctx, cfg.Launches, cfg.Launches)
	if err != nil {
		return nil, err
	}
	defer s.Close()

	rest := &loadgen.REST{Client: loadgen.NewClient(256), BaseURL: s.URL(), Users: Users(cfg.Launches, password),
		Flow: []string{loadgen.StepLaunch}, Resources: Applications(), ClientName: "usher-bench"}
	logons, err := logOnFirst(ctx, env.out(), rest, cfg.Launches, cfg.LogonConcurrency, "")
	if err != nil {
		return nil, err
	}

	exec := loadgen.FixedWork{Concurrency: cfg.Concurrency, Requests: cfg.Launches,
		Before: func(ctx context.Context, step int) error {
			if step == 0 {
				return nil
			}
			n, err := rest.LogoffAll(ctx, 16)
			log.Info("logged the last step's sessions off", "sessions", n)
			return err
		}}
	fmt.Fprintf(env.out(), "Launching: %s\n", exec)
	res, err := exec.Run(ctx, rest, env.options())
	if res == nil {
		return nil, err
	}
	if _, lerr := rest.LogoffAll(context.WithoutCancel(ctx), 16); lerr != nil {
		log.Warn("log off after the run", "err", lerr)
	}

	rep := loadgen.NewReport("usher bench launch (Citrix's zones-and-latency test)", "")
	rep.Runs = []loadgen.Run{{Name: "usher", Result: res}}
	rep.Tables = []loadgen.Table{LaunchTable(res, cfg.Launches)}
	rep.Tables = append(rep.Tables, loadgen.StepsTable("usher launches, in detail", res))
	rep.Notes = append(rep.Notes,
		machineNote(rep),
		"usher: embedded SQLite site DB in the broker's process, no WAN: the zones-and-latency test's RTT is between its satellite broker and the site DB, "+
			"so its 10 ms row is the nearest; the WAN rows come with PostgreSQL zones.",
		fmt.Sprintf("Each launch is a new session of another user on one of %d simulated VDAs of one delivery group; "+
			"%d users logged on before the run in %s (untimed: one argon2id hash each); sessions were logged off between steps.",
			Machines, cfg.Launches, logons.Round(time.Second)),
		"The physical bound for one DB round trip per launch is concurrency / RTT launches per second (docs/published-results.md).",
	)
	if cfg.Launches != 10_000 {
		rep.Notes = append(rep.Notes, "Run with --launches 10000 for the zones-and-latency test's size; \"usher est. 10k\" is 10,000 / launches/s.")
	}
	rep.Headlines = append(rep.Headlines, launchHeadline(res))
	figs, ferr := launchFigures(res)
	if ferr != nil {
		return nil, ferr
	}
	rep.Figures = figs
	return rep, err
}

// LaunchTable puts usher's steps beside the zones-and-latency test's 10 ms rows.
func LaunchTable(res *loadgen.Result, launches int) loadgen.Table {
	n := strconv.Itoa(launches)
	t := loadgen.Table{
		Title: "Brokering: usher (embedded site DB, loopback) beside the zones-and-latency test (Citrix 7.7, 10 ms RTT to the site DB)",
		Header: []string{"concurrent", "usher avg (s)", "usher p99 (s)", "usher launches/s", "usher errors %", "usher time for " + n,
			"usher est. 10k", "the zones-and-latency test avg (s)", "the zones-and-latency test launches/s", "the zones-and-latency test errors %", "the zones-and-latency test time for 10k", "usher/the zones-and-latency test launches/s"},
	}
	for _, s := range res.Steps {
		est := "n/a"
		if s.TPS > 0 {
			est = loadgen.FormatDuration(10_000 / s.TPS)
		}
		ttf := loadgen.FormatDuration(s.TimeToFinish)
		if s.Incomplete {
			ttf += " (incomplete)"
		}
		row := []string{strconv.Itoa(s.Concurrency), fmtSec(s.Latency.Avg), fmtSec(s.Latency.P99), fmtF(s.TPS, 1),
			fmtF(s.ErrorPct, 2), ttf, est}
		if p, ok := seed002At(10, s.Concurrency); ok {
			row = append(row, fmtF(p.AvgSeconds, 1), fmtF(p.PerSecond, 1), fmtF(p.ErrorPct, 2), p.TimeFor10k, fmtF(s.TPS/p.PerSecond, 0)+"x")
		} else {
			row = append(row, "-", "-", "-", "-", "-")
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

func launchFigures(res *loadgen.Result) ([]loadgen.Figure, error) {
	tps, avg := res.LevelSeries("usher")
	for i := range avg.Y {
		avg.Y[i] /= 1000
	}
	seedTPS, seedAvg := loadgen.Series{Name: "the zones-and-latency test, Citrix, 10 ms RTT"}, loadgen.Series{Name: "the zones-and-latency test, Citrix, 10 ms RTT"}
	for _, r := range Seed002 {
		if r.RTTms == 10 {
			seedTPS.X, seedTPS.Y = append(seedTPS.X, float64(r.Concurrent)), append(seedTPS.Y, r.PerSecond)
			seedAvg.X, seedAvg.Y = append(seedAvg.X, float64(r.Concurrent)), append(seedAvg.Y, r.AvgSeconds)
		}
	}
	f1, err := loadgen.LogLinePlot("launches-per-second", "Launches per second, usher beside the zones-and-latency test (higher is better)", "concurrent launches", "launches per second", tps, seedTPS)
	if err != nil {
		return nil, err
	}
	f2, err := loadgen.LogLinePlot("average-response", "Average launch response, usher beside the zones-and-latency test (lower is better)", "concurrent launches", "average launch response (s)", avg, seedAvg)
	if err != nil {
		return nil, err
	}
	return []loadgen.Figure{f1, f2}, nil
}

// launchHeadline offers the step with the most launches per second.
func launchHeadline(res *loadgen.Result) loadgen.Headline {
	best := res.Steps[0]
	for _, s := range res.Steps {
		if s.TPS > best.TPS {
			best = s
		}
	}
	lo, hi := math.Inf(1), 0.0
	for _, r := range Seed002 {
		if r.RTTms == 10 {
			lo, hi = min(lo, r.PerSecond), max(hi, r.PerSecond)
		}
	}
	return loadgen.Headline{
		What: fmt.Sprintf("REST launches, new sessions on %d simulated VDAs of one delivery group", Machines),
		Usher: fmt.Sprintf("%s launches/s at concurrency %d, avg %s ms, p99 %s ms, %.2f%% errors", thousands(best.TPS), best.Concurrency,
			fmtF(best.Latency.Avg, 1), fmtF(best.Latency.P99, 1), best.ErrorPct),
		Yardstick: fmt.Sprintf("Citrix at 10 ms site-DB RTT: %.0f–%.0f launches/s (published)", lo, hi),
		Ratio:     fmt.Sprintf("%.0f× the published best", best.TPS/hi),
		Client:    "Go HTTP client in the bench process (not calibrated: launches are far below any HTTP client's ceiling)",
	}
}
