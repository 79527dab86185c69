package bench

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/auth/ldapauth"
	"github.com/usher-vdi/usher/internal/benchkit"
	"github.com/usher-vdi/usher/internal/dirserver"
	"github.com/usher-vdi/usher/internal/loadgen"
	"github.com/usher-vdi/usher/internal/metricname"
	"github.com/usher-vdi/usher/internal/site"
)

// DirectoryStormConfig sizes the logon storm of directory users.
type DirectoryStormConfig struct {
	// Users is the number of directory users, and of local users: each
	// logs on once in every phase.
	Users int
	// Workers is the logons in flight (a closed model: each worker sends
	// the next logon when its last one is answered).
	Workers int
	// WarmRounds is how many times each user logs on in the warm phases,
	// which are otherwise over in tens of milliseconds: too short to
	// measure.
	WarmRounds int
}

// DefaultDirectoryStormConfig finishes in well under a minute on two
// cores.
var DefaultDirectoryStormConfig = DirectoryStormConfig{Users: 500, Workers: 16, WarmRounds: 20}

// The phases of the directory storm, in the order they run.
const (
	PhaseLocal     = "local"
	PhaseLocalWarm = "local, warm"
	PhaseDirCold   = "directory, cold"
	PhaseDirWarm   = "directory, warm"
)

// directoryOps are the directory's operations (ldapauth.Op), in the order
// a logon makes them.
var directoryOps = []ldapauth.Op{ldapauth.OpDial, ldapauth.OpRootDSE, ldapauth.OpServiceBind,
	ldapauth.OpUserSearch, ldapauth.OpUserBind, ldapauth.OpGroupSearch}

// DirectoryPhase is what one phase of the directory storm measured.
type DirectoryPhase struct {
	Name   string
	Result *loadgen.Result
	// Ops counts the directory's operations during the phase by kind
	// (ldapauth.Op), whatever their result; Failed those not ok;
	// Seconds the time they took, by kind. Scraped is false when the
	// site's /metrics could not be read: the counts are then unknown.
	Ops, Seconds map[ldapauth.Op]float64
	Failed       float64
	Scraped      bool
	// Slapd is slapd's CPU time during the phase (-1: unknown); Self is
	// this process's, the site's and the load generator's together.
	Slapd, Self time.Duration
}

// Step is the phase's one step.
func (p DirectoryPhase) Step() loadgen.Step {
	if p.Result == nil || len(p.Result.Steps) == 0 {
		return loadgen.Step{}
	}
	return p.Result.Steps[0]
}

// PerLogon returns n divided by the phase's logons.
func (p DirectoryPhase) PerLogon(n float64) float64 {
	if r := p.Step().Requests; r > 0 {
		return n / float64(r)
	}
	return 0
}

// TotalOps is every directory operation of the phase.
func (p DirectoryPhase) TotalOps() float64 {
	var n float64
	for _, v := range p.Ops {
		n += v
	}
	return n
}

// DirectoryLogonStorm measures logons (POST /api/v1/login alone) of
// directory users beside local ones. It starts OpenLDAP's slapd
// (internal/dirserver) with cfg.Users users in nested groups, and the
// bench site with as many local users and the directory's settings
// (ldaps, its CA, the service account), its group all-staff entitled to
// the bench's applications. Then, with cfg.Workers logons in flight,
// every user logs on once in each phase: local users (an argon2id check
// each), local users again (verified cache), directory users cold (user
// search, bind, group searches), and directory users again, warm (the
// verified cache: no directory operation). The directory's operations
// come from the site's /metrics (usher_directory_operations_total),
// slapd's CPU time from /proc.
//
// It returns an error wrapping dirserver.ErrNotInstalled when slapd is
// not installed.
func DirectoryLogonStorm(ctx context.Context, env Env, cfg DirectoryStormConfig) (*loadgen.Report, error) {
	rep, _, err := directoryStorm(ctx, env, cfg)
	return rep, err
}

