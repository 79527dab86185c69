package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/loadgen"
	"github.com/usher-vdi/usher/internal/pgadmin"
	"github.com/usher-vdi/usher/internal/site"
)

// DBStartFunc starts a site whose site DB is the PostgreSQL database that
// serve names, once cfg has been loaded into it through load: the same
// database, reached directly rather than across the WAN. It returns once
// every machine's simulated VDA has registered.
type DBStartFunc func(ctx context.Context, cfg *site.Config, load, serve string) (Site, error)

// LatencyConfig sizes the zones-and-latency test over a WAN.
type LatencyConfig struct {
	LaunchConfig
	// RTTs are the round-trip times between the broker and the site DB,
	// a row of cells each, in whole milliseconds. A row at RTT 0 (the same
	// path with no latency added: the machine's ceiling) is always
	// measured, first.
	RTTs []time.Duration
	// DB is the PostgreSQL server's DSN, of a user who may create schemas.
	// The run makes a schema of its own there and drops it at the end.
	DB string
	// CellLimit bounds each cell (default DefaultCellLimit): launches not
	// done by then are abandoned and the cell is reported as cut off.
	CellLimit time.Duration
}

// Defaults for LatencyConfig.
var (
	// DefaultRTTs are the zones-and-latency test's.
	DefaultRTTs      = []time.Duration{10 * time.Millisecond, 45 * time.Millisecond, 90 * time.Millisecond, 160 * time.Millisecond, 250 * time.Millisecond}
	DefaultCellLimit = 2 * time.Minute
)

// DefaultSatellitePool is the satellite broker's site-DB pool when --db
// does not set pool_max_conns: a broker a WAN away holds a connection
// for every round trip of every transaction in flight, so it needs many
// more than a broker next to its DB; 80 leaves room, under PostgreSQL's
// default max_connections of 100, for the bench's own connections.
const DefaultSatellitePool = 80

// DefaultDB is the PostgreSQL server a latency run uses when none is
// given: the local one, trusting local connections.
const DefaultDB = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// ErrNoPostgres is returned when the PostgreSQL server does not answer.
var ErrNoPostgres = errors.New("no PostgreSQL server")

// activityInterval is how often the server's view of the site's
// connections is sampled.
const activityInterval = 100 * time.Millisecond

// latencyCell is one cell: an RTT and a concurrency.
type latencyCell struct {
	rtt  time.Duration
	step loadgen.Step
	db   DBTraffic
	act  pgadmin.Activity
	site siteCounters
	// logoffErr is why logging the last cell's sessions off before this
	// one failed, if it did: those sessions stayed live.
	logoffErr error
}

