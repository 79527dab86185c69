package bench

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/usher-vdi/usher/internal/loadgen"
)

// StormConfig sizes the logon storm.
type StormConfig struct {
	// Users log on and launch at Rate per second (Citrix: 100,000 at 20/s).
	Users int
	Rate  float64
	// Ramp lists the rates tried afterwards, each for RampStep with fresh
	// users, up to the first that usher does not hold: p99 over P99,
	// errors over 1%, or arrivals still unsent at the end. Empty: no ramp.
	Ramp     []float64
	RampStep time.Duration
	P99      time.Duration
	// Workers bounds the logons in flight; arrivals beyond wait (and the
	// wait counts in their latency).
	Workers int
}

// DefaultStormConfig finishes in about three minutes on two cores.
var DefaultStormConfig = StormConfig{Users: 1000, Rate: CitrixStormRate, Ramp: []float64{10, 20, 30, 40, 50, 60, 80, 120},
	RampStep: 10 * time.Second, P99: time.Second, Workers: 64}

// LogonStorm runs Citrix's LHC sizing test at usher's scale: Users log on
// (POST /api/v1/login, one argon2id verification each) and launch (a new
// session each) at Rate per second, an open model that charges any wait
// to the user, then the Ramp for the highest rate usher holds.
func LogonStorm(ctx context.Context, env Env, cfg StormConfig) (*loadgen.Report, error) {
	if cfg.Users < 1 || cfg.Rate <= 0 {
		return nil, fmt.Errorf("logon storm needs users and a rate")
	}
	total, most := cfg.Users, cfg.Users
	for _, r := range cfg.Ramp {
		n := int(math.Ceil(r * cfg.RampStep.Seconds()))
		total += n
		most = max(most, n)
	}
	s, password, err := env.startSite(ctx, total, most)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	log := env.logger()
	rest := &loadgen.REST{Client: loadgen.NewClient(256), BaseURL: s.URL(), Users: Users(total, password),
		Flow: []string{loadgen.StepLogin, loadgen.StepLaunch}, Resources: Applications(), ClientName: "usher-bench"}
	from := func(offset int) loadgen.Target {
		return loadgen.TargetFunc(func(ctx context.Context, i int64) error { return rest.Do(ctx, i+int64(offset)) })
	}

	window := time.Duration(float64(cfg.Users) / cfg.Rate * float64(time.Second))
	storm := loadgen.Storm{Count: cfg.Users, Window: window, Workers: cfg.Workers, Policy: loadgen.Queue}
	fmt.Fprintf(env.out(), "Logon storm: %s\n", storm)
	res, err := storm.Run(ctx, from(0), env.options())
	if res == nil {
		return nil, err
	}
	rep := loadgen.NewReport("usher bench logon-storm (Citrix's LHC sizing test)", "")
	rep.Runs = []loadgen.Run{{Name: "storm", Result: res}}
	rep.Tables = []loadgen.Table{StormTable(res.Steps[0], cfg.Users, cfg.Rate)}
	if t, ok := loadgen.PhasesTable("Each logon's phases", res); ok {
		rep.Tables = append(rep.Tables, t)
	}
	if err != nil {
		return rep, err
	}

	if len(cfg.Ramp) > 0 {
		if _, err := rest.LogoffAll(ctx, 16); err != nil {
			log.Warn("log off after the storm", "err", err)
		}
		ramp, held, err := stormRamp(ctx, env, cfg, rest, from)
		if ramp != nil {
			rep.Runs = append(rep.Runs, loadgen.Run{Name: "ramp", Result: ramp})
			rep.Tables = append(rep.Tables, RampTable(ramp, cfg))
			verdict := fmt.Sprintf("Highest rate usher held: %s logons+launches/s (p99 < %s, errors < 1%%).", fmtF(held, 0), cfg.P99)
			if held == 0 {
				verdict = fmt.Sprintf("usher held none of the ramp's rates (p99 < %s, errors < 1%%).", cfg.P99)
			} else if held == cfg.Ramp[len(cfg.Ramp)-1] {
				verdict += " That is the ramp's top: pass higher --ramp rates to find the limit."
			}
			rep.Notes = append(rep.Notes, verdict)
			if figs, ferr := loadgen.LevelFigures(loadgen.Run{Name: "usher", Result: ramp}); ferr == nil {
				rep.Figures = figs
			}
		}
		if err != nil {
			return rep, err
		}
	}
	rep.Headlines = append(rep.Headlines, stormHeadline(res.Steps[0], cfg))
	rep.Notes = append(rep.Notes,
		machineNote(rep),
		"Each transaction is one user's logon (REST login: an argon2id verification, 19 MiB, 2 passes) and launch (a new session on one of 57 simulated VDAs); "+
			fmt.Sprintf("arrivals follow the schedule whatever usher does, at most %d in flight, and latency runs from the scheduled start (corrected for coordinated omission).", cfg.Workers),
		fmt.Sprintf("Citrix's figures are for %s users at 20/s (8 vCPU, LHC on): theoretical minimum 1h23m20s, measured 1h30m48s; scaled to %d users by the same ratio.",
			strconv.Itoa(CitrixStormUsers), cfg.Users),
	)
	return rep, nil
}