// directoryStorm is DirectoryLogonStorm, with the phases it measured.
func directoryStorm(ctx context.Context, env Env, cfg DirectoryStormConfig) (*loadgen.Report, []DirectoryPhase, error) {
	if cfg.Users < 1 || cfg.Workers < 1 {
		return nil, nil, fmt.Errorf("the directory logon storm needs users and workers")
	}
	log := env.logger()
	begin := time.Now()
	// The directory's users cfg.Users+1 ... 2*cfg.Users log on: a
	// directory user never shares a site user's name (the broker refuses
	// one that does), and the site's local users are 1 ... cfg.Users.
	dir, err := dirserver.Launch(dirserver.Options{Users: 2 * cfg.Users})
	if err != nil {
		return nil, nil, fmt.Errorf("start slapd: %w", err)
	}
	defer dir.Close()
	slapd := dir.Servers[0]
	log.Info("slapd up", "url", slapd.LDAPS, "users", cfg.Users, "pid", slapd.PID(), "took", time.Since(begin).Round(time.Millisecond))

	password := auth.RandomSecret(12)
	hash, err := auth.HashPassword(password, auth.DefaultParams)
	if err != nil {
		return nil, nil, err
	}
	sc := DirectorySiteConfig(cfg.Users, hash, dir)
	begin = time.Now()
	s, err := env.Start(ctx, sc)
	if err != nil {
		return nil, nil, fmt.Errorf("start the bench site: %w", err)
	}
	defer s.Close()
	log.Info("bench site up", "url", s.URL(), "users", len(sc.Users), "took", time.Since(begin).Round(time.Millisecond))

	client := loadgen.NewClient(2 * cfg.Workers)
	local := Users(cfg.Users, password)
	remote := make(loadgen.Users, cfg.Users)
	for i := range remote {
		remote[i] = loadgen.Credential{User: dirserver.UserName(cfg.Users + i + 1), Password: dir.UserPassword, Domain: dirserver.Domain}
	}
	run := func(name string, users loadgen.Users, rounds int) (DirectoryPhase, error) {
		p := DirectoryPhase{Name: name, Slapd: -1}
		before := scrapeDirectory(ctx, client, s.URL())
		slapdMeter := benchkit.TreeCPU(slapd.PID())
		slapd0, serr := slapdMeter()
		self0, _ := benchkit.SelfCPU()
		rest := &loadgen.REST{Client: client, BaseURL: s.URL(), Users: users, Flow: []string{loadgen.StepLogin}, ClientName: "usher-bench"}
		exec := loadgen.FixedWork{Concurrency: []int{cfg.Workers}, Requests: rounds * len(users)}
		fmt.Fprintf(env.out(), "Logons, %s: %s\n", name, exec)
		res, err := exec.Run(ctx, rest, env.options())
		p.Result = res
		if self1, err := benchkit.SelfCPU(); err == nil {
			p.Self = self1.Sub(self0).CPU()
		}
		// The broker reads entries again in the background, after the
		// logon's answer: wait for the counts to settle, so that the
		// phase's reads are counted in it, with slapd's CPU for them.
		after := scrapeDirectory(ctx, client, s.URL())
		for range 20 {
			if !after.ok || !sleepCtx(ctx, 100*time.Millisecond) {
				break
			}
			next := scrapeDirectory(ctx, client, s.URL())
			if next.ok && next.total() == after.total() {
				break
			}
			after = next
		}
		if slapd1, err := slapdMeter(); err == nil && serr == nil {
			p.Slapd = slapd1.Sub(slapd0).CPU()
		}
		if before.ok && after.ok {
			p.Ops, p.Seconds, p.Failed = after.sub(before)
			p.Scraped = true
		}
		return p, err
	}

	rep := loadgen.NewReport("usher bench logon-storm --directory (logons of directory users)", "")
	var phases []DirectoryPhase
	warm := max(cfg.WarmRounds, 1)
	for _, ph := range []struct {
		name   string
		users  loadgen.Users
		rounds int
	}{{PhaseLocal, local, 1}, {PhaseLocalWarm, local, warm}, {PhaseDirCold, remote, 1}, {PhaseDirWarm, remote, warm}} {
		p, err := run(ph.name, ph.users, ph.rounds)
		if p.Result != nil {
			phases = append(phases, p)
			rep.Runs = append(rep.Runs, loadgen.Run{Name: ph.name, Result: p.Result})
		}
		if err != nil || p.Result == nil {
			directoryReport(rep, phases, cfg)
			return rep, phases, err
		}
	}
	directoryReport(rep, phases, cfg)
	return rep, phases, nil
}

