package bench

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/benchkit"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/loadgen"
	"github.com/usher-vdi/usher/internal/pgadmin"
	"github.com/usher-vdi/usher/internal/pgcluster"
	"github.com/usher-vdi/usher/internal/site/pgstore"
)

// LHCSite is a site whose broker keeps a Local Host Cache.
type LHCSite interface {
	Site
	// InOutage reports whether the broker brokers from its local copy.
	InOutage() bool
	// WrittenBack counts the sessions written back to the site DB after
	// outages, so far.
	WrittenBack() int64
}

// LHCStartFunc starts the demo site (its 1,000 users, 400 applications
// and office desktop; every machine a simulated VDA) on the PostgreSQL
// site DB that db names, with one broker that keeps a Local Host Cache as
// opts say. It returns once every VDA has registered and the broker has
// made its first local copy.
type LHCStartFunc func(ctx context.Context, db string, opts LHCOptions) (LHCSite, error)

// LHCOptions is how the bench's broker runs.
type LHCOptions struct {
	// Password is every demo user's.
	Password string
	// OutageAfter and RecoverAfter are usher broker's --outage-after and
	// --recover-after; zero: their defaults.
	OutageAfter, RecoverAfter time.Duration
}

// Ways to take the site DB away.
const (
	CutClose  = "close"  // the network closes every connection and refuses new ones
	CutSilent = "silent" // the network drops every byte, closing nothing
	CutCrash  = "crash"  // the server crashes: pg_ctl stop -m immediate
)

// LHCConfig sizes usher bench lhc.
type LHCConfig struct {
	// DB is the PostgreSQL server of a run without crashes: the run makes a
	// schema of its own there. A run whose Kinds crash the server starts
	// a throwaway cluster of its own instead (initdb and pg_ctl).
	DB string
	// Concurrency is the enumeration levels (seed 000's: 10 to 100), each
	// run for StepDuration by wrk, with the site DB up and in an outage.
	Concurrency  []int
	StepDuration time.Duration
	// Wrk and Nginx are the binaries: wrk drives the enumerations from
	// another process; nginx's padding answer calibrates wrk's ceiling.
	// A missing wrk skips the enumeration part with a note.
	Wrk, Nginx string
	// Cuts is how many times the site DB goes away under steady launches,
	// logoffs and enumerations, taking Kinds in turn.
	Cuts  int
	Kinds []string
	// Rounds repeats the enumeration part, the modes taking turns; each
	// level reports each mode's median round.
	Rounds int
	// Hold is how long each outage lasts after the first launch brokered
	// from the local copy.
	Hold time.Duration
	// Clients play users 1 to Users launching and logging off the office
	// desktop; Enumerators enumerate over NFuse as other users.
	Clients, Users, Enumerators int
	// OutageAfter and RecoverAfter go to the broker.
	OutageAfter, RecoverAfter time.Duration
}

// DefaultLHCConfig takes about five minutes.
var DefaultLHCConfig = LHCConfig{DB: DefaultDB, Concurrency: []int{10, 20, 40, 60, 100}, StepDuration: 10 * time.Second,
	Wrk: DefaultWrk, Nginx: DefaultNginx, Cuts: 6, Kinds: []string{CutClose, CutSilent, CutCrash}, Hold: 5 * time.Second,
	Clients: 4, Users: 120, Enumerators: 2}

// Defaults of the broker's LHC, as usher broker has them, for the report.
const (
	defaultOutageAfter  = 5 * time.Second
	defaultRecoverAfter = 5 * time.Second
)

// lhcCut is what one cut measured.
type lhcCut struct {
	kind string
	// outage and firstLaunch are from the cut to outage mode and to the
	// first launch acknowledged in it; zero when they never came.
	outage, firstLaunch time.Duration
	// before counts the failed calls between the cut and the first
	// launch from the copy, after those from then to the restore.
	before, after map[string]int
	// slowestFailure is the longest a call took to fail, from the cut
	// to the return.
	slowestFailure time.Duration
	enumErrors     int
	// recovery is from the restore to the broker's return to the site
	// DB; writtenBack the sessions that return wrote back.
	recovery    time.Duration
	writtenBack int64
}