// stormRamp tries the ramp's rates in turn, with fresh users, until one
// is not held; it returns every level tried and the highest held.
func stormRamp(ctx context.Context, env Env, cfg StormConfig, rest *loadgen.REST, from func(int) loadgen.Target) (*loadgen.Result, float64, error) {
	offset := cfg.Users
	var all *loadgen.Result
	held := 0.0
	for _, r := range cfg.Ramp {
		exec := loadgen.Rate{From: r, To: r, StepDuration: cfg.RampStep, Workers: cfg.Workers, Policy: loadgen.Queue}
		fmt.Fprintf(env.out(), "Ramp: %s\n", exec)
		// A rate not held queues without end: give up on a level soon
		// after its time, and count what was still due as unsent.
		opts := env.options()
		opts.Timeout = max(2*cfg.P99, 5*time.Second)
		res, err := exec.Run(ctx, from(offset), opts)
		offset += int(math.Ceil(r * cfg.RampStep.Seconds()))
		if res == nil {
			return all, held, err
		}
		if all == nil {
			all = res
			all.Executor, all.Plan = "rate", fmt.Sprintf("ramp of %v per second, %s each, until p99 >= %s", cfg.Ramp, cfg.RampStep, cfg.P99)
		} else {
			s := res.Steps[0]
			s.Step = len(all.Steps) + 1
			all.Steps = append(all.Steps, s)
			all.Elapsed += res.Elapsed
		}
		if err != nil {
			return all, held, err
		}
		if _, err := rest.LogoffAll(ctx, 16); err != nil {
			env.logger().Warn("log off between ramp steps", "err", err)
		}
		if !holds(res.Steps[0], cfg.P99) {
			break
		}
		held = r
	}
	return all, held, nil
}

func holds(s loadgen.Step, p99 time.Duration) bool {
	return s.Latency.P99 < float64(p99)/float64(time.Millisecond) && s.ErrorPct < 1 && s.Unsent == 0 && s.Dropped == 0
}

// StormTable puts the storm beside Citrix's sizing test scaled to the
// same number of users.
func StormTable(s loadgen.Step, users int, rate float64) loadgen.Table {
	minimum := float64(users) / rate
	citrixRatio := float64(CitrixStormMeasured) / (CitrixStormUsers / CitrixStormRate)
	t := loadgen.Table{
		Title:  fmt.Sprintf("Logon storm: %d users logging on and launching at %s/s", users, fmtF(rate, 1)),
		Header: []string{"", "users", "rate/s", "theoretical minimum", "time", "time / minimum", "avg", "p50", "p99", "errors %"},
	}
	ttf := loadgen.FormatDuration(s.TimeToFinish)
	if s.Incomplete {
		ttf += " (incomplete)"
	}
	t.Rows = append(t.Rows,
		[]string{"usher", strconv.Itoa(users), fmtF(rate, 1), loadgen.FormatDuration(minimum), ttf, fmtF(s.TimeToFinish/minimum, 3),
			loadgen.FormatMillis(s.Latency.Avg), loadgen.FormatMillis(s.Latency.P50), loadgen.FormatMillis(s.Latency.P99), fmtF(s.ErrorPct, 2)},
		[]string{"Citrix 7.12 LHC, 8 vCPU (scaled)", strconv.Itoa(users), fmtF(CitrixStormRate, 1), loadgen.FormatDuration(float64(users) / CitrixStormRate),
			loadgen.FormatDuration(float64(users) / CitrixStormRate * citrixRatio), fmtF(citrixRatio, 3), "-", "-", "-", "-"},
		[]string{"Citrix 7.12 LHC, 8 vCPU (published)", strconv.Itoa(CitrixStormUsers), fmtF(CitrixStormRate, 1), "1h23m20s", "1h30m48s",
			fmtF(citrixRatio, 3), "-", "-", "-", "-"},
	)
	return t
}

// RampTable shows each rate of the ramp and whether usher held it.
func RampTable(r *loadgen.Result, cfg StormConfig) loadgen.Table {
	t := loadgen.Table{
		Title:  fmt.Sprintf("Ramp: logons+launches per second, %s each, fresh users", cfg.RampStep),
		Header: []string{"rate/s", "requests", "tx/s", "avg", "p50", "p99", "p99 uncorrected", "max", "errors %", "unsent", "held"},
	}
	for _, s := range r.Steps {
		u := "-"
		if s.Uncorrected != nil {
			u = loadgen.FormatMillis(s.Uncorrected.P99)
		}
		held := "yes"
		if !holds(s, cfg.P99) {
			held = "no"
		}
		t.Rows = append(t.Rows, []string{fmtF(s.Rate, 0), strconv.FormatInt(s.Requests, 10), fmtF(s.TPS, 1),
			loadgen.FormatMillis(s.Latency.Avg), loadgen.FormatMillis(s.Latency.P50), loadgen.FormatMillis(s.Latency.P99), u,
			loadgen.FormatMillis(s.Latency.Max), fmtF(s.ErrorPct, 2), strconv.FormatInt(s.Unsent, 10), held})
	}
	return t
}

// stormHeadline offers the storm's time against its theoretical minimum.
func stormHeadline(s loadgen.Step, cfg StormConfig) loadgen.Headline {
	minimum := float64(cfg.Users) / cfg.Rate
	return loadgen.Headline{
		What: fmt.Sprintf("Logon storm: %d users logging on and launching at %s/s", cfg.Users, fmtF(cfg.Rate, 0)),
		Usher: fmt.Sprintf("%s (%.3f× the minimum), p99 %s, %.2f%% errors", loadgen.FormatDuration(s.TimeToFinish), s.TimeToFinish/minimum,
			loadgen.FormatMillis(s.Latency.P99), s.ErrorPct),
		Yardstick: fmt.Sprintf("Citrix 7.12 LHC, 8 vCPU: %.3f× the minimum (published)", float64(CitrixStormMeasured)/(CitrixStormUsers/CitrixStormRate)),
		Client:    "Go HTTP client in the bench process, open arrivals on a schedule (not calibrated)",
	}
}