// DirectorySiteConfig returns the bench site (SiteConfig, with only its
// first users local users, sharing passwordHash, so that the directory's
// users past them are not named as site users) with dir's first server
// as its directory over ldaps, and a site group standing for the
// directory's all-staff (every numbered user, three levels of nesting
// down) entitled to the bench's delivery group.
func DirectorySiteConfig(users int, passwordHash string, dir *dirserver.Directory) *site.Config {
	c := SiteConfig(users, 0, passwordHash)
	c.Users = c.Users[:users]
	c.Directory = site.Directory{Enabled: true, Servers: []string{dir.Servers[0].LDAPS}, CABundle: string(dir.CAPEM),
		BindDN: dir.BindDN, BindPassword: dir.BindPassword, UserBaseDNs: []string{dirserver.PeopleDN},
		GroupBaseDNs: []string{dirserver.GroupsDN}, UserAttribute: site.AttrUID,
		NetBIOSDomain: dirserver.Domain, UPNSuffix: dirserver.UPNSuffix}
	c.Groups = append(c.Groups, site.Group{Name: dirserver.AllStaff, Description: "The directory's all-staff: every directory user of the bench."})
	c.Entitlements = append(c.Entitlements, site.Entitlement{Name: "all-staff", DeliveryGroup: DeliveryGroup, Groups: []string{dirserver.AllStaff}})
	c.Normalize()
	return c
}

// directoryCounters are what a site's /metrics say about its directory.
type directoryCounters struct {
	ops, seconds map[ldapauth.Op]float64
	failed       float64
	ok           bool
}

// total is every operation counted.
func (c directoryCounters) total() float64 {
	var n float64
	for _, v := range c.ops {
		n += v
	}
	return n
}

// sleepCtx sleeps for d, or until ctx ends; it reports whether it slept.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// sub returns the counts between an earlier reading o and c.
func (c directoryCounters) sub(o directoryCounters) (ops, seconds map[ldapauth.Op]float64, failed float64) {
	ops, seconds = map[ldapauth.Op]float64{}, map[ldapauth.Op]float64{}
	for k, v := range c.ops {
		ops[k] = v - o.ops[k]
	}
	for k, v := range c.seconds {
		seconds[k] = v - o.seconds[k]
	}
	return ops, seconds, c.failed - o.failed
}

// scrapeDirectory reads the directory's operation counters from the
// site's /metrics, summed over servers; a site that does not serve them
// gives counters that are not ok.
func scrapeDirectory(ctx context.Context, client *http.Client, base string) directoryCounters {
	c := directoryCounters{ops: map[ldapauth.Op]float64{}, seconds: map[ldapauth.Op]float64{}}
	err := benchkit.Scrape(ctx, client, base+"/metrics", func(s benchkit.Sample) {
		op := ldapauth.Op(s.Labels[metricname.Op])
		switch s.Name {
		case metricname.DirectoryOperations:
			c.ops[op] += s.Value
			if s.Labels[metricname.Result] != string(ldapauth.ResultOK) {
				c.failed += s.Value
			}
		case metricname.DirectoryOperationDuration + "_sum":
			c.seconds[op] += s.Value
		}
	})
	if err != nil {
		return directoryCounters{}
	}
	c.ok = true
	return c
}