// LHC runs usher bench lhc: seed 000's enumeration of 400 applications
// over NFuse at each concurrency with the site DB up and then cut, driven
// by wrk from another process; then cfg.Cuts cuts of the site DB, of
// each kind in turn, under steady launches, logoffs and enumerations,
// with a per-second timeline, each cut's takeover time, and a history
// check of the site DB against what the clients were told.
func LHC(ctx context.Context, env Env, cfg LHCConfig) (_ *loadgen.Report, err error) {
	if env.StartLHC == nil {
		return nil, errors.New("lhc bench needs a site starter with a Local Host Cache (Env.StartLHC)")
	}
	if cfg.Cuts < 0 || len(cfg.Kinds) == 0 || cfg.Clients < 1 || cfg.Users < cfg.Clients || cfg.Users > demo.Users/2 {
		return nil, fmt.Errorf("lhc bench needs kinds of cut, at least a client, and between %d and %d users", cfg.Clients, demo.Users/2)
	}
	out, log := env.out(), env.logger()
	crash := slices.Contains(cfg.Kinds, CutCrash)

	// The site DB: a throwaway cluster a cut may crash, or a schema of
	// the run's own.
	var direct, where string
	var cluster *pgcluster.Cluster
	if crash {
		fmt.Fprintln(out, "Site DB: a throwaway PostgreSQL cluster (initdb), which the crash cuts stop with pg_ctl stop -m immediate...")
		if cluster, err = pgcluster.Start(); err != nil {
			return nil, fmt.Errorf("a throwaway cluster for the crash cuts (or --cuts-of close,silent): %w", err)
		}
		defer func() {
			if serr := cluster.Stop(); serr != nil {
				err = errors.Join(err, serr)
			}
		}()
		direct, where = cluster.DSN(), "a throwaway cluster"
	} else {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		perr := pgadmin.Exec(pctx, cfg.DB, "SELECT 1")
		cancel()
		if perr != nil {
			return nil, fmt.Errorf("%w: %v", ErrNoPostgres, perr)
		}
		schema, err := pgadmin.CreateSchema(ctx, cfg.DB)
		if err != nil {
			return nil, err
		}
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if derr := schema.Drop(dctx); derr != nil {
				err = errors.Join(err, derr)
			}
		}()
		if direct, err = schema.DSN(); err != nil {
			return nil, err
		}
		where = "schema " + schema.Name()
	}
	wan, err := StartDBWAN(direct)
	if err != nil {
		return nil, err
	}
	defer wan.Close()
	serve, err := wan.Via(direct)
	if err != nil {
		return nil, err
	}

	password := auth.RandomSecret(12)
	opts := LHCOptions{Password: password, OutageAfter: cfg.OutageAfter, RecoverAfter: cfg.RecoverAfter}
	fmt.Fprintf(out, "Starting the demo site on %s, reached through toxiproxy at %s (the cuts happen there)...\n", where, wan.Addr())
	s, err := env.StartLHC(ctx, serve, opts)
	if err != nil {
		return nil, fmt.Errorf("start the site: %w", err)
	}
	defer s.Close()
	r := &lhcRun{s: s, wan: wan, cluster: cluster, cfg: cfg, out: out,
		outageAfter: cmp.Or(cfg.OutageAfter, defaultOutageAfter), recoverAfter: cmp.Or(cfg.RecoverAfter, defaultRecoverAfter)}
	outageAfter, recoverAfter := r.outageAfter, r.recoverAfter

	rep := loadgen.NewReport("usher bench lhc (the Local Host Cache: brokering through a site-DB outage, seed 000)", "")
	user := loadgen.Credential{User: demo.UserName(demo.Users), Password: password, Domain: "DEMO"}
	nfuseURL := s.URL() + NFusePath
	answer, apps, err := probeNFuse(ctx, nil, nfuseURL, user)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "NFuse at %s answers %d applications in %d bytes.\n", nfuseURL, apps, len(answer))

	// Part 1: enumeration with the site DB up, then in an outage.
	if len(cfg.Concurrency) > 0 {
		t, notes, heads, err := lhcEnumerate(ctx, env, cfg, nfuseURL, answer, user, func(ctx context.Context) (func() error, error) {
			restore, err := r.cut(CutClose)
			if err != nil {
				return nil, err
			}
			d, err := r.waitMode(ctx, true, outageAfter+30*time.Second)
			if err != nil {
				return nil, errors.Join(err, restore())
			}
			fmt.Fprintf(out, "Site DB cut: outage mode after %s\n", fmtSeconds(d))
			return func() error {
				if err := restore(); err != nil {
					return err
				}
				_, err := r.waitMode(ctx, false, recoverAfter+time.Minute)
				return err
			}, nil
		})
		if err != nil {
			return nil, err
		}
		if t != nil {
			rep.Tables = append(rep.Tables, *t)
		}
		rep.Notes = append(rep.Notes, notes...)
		rep.Headlines = append(rep.Headlines, heads...)
	}

	// Part 2: cuts under load.
	start := time.Now()
	tl := NewTimeline(start)
	h := NewHistory(password, demo.OfficeDesktop)
	h.Timeline = tl
	stopLaunches := h.Start(s.URL, cfg.Clients, 1, cfg.Users, demo.UserName)
	ectx, stopEnum := context.WithCancel(ctx)
	var ewg sync.WaitGroup
	for i := range cfg.Enumerators {
		u := user
		u.User = demo.UserName(demo.Users - 1 - i)
		ewg.Add(1)
		go func() { defer ewg.Done(); enumerateLoop(ectx, nfuseURL, u, tl) }()
	}
	stop := sync.OnceFunc(func() { stopLaunches(); stopEnum(); ewg.Wait() })
	defer stop()
	fmt.Fprintf(out, "%d clients launch and log off the office desktop as %d users, %d enumerate over NFuse; %d cuts of the site DB (%s in turn), each held %s after the first launch from the copy.\n",
		cfg.Clients, cfg.Users, cfg.Enumerators, cfg.Cuts, strings.Join(cfg.Kinds, ", "), cfg.Hold)
	var cuts []lhcCut
	var runErr error
	pauseFor := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			runErr = ctx.Err()
			return false
		case <-time.After(d):
			return true
		}
	}
	if !pauseFor(3 * time.Second) { // steady state before the first cut
		return nil, runErr
	}
	for i := range cfg.Cuts {
		kind := cfg.Kinds[i%len(cfg.Kinds)]
		c, err := r.oneCut(ctx, i+1, kind, h, tl)
		cuts = append(cuts, c)
		if err != nil {
			runErr = err
			break
		}
		if !pauseFor(3 * time.Second) {
			break
		}
	}
	stop()
	time.Sleep(time.Second) // the last reports land
	tl.Event(time.Now(), "clients stopped")
	log.Info("checking the history against the site DB")
	store, err := pgstore.Open(context.WithoutCancel(ctx), direct, pgstore.Options{Logger: log})
	if err != nil {
		return nil, errors.Join(runErr, fmt.Errorf("open the site DB to check the history: %w", err))
	}
	verdict, err := h.Check(context.WithoutCancel(ctx), store)
	store.Close()
	if err != nil {
		return nil, errors.Join(runErr, err)
	}
	fmt.Fprintf(out, "History: %s\n", verdict)

	rep.Tables = append(rep.Tables, lhcCutsTable(cuts), verdictTable(verdict),
		tl.Table("Per second, from the start of the cuts (launches and logoffs over REST, enumerations over NFuse; errors by call and kind)", "launch", "logoff", "enumerate"))
	rep.CSV = &rep.Tables[len(rep.Tables)-1]
	rep.Headlines = append(rep.Headlines, lhcHeadlines(cuts, verdict, outageAfter)...)
	rep.Notes = append(rep.Notes, machineNote(rep),
		fmt.Sprintf("The site is usher's demo (1,000 users, 400 applications, 57 simulated VDAs) with one broker (server.Open, --outage-after %s, --recover-after %s, "+
			"probes every 500 ms) whose site DB is PostgreSQL (%s) reached only through toxiproxy %s in the bench's process. "+
			"Cuts: close stops the proxy (connections closed, new ones refused), silent makes it drop every byte (a blackhole: nothing closes), "+
			"crash stops the server with pg_ctl stop -m immediate and starts it again (crash recovery).", outageAfter, recoverAfter, where, toxiproxyVersion),
		fmt.Sprintf("Under the cuts, %d clients in the bench's process play users 1 to %d: log on over REST, launch the office desktop (a new session or back to their own), "+
			"log off every third launch; %d more enumerate over NFuse (ctx1). Takeover is the time from the cut to the first launch acknowledged in outage mode. "+
			"The history check reads the site DB directly after the last recovery and compares it with every launch and logoff the clients were told succeeded "+
			"(a launch whose outcome the client never learned may leave a session no client knows; those are tolerated, as many as there were such launches).",
			cfg.Clients, cfg.Users, cfg.Enumerators))
	if runErr == nil && len(verdict.Problems()) > 0 {
		runErr = fmt.Errorf("history check: %s", verdict)
	}
	return rep, runErr
}