// LaunchOverLatency runs the zones-and-latency test as its author did:
// a satellite broker (one usher site, 57 simulated VDAs) whose site DB is
// a PostgreSQL database across a WAN of each RTT, simulated by toxiproxy
// in this process. Each cell launches cfg.Launches sessions through the
// REST API at one concurrency, as Launch does. Between the broker and the
// WAN a DBTap counts the site DB's round trips and what they asked for; a
// connection of the bench's own samples what the server's backends do.
func LaunchOverLatency(ctx context.Context, env Env, cfg LatencyConfig) (_ *loadgen.Report, err error) {
	if cfg.Launches < 1 || len(cfg.Concurrency) == 0 {
		return nil, fmt.Errorf("launch bench needs launches and concurrencies")
	}
	if env.StartDB == nil {
		return nil, errors.New("launch bench over a WAN needs a site starter on PostgreSQL (Env.StartDB)")
	}
	rtts, err := rttRows(cfg.RTTs)
	if err != nil {
		return nil, err
	}
	limit := cmp.Or(cfg.CellLimit, DefaultCellLimit)
	log := env.logger()
	out := env.out()

	_, upstream, err := pgadmin.Server(cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("--db: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = pgadmin.Exec(pctx, cfg.DB, "SELECT 1")
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %v", ErrNoPostgres, upstream, err)
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
	direct, err := schema.DSN()
	if err != nil {
		return nil, err
	}
	where := upstream
	wan, err := StartDBWAN(direct)
	if err != nil {
		return nil, err
	}
	defer wan.Close()
	pool := poolSize(cfg.DB)
	tap, err := StartDBTap("tcp", wan.Addr(), pool)
	if err != nil {
		return nil, err
	}
	defer tap.Close()
	app := "usher-bench-" + strings.TrimPrefix(schema.Name(), "usher_bench_")
	serve, err := pgadmin.Via(direct, tap.Addr())
	if err == nil {
		serve, err = pgadmin.With(serve, "application_name", app)
	}
	if err == nil && !pgadmin.Sets(serve, "pool_max_conns") {
		serve, err = pgadmin.With(serve, "pool_max_conns", strconv.Itoa(pool))
	}
	if err == nil && !pgadmin.Sets(serve, "sslmode") {
		// The tap reads the statements; TLS would hide them.
		serve, err = pgadmin.With(serve, "sslmode", "disable")
	}
	if err != nil {
		return nil, err
	}
	act, err := pgadmin.StartActivity(ctx, cfg.DB, app, activityInterval)
	if err != nil {
		return nil, fmt.Errorf("watch the site's connections: %w", err)
	}
	defer act.Close()

	password := auth.RandomSecret(12)
	hash, err := auth.HashPassword(password, auth.DefaultParams)
	if err != nil {
		return nil, err
	}
	siteCfg := SiteConfig(cfg.Launches, cfg.Launches, hash)
	fmt.Fprintf(out, "Site DB: schema %s on %s, reached through toxiproxy at %s; loading the bench site into it directly...\n", schema.Name(), where, wan.Addr())
	start := time.Now()
	s, err := env.StartDB(ctx, siteCfg, direct, serve)
	if err != nil {
		return nil, fmt.Errorf("start the bench site on PostgreSQL: %w", err)
	}
	defer s.Close()
	log.Info("bench site up", "url", s.URL(), "users", len(siteCfg.Users), "machines", len(siteCfg.Machines), "took", time.Since(start).Round(time.Millisecond))

	rest := &loadgen.REST{Client: loadgen.NewClient(256), BaseURL: s.URL(), Users: Users(cfg.Launches, password),
		Flow: []string{loadgen.StepLaunch}, Resources: Applications(), ClientName: "usher-bench"}
	logons, err := logOnFirst(ctx, out, rest, cfg.Launches, cfg.LogonConcurrency, ", RTT 0")
	if err != nil {
		return nil, err
	}

	var cells []latencyCell
	var runErr error
	// Logging off happens with no latency, untimed, so that a high RTT's
	// logoffs (thousands, each a site DB transaction) do not take longer
	// than its launches. A logoff that fails leaves its session live, and
	// the run goes on: the next cell's report says so.
	logoff := func(ctx context.Context) (failed, err error) {
		if err := wan.SetRTT(0); err != nil {
			return nil, err
		}
		n, err := rest.LogoffAll(ctx, 16)
		log.Info("logged the last cell's sessions off", "sessions", n)
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(out, "Logging the last cell's sessions off: %v\n", err)
			return err, nil
		}
		return nil, ctx.Err()
	}
	metrics := loadgen.NewClient(2)
cells:
	for _, rtt := range rtts {
		for _, c := range cfg.Concurrency {
			if ctx.Err() != nil {
				runErr = ctx.Err()
				break cells
			}
			logoffErr, err := logoff(ctx)
			if err == nil {
				err = wan.SetRTT(rtt)
			}
			if err != nil {
				runErr = err
				break cells
			}
			exec := loadgen.FixedWork{Concurrency: []int{c}, Requests: cfg.Launches, StepTimeout: limit}
			fmt.Fprintf(out, "RTT %s: %s (cut off after %s)\n", fmtRTT(rtt), exec, limit)
			db0, a0, s0 := tap.Mark(), act.Mark(), scrapeSite(ctx, metrics, s.URL())
			res, err := exec.Run(ctx, rest, env.options())
			db1, a1, s1 := tap.Mark(), act.Mark(), scrapeSite(ctx, metrics, s.URL())
			if res != nil && len(res.Steps) == 1 {
				cells = append(cells, latencyCell{rtt: rtt, step: res.Steps[0], db: db1.Sub(db0), act: a1.Sub(a0), site: s1.Sub(s0), logoffErr: logoffErr})
			}
			if err != nil {
				runErr = err
				break cells
			}
		}
	}
	if failed, err := logoff(context.WithoutCancel(ctx)); failed != nil || err != nil {
		log.Warn("log off after the run", "err", cmp.Or(failed, err))
	}
	if len(cells) == 0 {
		return nil, cmp.Or(runErr, errors.New("no cell ran"))
	}
	rep := latencyReport(cells, cfg, latencyRun{pool: pool, logons: logons, limit: limit})
	return rep, runErr
}

// rttRows returns the rows' RTTs: 0 first, then the others rising, each
// once.
func rttRows(rtts []time.Duration) ([]time.Duration, error) {
	out := []time.Duration{0}
	for _, r := range rtts {
		if r < 0 || r%time.Millisecond != 0 {
			return nil, fmt.Errorf("RTT %s is not a whole, non-negative number of milliseconds", r)
		}
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out, nil
}

// poolSize is the satellite's site DB pool for dsn: its pool_max_conns,
// else DefaultSatellitePool.
func poolSize(dsn string) int {
	for _, f := range strings.FieldsFunc(dsn, func(r rune) bool { return r == ' ' || r == '?' || r == '&' }) {
		if v, ok := strings.CutPrefix(f, "pool_max_conns="); ok {
			if u, err := url.QueryUnescape(strings.Trim(v, "'")); err == nil {
				if n, err := strconv.Atoi(u); err == nil && n > 0 {
					return n
				}
			}
		}
	}
	return DefaultSatellitePool
}

func fmtRTT(rtt time.Duration) string {
	return strconv.FormatInt(rtt.Milliseconds(), 10) + " ms"
}

// latencyRun is what the report says about the run as a whole.
type latencyRun struct {
	pool   int
	logons time.Duration
	limit  time.Duration
}

// latencyReport tabulates the cells.
func latencyReport(cells []latencyCell, cfg LatencyConfig, run latencyRun) *loadgen.Report {
	rep := loadgen.NewReport("usher bench launch --rtt (Citrix's zones-and-latency test over a WAN to a PostgreSQL site DB)", "")
	var rows []time.Duration
	for _, c := range cells {
		if !slices.Contains(rows, c.rtt) {
			rows = append(rows, c.rtt)
		}
	}
	for _, rtt := range rows {
		res := &loadgen.Result{Executor: "fixed", Model: loadgen.Closed,
			Plan: fmt.Sprintf("fixed work: %d launches at each concurrency of %v, RTT %s", cfg.Launches, cfg.Concurrency, fmtRTT(rtt))}
		for _, c := range cells {
			if c.rtt == rtt {
				st := c.step
				st.Step = len(res.Steps)
				res.Steps = append(res.Steps, st)
			}
		}
		rep.Runs = append(rep.Runs, loadgen.Run{Name: "usher, RTT " + fmtRTT(rtt), Result: res})
	}
	rep.Tables = []loadgen.Table{LatencyTable(cells, cfg.Launches), latencyDBTable(cells, run.pool), latencyKindsTable(cells)}
	for _, r := range rep.Runs {
		rep.Tables = append(rep.Tables, loadgen.StepsTable(r.Name+", in detail", r.Result))
	}
	rep.Notes = append(rep.Notes, machineNote(rep),
		fmt.Sprintf("The satellite broker is one usher site (server.Open, %d simulated VDAs in one delivery group, the demo's 400 applications) whose site DB "+
			"is a schema of its own on the PostgreSQL server, reached only through toxiproxy %s, run in the bench's process as a library: "+
			"a latency toxic of half the RTT on each direction (whole milliseconds, the upstream half rounded up), on a loopback port. "+
			"The RTT-0 row goes the same way with no toxic: the machine's ceiling. The configuration was loaded into the schema directly; "+
			"the RTT changed between cells without restarting the site (its connections stay open).", Machines, toxiproxyVersion),
		fmt.Sprintf("Each launch is a new session of another user (REST, POST /api/v1/resources/NAME/launch; the client is the bench's Go HTTP client in this process, "+
			"on the same two cores as the site and PostgreSQL). %d users logged on before the run in %s (untimed). Before each cell the RTT is set to 0, "+
			"the last cell's sessions are logged off (untimed), then the cell's RTT is set. A cell is cut off after %s; what it did by then is reported.",
			cfg.Launches, run.logons.Round(time.Second), run.limit),
		fmt.Sprintf("Round trips are counted on the wire between the broker and toxiproxy (DBTap): a burst of the client's PostgreSQL messages answered by the server "+
			"is one, however many statements it pipelines. The satellite's site DB pool holds at most %d connections (pool_max_conns in --db, else DefaultSatellitePool); "+
			"\"waiting\" connections are those between a burst and its answer, the RTT included, so they are a floor of the connections the pool has lent out.", run.pool),
		"The bound is concurrency / RTT: the launches per second if each launch cost exactly one site DB round trip and nothing else.",
	)
	for _, c := range cells {
		if c.logoffErr != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("Before RTT %s / %d, logging the last cell's sessions off failed, leaving sessions live "+
				"(their users' launches may go back to them): %v", fmtRTT(c.rtt), c.step.Concurrency, c.logoffErr))
		}
	}
	rep.Notes = append(rep.Notes, latencyShortfalls(cells, run.pool)...)
	if cfg.Launches != 10_000 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d launches per cell; the zones-and-latency test launched 10,000 (--launches 10000).", cfg.Launches))
	}
	rep.Headlines = latencyHeadlines(cells)
	if f, err := latencyFigure(cells); err == nil {
		rep.Figures = append(rep.Figures, f)
	}
	return rep
}