// directoryReport fills rep with the phases' tables, headlines and notes.
func directoryReport(rep *loadgen.Report, phases []DirectoryPhase, cfg DirectoryStormConfig) {
	byName := map[string]DirectoryPhase{}
	for _, p := range phases {
		byName[p.Name] = p
	}
	// Directory users beside local users in the same state: cold
	// (argon2id) or warm (verified cache).
	yardstick := map[string]string{PhaseDirCold: PhaseLocal, PhaseDirWarm: PhaseLocalWarm}
	logons := loadgen.Table{
		Title: fmt.Sprintf("Logons (POST /api/v1/login): %d users, each once in a cold phase and %d times in a warm one, %d at once", cfg.Users, max(cfg.WarmRounds, 1), cfg.Workers),
		Header: []string{"phase", "logons", "logons/s", "× local, cold/warm alike", "avg", "p50", "p99", "errors", "directory ops/logon", "user binds/logon",
			"slapd CPU/logon", "usher+client CPU/logon"},
	}
	ops := loadgen.Table{
		Title:  "Directory operations per logon, by kind (average time of each)",
		Header: []string{"phase"},
	}
	for _, op := range directoryOps {
		ops.Header = append(ops.Header, string(op))
	}
	ops.Header = append(ops.Header, "all", "failed")
	csv := loadgen.Table{Header: []string{"phase", "logons", "ok", "errors", "logons_per_s", "avg_ms", "p50_ms", "p99_ms"}}
	for _, op := range directoryOps {
		csv.Header = append(csv.Header, string(op))
	}
	csv.Header = append(csv.Header, "failed_ops", "slapd_cpu_ms", "self_cpu_ms")

	for _, p := range phases {
		s := p.Step()
		ratio := "-"
		if y, ok := byName[yardstick[p.Name]]; ok && y.Step().TPS > 0 {
			ratio = fmtF(s.TPS/y.Step().TPS, 2)
		}
		perOps, binds := "-", "-"
		if p.Scraped {
			perOps, binds = fmtF(p.PerLogon(p.TotalOps()), 2), fmtF(p.PerLogon(p.Ops[ldapauth.OpUserBind]), 2)
		}
		slapdCPU := "-"
		if p.Slapd >= 0 {
			slapdCPU = fmtMicros(p.PerLogon(float64(p.Slapd)))
		}
		logons.Rows = append(logons.Rows, []string{p.Name, strconv.FormatInt(s.Requests, 10), fmtF(s.TPS, 1), ratio,
			loadgen.FormatMillis(s.Latency.Avg), loadgen.FormatMillis(s.Latency.P50), loadgen.FormatMillis(s.Latency.P99),
			fmt.Sprintf("%d (%s%%)", s.Errors, fmtF(s.ErrorPct, 2)), perOps, binds, slapdCPU, fmtMicros(p.PerLogon(float64(p.Self)))})

		row := []string{p.Name, strconv.FormatInt(s.Requests, 10), strconv.FormatInt(s.OK, 10), strconv.FormatInt(s.Errors, 10),
			fmtF(s.TPS, 2), fmtF(s.Latency.Avg, 2), fmtF(s.Latency.P50, 2), fmtF(s.Latency.P99, 2)}
		for _, op := range directoryOps {
			row = append(row, countOrDash(p.Scraped, p.Ops[op]))
		}
		slapdMs := "-"
		if p.Slapd >= 0 {
			slapdMs = fmtF(float64(p.Slapd)/float64(time.Millisecond), 0)
		}
		csv.Rows = append(csv.Rows, append(row, countOrDash(p.Scraped, p.Failed), slapdMs, fmtF(float64(p.Self)/float64(time.Millisecond), 0)))

		if p.Name != PhaseDirCold && p.Name != PhaseDirWarm {
			continue
		}
		row = []string{p.Name}
		for _, op := range directoryOps {
			cell := "-"
			if p.Scraped {
				cell = fmtF(p.PerLogon(p.Ops[op]), 2)
				if n := p.Ops[op]; n > 0 {
					cell += fmt.Sprintf(" (%s ms)", fmtF(p.Seconds[op]/n*1000, 2))
				}
			}
			row = append(row, cell)
		}
		all, failed := "-", "-"
		if p.Scraped {
			all, failed = fmtF(p.PerLogon(p.TotalOps()), 2), fmtF(p.Failed, 0)
		}
		ops.Rows = append(ops.Rows, append(row, all, failed))
	}
	rep.Tables = []loadgen.Table{logons, ops}
	rep.CSV = &csv

	client := fmt.Sprintf("Go HTTP client in the bench process, closed model, %d workers; slapd on the same machine", cfg.Workers)
	for _, name := range []string{PhaseDirCold, PhaseDirWarm} {
		p, ok := byName[name]
		if !ok {
			continue
		}
		s := p.Step()
		h := loadgen.Headline{
			What: fmt.Sprintf("REST logons of directory users (OpenLDAP over ldaps, nested groups), %s: %d logons of %d users, %d at once",
				strings.TrimPrefix(name, "directory, "), s.Requests, cfg.Users, cfg.Workers),
			Usher: fmt.Sprintf("%s logons/s, p50 %s, p99 %s, %d errors", fmtF(s.TPS, 1), loadgen.FormatMillis(s.Latency.P50),
				loadgen.FormatMillis(s.Latency.P99), s.Errors),
			Client: client,
		}
		if p.Scraped {
			h.Usher += fmt.Sprintf(", %s directory operations per logon (%s binds as the user)", fmtF(p.PerLogon(p.TotalOps()), 2),
				fmtF(p.PerLogon(p.Ops[ldapauth.OpUserBind]), 2))
		}
		if p.Slapd >= 0 {
			h.Usher += fmt.Sprintf(", slapd %s CPU per logon", fmtMicros(p.PerLogon(float64(p.Slapd))))
		}
		if y, ok := byName[yardstick[name]]; ok {
			ys := y.Step()
			h.Yardstick = fmt.Sprintf("the site's own users, %s, same run: %s logons/s, p99 %s", localHow(y.Name), fmtF(ys.TPS, 1),
				loadgen.FormatMillis(ys.Latency.P99))
			if ys.TPS > 0 {
				h.Ratio = fmt.Sprintf("%s× the local users' rate", fmtF(s.TPS/ys.TPS, 2))
			}
		}
		rep.Headlines = append(rep.Headlines, h)
	}

	rep.Notes = append(rep.Notes,
		machineNote(rep),
		"Each logon is POST /api/v1/login alone (no enumeration, no launch), every user once in a cold phase and "+fmt.Sprintf("%d times in a warm one (in turn), %d in flight: each worker sends the next logon when its last is answered.", max(cfg.WarmRounds, 1), cfg.Workers),
		"Local users (DEMO\\userNNNN) are the site's own: the first logon is an argon2id check (19 MiB, 2 passes) against the site DB's hash, the next one a hit of the verified-credential cache.",
		fmt.Sprintf("Directory users (%s\\userNNNN, numbered past the local ones: a directory user never shares a site user's name) are OpenLDAP slapd's (internal/dirserver: mdb, %d users in teams of %d, %d teams to a department, every department in %s), "+
			"reached over ldaps with a connection pool of %d (ldapauth's default) and nested groups read level by level. "+
			"Cold: the user's first logon: a search for the entry, a bind as the user, the group searches. "+
			"Warm: the same users again: the password is known (verified cache, bound to the entry and its password-change time) and the groups are the broker's last read of the entry, so no bind and no directory operation waited for.",
			dirserver.Domain, 2*cfg.Users, dirserver.TeamSize, dirserver.DeptTeams, dirserver.AllStaff, ldapauth.DefaultPoolSize),
		"Directory operations are the deltas of usher_directory_operations_total (by op, every result) on the site's /metrics; their times the deltas of usher_directory_operation_duration_seconds. "+
			"slapd's CPU is its process's user+system time from /proc (10 ms ticks); usher+client CPU is this process's (getrusage): the site and the load generator together.",
	)
	if n, ok := warmNote(byName[PhaseDirWarm]); ok {
		rep.Notes = append(rep.Notes, n)
	}
}