// lhcRun is the site under test and how its site DB is taken away.
type lhcRun struct {
	s                         LHCSite
	wan                       *WAN
	cluster                   *pgcluster.Cluster // crash cuts only
	cfg                       LHCConfig
	outageAfter, recoverAfter time.Duration
	out                       io.Writer
}

// cut takes the site DB away as kind says; the function it returns
// brings it back.
func (r *lhcRun) cut(kind string) (restore func() error, err error) {
	switch kind {
	case CutClose:
		r.wan.Cut()
		return r.wan.Restore, nil
	case CutSilent:
		return r.wan.Unhole, r.wan.Blackhole()
	case CutCrash:
		return r.cluster.Start, r.cluster.Crash()
	}
	return nil, fmt.Errorf("no cut of kind %q", kind)
}

// waitMode waits up to limit for the broker to be in outage mode (or out
// of it), and returns how long that took.
func (r *lhcRun) waitMode(ctx context.Context, outage bool, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	for r.s.InOutage() != outage {
		if time.Since(start) > limit {
			return 0, fmt.Errorf("the broker did not %s within %s", map[bool]string{true: "enter outage mode", false: "return to the site DB"}[outage], limit)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return time.Since(start), nil
}

// oneCut takes the site DB away once, as kind says, waits for outage
// mode and for the first launch brokered from the copy, holds the outage,
// brings the DB back and waits for the broker's return.
func (r *lhcRun) oneCut(ctx context.Context, n int, kind string, h *History, tl *Timeline) (lhcCut, error) {
	c := lhcCut{kind: kind}
	wb0 := r.s.WrittenBack()
	at := time.Now()
	tl.Event(at, fmt.Sprintf("cut %d (%s)", n, kind))
	restore, err := r.cut(kind)
	if err != nil {
		return c, fmt.Errorf("cut %d (%s): %w", n, kind, err)
	}
	var waitErr error
	if c.outage, waitErr = r.waitMode(ctx, true, r.outageAfter+30*time.Second); waitErr == nil {
		entered := time.Now()
		c.outage = entered.Sub(at)
		tl.Event(entered, "outage mode")
		h.Mark(entered)
		for h.FirstOK().IsZero() && time.Since(entered) < 30*time.Second && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		if first := h.FirstOK(); !first.IsZero() {
			c.firstLaunch = first.Sub(at)
			tl.Event(first, "first launch from the copy")
			select {
			case <-ctx.Done():
			case <-time.After(r.cfg.Hold):
			}
		} else {
			waitErr = errors.New("no launch brokered from the local copy within 30 s of outage mode")
		}
	}
	back := time.Now()
	tl.Event(back, "site DB back")
	if err := restore(); err != nil {
		return c, errors.Join(waitErr, fmt.Errorf("cut %d (%s): bring the site DB back: %w", n, kind, err))
	}
	d, err := r.waitMode(context.WithoutCancel(ctx), false, r.recoverAfter+time.Minute)
	if err != nil {
		return c, errors.Join(waitErr, err)
	}
	normal := back.Add(d)
	c.recovery = d
	tl.Event(normal, "back to the site DB")
	c.writtenBack = r.s.WrittenBack() - wb0
	first := at.Add(c.firstLaunch)
	if c.firstLaunch == 0 {
		first = back
	}
	c.before = lhcOnly(tl.Errors(at, first), "launch", "logoff", "logon")
	c.after = lhcOnly(tl.Errors(first.Add(time.Second), back), "launch", "logoff", "logon")
	c.slowestFailure = tl.SlowestError(at, normal)
	for _, n := range lhcOnly(tl.Errors(at, normal.Add(time.Second)), "enumerate") {
		c.enumErrors += n
	}
	fmt.Fprintf(r.out, "cut %d (%s): outage mode after %s, first launch from the copy after %s; errors before it %v, after it %v; back to the site DB %s after its return, %d sessions written back\n",
		n, kind, fmtSeconds(c.outage), fmtSeconds(c.firstLaunch), c.before, c.after, fmtSeconds(c.recovery), c.writtenBack)
	return c, waitErr
}

// lhcOnly keeps the errors of the calls ops name.
func lhcOnly(errs map[string]int, ops ...string) map[string]int {
	out := map[string]int{}
	for k, n := range errs {
		if op, _, _ := strings.Cut(k, " "); slices.Contains(ops, op) {
			out[k] = n
		}
	}
	return out
}

// enumerateLoop enumerates as user over NFuse until ctx ends, recording
// each call in tl.
func enumerateLoop(ctx context.Context, url string, user loadgen.Credential, tl *Timeline) {
	body := loadgen.ParseTemplate(loadgen.AppDataRequest).Expand(loadgen.Vars{Cred: user, Encoding: loadgen.Ctx1}, nil)
	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	for ctx.Err() == nil {
		start := time.Now()
		kind := enumerateOnce(ctx, hc, url, body)
		if ctx.Err() != nil {
			return
		}
		tl.Record("enumerate", start, time.Since(start), kind)
		if kind != "" {
			pause(ctx)
		}
	}
}

// enumerateOnce posts one enumeration and returns what failed, if
// anything: a transport error, an HTTP status, or NFuse's ErrorId.
func enumerateOnce(ctx context.Context, hc *http.Client, url, body string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return "request"
	}
	req.Header.Set("Content-Type", "text/xml")
	resp, err := hc.Do(req)
	if err != nil {
		return "transport: " + transportKind(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	switch {
	case err != nil:
		return "transport: " + transportKind(err)
	case resp.StatusCode != http.StatusOK:
		return "HTTP " + strconv.Itoa(resp.StatusCode)
	case bytes.Contains(b, []byte("<ErrorId>")):
		id, _, _ := strings.Cut(string(b[bytes.Index(b, []byte("<ErrorId>"))+len("<ErrorId>"):]), "<")
		return "ErrorId " + id
	case !bytes.Contains(b, []byte("<AppData")):
		return "no applications"
	}
	return ""
}

// lhcEnumerate runs wrk at every level with the site DB up, then takes
// the DB away (outage starts it and returns what ends it) and runs them
// again, and tabulates both beside seed 000.
func lhcEnumerate(ctx context.Context, env Env, cfg LHCConfig, url string, answer []byte, user loadgen.Credential,
	outage func(context.Context) (func() error, error)) (*loadgen.Table, []string, []loadgen.Headline, error) {
	out := env.out()
	if _, err := os.Stat(cfg.Wrk); cfg.Wrk == "" || err != nil {
		fmt.Fprintf(out, "wrk: %v; skipping the enumeration part (Debian: apt-get install wrk)\n", ErrNoWrk)
		return nil, []string{fmt.Sprintf("Enumeration: skipped, %v (%q).", ErrNoWrk, cfg.Wrk)}, nil, nil
	}
	plan := benchkit.PlanCPUs()
	wrk := Wrk{Binary: cfg.Wrk, Plan: plan}
	restorePin, err := plan.PinServer()
	if err != nil {
		return nil, nil, nil, err
	}
	defer restorePin()
	var ceiling map[int]WrkResult
	var nginxNote string
	if n, err := StartTunedNginx(ctx, cfg.Nginx, NginxTuning{Workers: plan.Workers(), CPUs: plan.Server, NoPush: true, NullPath: NullPath},
		NFusePath, answer, "text/xml"); err != nil {
		nginxNote = fmt.Sprintf(" No client ceiling: nginx did not start (%v).", err)
	} else {
		ceiling = map[int]WrkResult{}
		null := strings.TrimSuffix(n.URL, NFusePath) + NullPath
		for _, c := range cfg.Concurrency {
			fmt.Fprintf(out, "wrk -c%d, the client's ceiling: nginx %s\n", c, NullPath)
			r, err := wrk.Run(ctx, null, WrkRequest{}, c, cfg.StepDuration)
			if err != nil {
				n.Stop()
				return nil, nil, nil, err
			}
			ceiling[c] = r
		}
		n.Stop()
	}
	req := WrkRequest{Method: "POST", ContentType: "text/xml", Body: loadgen.ParseTemplate(loadgen.AppDataRequest).Expand(loadgen.Vars{Cred: user, Encoding: loadgen.Ctx1}, nil)}
	cpu := benchkit.SelfCPU
	run := func(phase string) ([]wrkSample, error) {
		var res []wrkSample
		for _, c := range cfg.Concurrency {
			fmt.Fprintf(out, "wrk -t1 -c%d -d%s, NFuse, %s\n", c, cfg.StepDuration, phase)
			before, err := cpu()
			if err != nil {
				return nil, err
			}
			r, err := wrk.Run(ctx, url, req, c, cfg.StepDuration)
			if err != nil {
				return nil, err
			}
			after, err := cpu()
			if err != nil {
				return nil, err
			}
			res = append(res, wrkSample{res: r, cpu: after.Sub(before)})
		}
		return res, nil
	}
	// Rounds alternate the two modes, so that a noisy moment of a shared
	// machine hits one round, not one mode; each level keeps each mode's
	// median round by rate.
	rounds := max(cfg.Rounds, 1)
	ups := make([][]wrkSample, len(cfg.Concurrency))
	downs := make([][]wrkSample, len(cfg.Concurrency))
	for r := 1; r <= rounds; r++ {
		up, err := run("site DB up" + roundOf(r, rounds))
		if err != nil {
			return nil, nil, nil, err
		}
		end, err := outage(ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		down, err := run("site DB cut, outage mode" + roundOf(r, rounds))
		if eerr := end(); err == nil && eerr != nil {
			err = eerr
		}
		if err != nil {
			return nil, nil, nil, err
		}
		for i := range cfg.Concurrency {
			ups[i], downs[i] = append(ups[i], up[i]), append(downs[i], down[i])
		}
	}
	up, down := make([]wrkSample, len(cfg.Concurrency)), make([]wrkSample, len(cfg.Concurrency))
	for i := range cfg.Concurrency {
		up[i], down[i] = medianSample(ups[i]), medianSample(downs[i])
	}
	t := loadgen.Table{
		Title: "Enumerating 400 applications over NFuse in an outage (wrk from another process), beside the site DB up and seed 000 (Citrix LHC, 16 vCPU)",
		Header: []string{"concurrent", "DB up req/s", "DB up p99 ms", "DB up CPU µs/req", "outage req/s", "outage p50 ms", "outage p99 ms", "outage errors",
			"outage CPU µs/req", "client ceiling req/s", "outage / DB up", "Citrix LHC req/s (" + strings.Join(Seed000CPUs[:], ", ") + ")", "Citrix avg ms"},
	}
	var heads []loadgen.Headline
	for i, c := range cfg.Concurrency {
		u, d := up[i], down[i]
		ceil := ceiling[c]
		us := benchkit.Step{Rate: u.res.RPS, Ceiling: ceil.RPS, Client: u.res.Client, Server: u.cpu}
		ds := benchkit.Step{Rate: d.res.RPS, Ceiling: ceil.RPS, Client: d.res.Client, Server: d.cpu}
		// Where the client is the bottleneck the rates say only that
		// both modes kept up with it; the CPU per request still compares
		// the server's work in each.
		ratio := benchkit.Compare(ds, us, 1)
		if !benchkit.Ratio(ratio) && ds.CPUPerOp() > 0 && us.CPUPerOp() > 0 {
			ratio += fmt.Sprintf("; CPU/req outage / DB up %.2f", ds.CPUPerOp()/us.CPUPerOp())
		}
		citrix, avg := "-", "-"
		if row, ok := seed000At(c); ok {
			citrix = fmt.Sprintf("%.1f / %.1f / %.1f", row.TPS[0], row.TPS[1], row.TPS[2])
			avg = fmt.Sprintf("%.0f / %.0f / %.0f", row.AvgMs[0], row.AvgMs[1], row.AvgMs[2])
		}
		ceilS := "-"
		if ceil.RPS > 0 {
			ceilS = fmtF(ceil.RPS, 0)
		}
		t.Rows = append(t.Rows, []string{strconv.Itoa(c), fmtF(u.res.RPS, 0), fmtF(u.res.P99, 2), fmtF(us.CPUPerOp()*1e6, 0), fmtF(d.res.RPS, 0), fmtF(d.res.P50, 2), fmtF(d.res.P99, 2),
			strconv.FormatInt(d.res.Errors(), 10), fmtF(ds.CPUPerOp()*1e6, 0), ceilS, ratio, citrix, avg})
		if i == len(cfg.Concurrency)-1 {
			yard, times := fmt.Sprintf("usher with the site DB up, same run: %s req/s", thousands(u.res.RPS)), ""
			if row, ok := seed000At(c); ok {
				yard += fmt.Sprintf("; Citrix LHC, 16 vCPU: %.1f req/s (published, seed 000)", row.TPS[2])
				times = fmt.Sprintf("; %s× the published", fmtF(d.res.RPS/row.TPS[2], 0))
			}
			heads = append(heads, loadgen.Headline{
				What:      fmt.Sprintf("NFuse enumeration of 400 applications in a site-DB outage (Local Host Cache), %d connections", c),
				Usher:     fmt.Sprintf("%s req/s, p99 %.1f ms, %d errors, %s µs CPU/req", thousands(d.res.RPS), d.res.P99, d.res.Errors(), fmtF(ds.CPUPerOp()*1e6, 0)),
				Yardstick: yard,
				Ratio:     ratio + " of the DB-up figure" + times,
				Client:    wrk.Note(),
				Ceiling:   ceilS + " req/s",
			})
		}
	}
	roundsNote := ""
	if rounds > 1 {
		roundsNote = fmt.Sprintf(" %d rounds, the modes taking turns (DB up, then cut); each level shows each mode's median round by rate.", rounds)
	}
	notes := []string{fmt.Sprintf("Enumeration: wrk (%s, a step of %s per level, no warm-up) posts one user's RequestAppData with ctx1 credentials; CPUs %s, usher with GOMAXPROCS %d. "+
		"The outage rows run after a cut of the site DB (close) once the broker is in outage mode; the ratio is the outage's rate over the same level's with the DB up, "+
		"and where the client was the bottleneck, the server's CPU per request in outage over the same with the DB up (below 1: the outage costs less). "+
		"The client's ceiling is wrk's GET of %s from nginx (%d worker(s) on the server CPUs), padding of the answer's size; a level at %.0f%% of it or more is client-bound and gets no ratio.%s%s",
		wrk.Note(), cfg.StepDuration, plan, plan.Workers(), NullPath, plan.Workers(), 100*benchkit.ClientBound, nginxNote, roundsNote)}
	return &t, notes, heads, nil
}

// lhcCutsTable tabulates the cuts.
func lhcCutsTable(cuts []lhcCut) loadgen.Table {
	t := loadgen.Table{
		Title: "Each cut of the site DB under load: takeover, errors, recovery",
		Header: []string{"cut", "kind", "outage mode after s", "first launch from the copy after s", "errors before it", "errors after it, to the return",
			"enumeration errors", "slowest failed call ms", "return to the site DB after s", "sessions written back"},
	}
	for i, c := range cuts {
		t.Rows = append(t.Rows, []string{strconv.Itoa(i + 1), c.kind, fmtF(c.outage.Seconds(), 2), fmtF(c.firstLaunch.Seconds(), 2), fmtErrs(c.before), fmtErrs(c.after),
			strconv.Itoa(c.enumErrors), fmtF(float64(c.slowestFailure)/1e6, 1), fmtF(c.recovery.Seconds(), 2), strconv.FormatInt(c.writtenBack, 10)})
	}
	return t
}

// fmtErrs is joinCounts, "0" for none.
func fmtErrs(m map[string]int) string {
	if len(m) == 0 {
		return "0"
	}
	return joinCounts(m)
}

// verdictTable is the history check's findings.
func verdictTable(v Verdict) loadgen.Table {
	t := loadgen.Table{Title: "History check: the site DB after the last recovery against what the clients were told", Header: []string{"check", "result"}}
	add := func(k, r string) { t.Rows = append(t.Rows, []string{k, r}) }
	add("verdict", v.String())
	add("launches acknowledged (sessions)", strconv.Itoa(v.Launched))
	add("logoffs acknowledged", strconv.Itoa(v.LoggedOff))
	add("launches of unknown outcome", strconv.Itoa(v.Indeterminate))
	add("sessions in the site DB", strconv.Itoa(v.Sessions))
	for _, k := range []struct {
		name string
		l    []string
	}{{"lost", v.Lost}, {"stale", v.Stale}, {"unexpected", v.Unexpected}, {"duplicated", v.Duplicated}, {"over a machine's limit", v.OverLimit}} {
		add(k.name, strconv.Itoa(len(k.l)))
	}
	add("failed calls, all cuts", fmtErrs(v.Errors))
	for _, n := range v.Notes {
		add("note", n)
	}
	return t
}

// lhcHeadlines offers the takeover times and the verdict to a summary.
func lhcHeadlines(cuts []lhcCut, v Verdict, outageAfter time.Duration) []loadgen.Headline {
	var times []float64
	after := 0
	for _, c := range cuts {
		if c.firstLaunch > 0 {
			times = append(times, c.firstLaunch.Seconds())
		}
		for _, n := range c.after {
			after += n
		}
	}
	heads := []loadgen.Headline{{
		What:      "History check after the cuts (lost, stale, unexpected, duplicated sessions)",
		Usher:     v.String(),
		Yardstick: "-",
	}}
	if len(times) == 0 {
		return heads
	}
	slices.Sort(times)
	return append([]loadgen.Headline{{
		What:      fmt.Sprintf("Takeover after a site-DB cut under load (%d cuts, --outage-after %s): cut to the first launch brokered from the local copy", len(cuts), outageAfter),
		Usher:     fmt.Sprintf("min %.2f s, median %.2f s, max %.2f s; %d failed calls after takeover", times[0], times[len(times)/2], times[len(times)-1], after),
		Yardstick: "Citrix LHC: outage after 90 s, then VDAs re-register with the elected broker (minutes; seed 000)",
	}}, heads...)
}