// rtt0At returns the RTT-0 cell at concurrency c.
func rtt0At(cells []latencyCell, c int) (loadgen.Step, bool) {
	for _, x := range cells {
		if x.rtt == 0 && x.step.Concurrency == c {
			return x.step, true
		}
	}
	return loadgen.Step{}, false
}

// bound is concurrency / RTT in launches per second, 0 at RTT 0.
func bound(c latencyCell) float64 {
	if c.rtt <= 0 {
		return 0
	}
	return float64(c.step.Concurrency) / c.rtt.Seconds()
}

// done describes how many launches a cell finished, and whether it was
// cut off.
func done(s loadgen.Step, launches int) string {
	d := strconv.FormatInt(s.Requests, 10)
	if s.Incomplete {
		d += fmt.Sprintf(" of %d (cut off)", launches)
	}
	return d
}

// LatencyTable puts every cell beside its bound, the RTT-0 cell and the
// zones-and-latency test's cell.
func LatencyTable(cells []latencyCell, launches int) loadgen.Table {
	t := loadgen.Table{
		Title: "Brokering over a WAN to a PostgreSQL site DB: usher beside the bound and the zones-and-latency test (Citrix 7.7, 10,000 launches a cell)",
		Header: []string{"RTT", "concurrent", "launches done", "usher launches/s", "usher avg (s)", "usher p99 (s)", "usher errors %",
			"bound concurrent/RTT (launches/s)", "usher / bound", "RTT-0 launches/s", "the zones-and-latency test launches/s",
			"the zones-and-latency test errors %", "the zones-and-latency test avg (s)", "usher / the zones-and-latency test"},
	}
	for _, c := range cells {
		s := c.step
		row := []string{fmtRTT(c.rtt), strconv.Itoa(s.Concurrency), done(s, launches), fmtF(s.TPS, 1),
			fmtF(s.Latency.Avg/1000, 3), fmtF(s.Latency.P99/1000, 3), fmtF(s.ErrorPct, 2)}
		if b := bound(c); b > 0 {
			row = append(row, fmtF(b, 1), fmtF(s.TPS/b, 2))
		} else {
			row = append(row, "-", "-")
		}
		if z, ok := rtt0At(cells, s.Concurrency); ok {
			row = append(row, fmtF(z.TPS, 1))
		} else {
			row = append(row, "-")
		}
		if p, ok := seed002At(int(c.rtt.Milliseconds()), s.Concurrency); ok && c.rtt > 0 {
			if p.Unavailable {
				row = append(row, "n/a", fmtF(p.ErrorPct, 1), "n/a", "-")
			} else {
				row = append(row, fmtF(p.PerSecond, 1), fmtF(p.ErrorPct, 2), fmtF(p.AvgSeconds, 1), fmtF(s.TPS/p.PerSecond, 0)+"x")
			}
		} else {
			row = append(row, "-", "-", "-", "-")
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// placeRoundTrips counts the round trips that called place_session
// (site.Placer), their preparation included.
func placeRoundTrips(d DBTraffic) int64 {
	var n int64
	for k, v := range d.ByKind {
		if strings.Contains(k, "place_session") {
			n += v
		}
	}
	return n
}

func perLaunch(n int64, s loadgen.Step) string {
	if s.Requests == 0 {
		return "-"
	}
	return fmtF(float64(n)/float64(s.Requests), 2)
}

// latencyDBTable is what the site DB saw in each cell.
func latencyDBTable(cells []latencyCell, pool int) loadgen.Table {
	t := loadgen.Table{
		Title: fmt.Sprintf("The site DB in each cell: round trips counted on the wire, connections waiting for an answer (pool: %d), and the server's backends", pool),
		Header: []string{"RTT", "concurrent", "cell (s)", "round trips", "round trips / launch", "place_session round trips / launch",
			"other round trips / s", fmt.Sprintf("pool bound %d / (round trips per launch × RTT) (launches/s)", pool),
			"connections open (most)", "waiting for an answer (mean)", "waiting (most)",
			fmt.Sprintf("time with all %d waiting %%", pool), "backends active (mean)", "waiting for a lock (mean / most)", "idle in transaction (mean / most)",
			"VDA registrations", "machines registered at the end", "launches that reconnected"},
	}
	for _, c := range cells {
		d, a := c.db, c.act
		secs := max(d.Span.Seconds(), 1e-9)
		place := placeRoundTrips(d)
		t.Rows = append(t.Rows, []string{fmtRTT(c.rtt), strconv.Itoa(c.step.Concurrency), fmtF(secs, 1),
			strconv.FormatInt(d.RoundTrips, 10), perLaunch(d.RoundTrips, c.step), perLaunch(place, c.step),
			fmtF(float64(d.RoundTrips-place)/secs, 1), fmtPoolBound(poolBound(c, pool)), strconv.Itoa(d.MaxOpen),
			fmtF(d.Waiting.Seconds()/secs, 1), strconv.Itoa(d.MaxWaiting), fmtF(100*d.Full.Seconds()/secs, 0),
			fmtF(a.Mean(a.Active), 1), fmtF(a.Mean(a.LockWaits), 2) + " / " + strconv.Itoa(a.MaxLockWaits),
			fmtF(a.Mean(a.IdleInTx), 1) + " / " + strconv.Itoa(a.MaxIdle)})
		row := &t.Rows[len(t.Rows)-1]
		if c.site.ok {
			*row = append(*row, fmtF(c.site.registrations, 0), fmtF(c.site.registered, 0), fmtF(c.site.reconnects, 0))
		} else {
			*row = append(*row, "-", "-", "-")
		}
	}
	return t
}

// poolBound is the most launches per second that pool connections can
// carry at the cell's RTT and round trips per launch, each round trip
// holding a connection for an RTT (Little's law); 0 at RTT 0 or with no
// launch.
func poolBound(c latencyCell, pool int) float64 {
	if c.rtt <= 0 || c.step.Requests == 0 || c.db.RoundTrips == 0 {
		return 0
	}
	perLaunch := float64(c.db.RoundTrips) / float64(c.step.Requests)
	return float64(pool) / (perLaunch * c.rtt.Seconds())
}

func fmtPoolBound(b float64) string {
	if b <= 0 {
		return "-"
	}
	return fmtF(b, 1)
}

// maxKinds is how many kinds of round trips the kinds table lists.
const maxKinds = 16

// latencyKindsTable lists what the round trips asked for, per launch, in
// the cells at the highest concurrency of each RTT.
func latencyKindsTable(cells []latencyCell) loadgen.Table {
	top := 0
	for _, c := range cells {
		top = max(top, c.step.Concurrency)
	}
	var cols []latencyCell
	total := map[string]int64{}
	for _, c := range cells {
		if c.step.Concurrency != top {
			continue
		}
		cols = append(cols, c)
		for k, n := range c.db.ByKind {
			total[k] += n
		}
	}
	t := loadgen.Table{
		Title:  fmt.Sprintf("What the broker asked the site DB, in round trips per launch, at concurrency %d (statements as sent; \"prepare:\" round trips only prepared them)", top),
		Header: []string{"round trip (its first two statements other than BEGIN/COMMIT)"},
	}
	for _, c := range cols {
		t.Header = append(t.Header, "RTT "+fmtRTT(c.rtt))
	}
	kinds := slices.SortedFunc(maps.Keys(total), func(a, b string) int { return cmp.Or(cmp.Compare(total[b], total[a]), cmp.Compare(a, b)) })
	other := kinds[min(len(kinds), maxKinds):]
	kinds = kinds[:min(len(kinds), maxKinds)]
	for _, k := range kinds {
		row := []string{k}
		for _, c := range cols {
			row = append(row, perLaunch(c.db.ByKind[k], c.step))
		}
		t.Rows = append(t.Rows, row)
	}
	if len(other) > 0 {
		row := []string{fmt.Sprintf("%d other kinds", len(other))}
		for _, c := range cols {
			var n int64
			for _, k := range other {
				n += c.db.ByKind[k]
			}
			row = append(row, perLaunch(n, c.step))
		}
		t.Rows = append(t.Rows, row)
	}
	row := []string{"all"}
	for _, c := range cols {
		row = append(row, perLaunch(c.db.RoundTrips, c.step))
	}
	t.Rows = append(t.Rows, row)
	return t
}

// shortfallShare is the share of min(bound, RTT-0) below which a cell is
// said to fall short.
const shortfallShare = 0.8

// latencyShortfalls names the cells under shortfallShare × min(bound,
// RTT-0 figure), each with what the site DB saw.
func latencyShortfalls(cells []latencyCell, pool int) []string {
	var short []string
	for _, c := range cells {
		if c.rtt == 0 {
			continue
		}
		want := bound(c)
		if z, ok := rtt0At(cells, c.step.Concurrency); ok {
			want = min(want, z.TPS)
		}
		if c.step.TPS >= shortfallShare*want {
			continue
		}
		d, a := c.db, c.act
		secs := max(d.Span.Seconds(), 1e-9)
		short = append(short, fmt.Sprintf("RTT %s / %d: %.1f launches/s, %.0f%% of %.1f; %s round trips per launch (%s calling place_session), "+
			"so %d pool connections carry at most %s launches/s; %.1f connections waiting for an answer on average (most %d, all %d waiting %.0f%% of the time); "+
			"%.2f backends waiting for a lock and %.1f idle in a transaction on average%s.",
			fmtRTT(c.rtt), c.step.Concurrency, c.step.TPS, 100*c.step.TPS/want, want,
			perLaunch(d.RoundTrips, c.step), perLaunch(placeRoundTrips(d), c.step),
			pool, fmtPoolBound(poolBound(c, pool)), d.Waiting.Seconds()/secs, d.MaxWaiting, pool, 100*d.Full.Seconds()/secs,
			a.Mean(a.LockWaits), a.Mean(a.IdleInTx), errorsOf(c.step)+registrationsOf(c)))
	}
	if len(short) == 0 {
		return []string{fmt.Sprintf("Every cell reached %.0f%% of min(concurrency / RTT, the RTT-0 figure).", 100*shortfallShare)}
	}
	return append([]string{fmt.Sprintf("Cells under %.0f%% of min(concurrency / RTT, the RTT-0 figure at that concurrency), with what the site DB saw during them:", 100*shortfallShare)}, short...)
}

// registrationsOf tells the VDAs that registered again during a cell:
// the broker had stopped hearing from them.
func registrationsOf(c latencyCell) string {
	if !c.site.ok || c.site.registrations == 0 {
		return ""
	}
	return fmt.Sprintf("; %.0f VDA registrations (%.0f of %d machines registered at the end)", c.site.registrations, c.site.registered, Machines)
}

func errorsOf(s loadgen.Step) string {
	if s.Errors == 0 {
		return ""
	}
	return fmt.Sprintf("; %d errors (%s)", s.Errors, loadgen.FormatKinds(s.ErrorsByKind))
}

// latencyHeadlines offers the zones-and-latency test's corners: 250 ms at
// 60 and 10 ms at 12 when the run has them, else its highest RTT at its
// highest concurrency and its lowest RTT above 0 at its lowest.
func latencyHeadlines(cells []latencyCell) []loadgen.Headline {
	var hi, lo *latencyCell
	for i := range cells {
		c := &cells[i]
		if c.rtt == 0 {
			continue
		}
		if hi == nil || c.rtt > hi.rtt || c.rtt == hi.rtt && c.step.Concurrency > hi.step.Concurrency {
			hi = c
		}
		if lo == nil || c.rtt < lo.rtt || c.rtt == lo.rtt && c.step.Concurrency < lo.step.Concurrency {
			lo = c
		}
	}
	var heads []loadgen.Headline
	if hi != nil {
		heads = append(heads, latencyHeadline(*hi, cells))
	}
	if lo != nil && lo != hi {
		heads = append(heads, latencyHeadline(*lo, cells))
	}
	return heads
}

func latencyHeadline(c latencyCell, cells []latencyCell) loadgen.Headline {
	s := c.step
	h := loadgen.Headline{
		What: fmt.Sprintf("REST launches with the site DB (PostgreSQL) %s RTT away, concurrency %d, new sessions on %d simulated VDAs", fmtRTT(c.rtt), s.Concurrency, Machines),
		Usher: fmt.Sprintf("%s launches/s, avg %s s, p99 %s s, %.2f%% errors, %s site DB round trips per launch", fmtF(s.TPS, 1),
			fmtF(s.Latency.Avg/1000, 2), fmtF(s.Latency.P99/1000, 2), s.ErrorPct, perLaunch(c.db.RoundTrips, s)),
		Client: "Go HTTP client in the bench process, on the same 2 cores as the site and PostgreSQL (not calibrated: launches are far below its ceiling); WAN: toxiproxy latency toxics",
	}
	ceiling := fmt.Sprintf("one round trip per launch: %s launches/s", fmtF(bound(c), 1))
	if z, ok := rtt0At(cells, s.Concurrency); ok {
		ceiling += fmt.Sprintf("; RTT 0 on this machine: %s launches/s", fmtF(z.TPS, 1))
	}
	h.Ceiling = ceiling
	p, ok := seed002At(int(c.rtt.Milliseconds()), s.Concurrency)
	switch {
	case !ok:
		h.Yardstick = "the zones-and-latency test has no cell at this RTT and concurrency"
	case p.Unavailable:
		h.Yardstick = fmt.Sprintf("Citrix 7.7 at %s, %d concurrent: no figure, %.1f%% errors (published)", fmtRTT(c.rtt), s.Concurrency, p.ErrorPct)
		h.Ratio = "Citrix failed the cell"
	default:
		h.Yardstick = fmt.Sprintf("Citrix 7.7 at %s, %d concurrent: %.1f launches/s, avg %.1f s, %.2f%% errors (published)", fmtRTT(c.rtt), s.Concurrency, p.PerSecond, p.AvgSeconds, p.ErrorPct)
		h.Ratio = fmt.Sprintf("%.0f× the published", s.TPS/p.PerSecond)
	}
	return h
}

// latencyFigure plots launches per second by concurrency, a line per
// RTT, usher's and the zones-and-latency test's.
func latencyFigure(cells []latencyCell) (loadgen.Figure, error) {
	var series []loadgen.Series
	idx := map[time.Duration]int{}
	for _, c := range cells {
		i, ok := idx[c.rtt]
		if !ok {
			i = len(series)
			idx[c.rtt] = i
			series = append(series, loadgen.Series{Name: "usher, RTT " + fmtRTT(c.rtt)})
		}
		series[i].X = append(series[i].X, float64(c.step.Concurrency))
		series[i].Y = append(series[i].Y, math.Max(c.step.TPS, 0))
	}
	for _, rtt := range slices.Sorted(maps.Keys(idx)) {
		if rtt == 0 {
			continue
		}
		s := loadgen.Series{Name: "Citrix, RTT " + fmtRTT(rtt)}
		for _, r := range Seed002 {
			if r.RTTms == int(rtt.Milliseconds()) && !r.Unavailable {
				s.X, s.Y = append(s.X, float64(r.Concurrent)), append(s.Y, r.PerSecond)
			}
		}
		if len(s.X) > 0 {
			series = append(series, s)
		}
	}
	return loadgen.LogLinePlot("launches-per-second-by-rtt", "Launches per second over a WAN to the site DB, usher beside the zones-and-latency test (higher is better)",
		"concurrent launches", "launches per second", series...)
}