// warmNote explains the directory operations of the warm phase, if it
// made any: the broker's reads of entries again in the background.
func warmNote(p DirectoryPhase) (string, bool) {
	if !p.Scraped || p.TotalOps() == 0 {
		return "", false
	}
	var kinds []string
	for _, op := range directoryOps {
		if n := p.Ops[op]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %s", op, fmtF(p.PerLogon(n), 2)))
		}
	}
	return fmt.Sprintf("The warm logons still made %s directory operations per logon (%s), none of them waited for: "+
		"the broker reads a user's entry again in the background (a user search, and service binds for the connections) once its last read is older than the directory's group_cache_ttl_seconds, "+
		"which the bench leaves unset, as a site does by default; the broker takes unset as 0 s (a read at every request), "+
		"where ldapauth's own group cache takes its default, %s.", fmtF(p.PerLogon(p.TotalOps()), 2), strings.Join(kinds, ", "), ldapauth.DefaultGroupCacheTTL), true
}

// localHow says what a local phase's logon costs.
func localHow(phase string) string {
	if phase == PhaseLocalWarm {
		return "again (verified cache)"
	}
	return "first logon (argon2id)"
}

// fmtMicros formats a duration given in nanoseconds as microseconds or
// milliseconds.
func fmtMicros(ns float64) string {
	if ns >= float64(10*time.Millisecond) {
		return fmtF(ns/float64(time.Millisecond), 1) + " ms"
	}
	return fmtF(ns/float64(time.Microsecond), 0) + " µs"
}

func countOrDash(ok bool, n float64) string {
	if !ok {
		return "-"
	}
	return fmtF(n, 0)
}
