package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/usher-vdi/usher/internal/bench"
	"github.com/usher-vdi/usher/internal/lhc"
	"github.com/usher-vdi/usher/internal/loadgen"
	"github.com/usher-vdi/usher/internal/server"
)

func (m *Main) benchLHC(ctx context.Context, args []string) error {
	cfg := bench.DefaultLHCConfig
	var b benchFlags
	fs := m.flagSet("bench lhc", "[flags]\n\nThe Local Host Cache (seed 000): enumeration of 400 applications over NFuse in a site-DB outage beside the DB up, then cuts of the PostgreSQL site DB under load, with takeover times, a per-second timeline and a history check.")
	conc := fs.String("concurrency", "10,20,40,60,100", "enumeration levels, driven by wrk with the site DB up and in an outage (\"\" to skip the enumeration part)")
	fs.DurationVar(&cfg.StepDuration, "step-duration", cfg.StepDuration, "how long each enumeration level lasts")
	fs.IntVar(&cfg.Rounds, "rounds", 1, "repeat the enumeration part this many times, the site DB up and cut in turn, and report each level's median round")
	fs.StringVar(&cfg.Wrk, "wrk", cfg.Wrk, "wrk binary for the enumeration part (skipped with a note when missing)")
	fs.StringVar(&cfg.Nginx, "nginx", cfg.Nginx, "nginx binary whose padding answer calibrates wrk's ceiling (\"\": no ceiling)")
	fs.StringVar(&cfg.DB, "db", cfg.DB, "PostgreSQL server (a user who may create schemas) for a run without crash cuts; the run makes a schema of its own there")
	fs.IntVar(&cfg.Cuts, "cuts", cfg.Cuts, "how many times the site DB goes away under load")
	kinds := fs.String("kinds", strings.Join(cfg.Kinds, ","), "the cuts' kinds, taken in turn: close (connections closed, new ones refused), silent (every byte dropped), crash (pg_ctl stop -m immediate on a throwaway cluster the run starts)")
	fs.DurationVar(&cfg.Hold, "hold", cfg.Hold, "how long each outage lasts after the first launch brokered from the local copy")
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "clients launching and logging off the office desktop")
	fs.IntVar(&cfg.Users, "users", cfg.Users, "users those clients play, shared among them")
	fs.IntVar(&cfg.Enumerators, "enumerators", cfg.Enumerators, "clients enumerating over NFuse through the cuts")
	fs.DurationVar(&cfg.OutageAfter, "outage-after", 0, "the broker's --outage-after (default: its own, 5s)")
	fs.DurationVar(&cfg.RecoverAfter, "recover-after", 0, "the broker's --recover-after (default: its own, 5s)")
	b.register(fs, "lhc")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	cfg.Concurrency = nil
	if *conc != "" {
		lv, err := loadgen.ParseLevels(*conc)
		if err != nil {
			return usageError{"--concurrency " + err.Error()}
		}
		cfg.Concurrency = lv.Concurrencies()
	}
	cfg.Kinds = nil
	for _, k := range strings.Split(*kinds, ",") {
		k = strings.TrimSpace(k)
		if !slices.Contains([]string{bench.CutClose, bench.CutSilent, bench.CutCrash}, k) {
			return usageError{fmt.Sprintf("--kinds: %q is not close, silent or crash", k)}
		}
		cfg.Kinds = append(cfg.Kinds, k)
	}
	switch {
	case cfg.StepDuration < time.Second && len(cfg.Concurrency) > 0:
		return usageError{"--step-duration must be at least 1s"}
	case cfg.Rounds < 1:
		return usageError{"--rounds must be at least 1"}
	case cfg.Cuts < 0:
		return usageError{"--cuts must not be negative"}
	case cfg.Hold < 0:
		return usageError{"--hold must not be negative"}
	case cfg.Clients < 1 || cfg.Enumerators < 0:
		return usageError{"--clients must be at least 1, --enumerators not negative"}
	case cfg.Users < cfg.Clients || cfg.Users > 500:
		return usageError{fmt.Sprintf("--users must be between --clients (%d) and 500", cfg.Clients)}
	case cfg.OutageAfter < 0 || cfg.RecoverAfter < 0:
		return usageError{"--outage-after and --recover-after must not be negative"}
	}
	env, done, err := m.benchEnv(b)
	if err != nil {
		return err
	}
	defer done()
	rep, err := bench.LHC(ctx, env, cfg)
	done()
	if rep == nil {
		return err
	}
	if rerr := m.benchReport(rep, b, args, "lhc"); rerr != nil {
		return rerr
	}
	return err
}

// lhcSite is a bench site whose broker keeps a Local Host Cache.
type lhcSite struct{ benchSite }

// InOutage reports the mode the LHC's status shows, which changes back
// once the write-back is counted.
func (s lhcSite) InOutage() bool { return s.s.LHC().Status().Mode != lhc.Normal }

func (s lhcSite) WrittenBack() int64 { return s.s.LHC().Status().WrittenBack }

// benchLHCStarter starts the demo site on a PostgreSQL site DB, with
// data directories under root, as usher broker --db runs it, every
// machine played by a simulated VDA.
func (m *Main) benchLHCStarter(root string, log *slog.Logger) bench.LHCStartFunc {
	var n atomic.Int64
	return func(ctx context.Context, db string, opts bench.LHCOptions) (bench.LHCSite, error) {
		data := filepath.Join(root, fmt.Sprintf("lhc-site-%d", n.Add(1)))
		s, err := server.Open(ctx, server.Config{DataDir: data, DB: db, Listen: "127.0.0.1:0", Name: "bench-lhc", Demo: true, DemoPassword: opts.Password,
			SimVDAs: -1, SimLogonDelay: -1, OutageAfter: opts.OutageAfter, RecoverAfter: opts.RecoverAfter, Logger: log, SourceFree: -1, MaxConnsPerClient: -1})
		if err != nil {
			return nil, err
		}
		if s.LHC() == nil {
			s.Close()
			return nil, fmt.Errorf("the site on %s keeps no Local Host Cache", db)
		}
		if err := s.WaitRegistered(ctx, time.Minute); err != nil {
			s.Close()
			return nil, err
		}
		deadline := time.Now().Add(time.Minute)
		for s.LHC().Status().CopyAt.IsZero() {
			if time.Now().After(deadline) {
				s.Close()
				return nil, fmt.Errorf("no local copy made within a minute")
			}
			time.Sleep(20 * time.Millisecond)
		}
		return lhcSite{benchSite{s}}, nil
	}
}
