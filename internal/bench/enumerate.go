package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/benchkit"
	"github.com/usher-vdi/usher/internal/loadgen"
	"github.com/usher-vdi/usher/internal/tlsconf"
)

// startNginxUnless starts nginx serving answer for the in-process
// steps, unless skip.
func startNginxUnless(ctx context.Context, skip bool, binary string, answer []byte) (*Nginx, error) {
	if skip {
		return nil, nil
	}
	return StartNginx(ctx, binary, NFusePath, answer, "text/xml")
}

// ColdStartRequests is how many concurrent first requests of one user
// the cold-start figure sends.
const ColdStartRequests = 100

// NFusePath is where NFuse clients post: Citrix's XML Service path.
const NFusePath = "/scripts/wpnbr.dll"

// EnumerateConfig sizes the enumeration bench.
type EnumerateConfig struct {
	// Concurrency lists the levels (the LHC test: 10, 20, 40, 60, 100), each
	// held for StepDuration and measured after Warmup.
	Concurrency  []int
	StepDuration time.Duration
	Warmup       time.Duration
	// URL is the NFuse endpoint; empty: the bench site's NFusePath.
	URL string
	// CA is a PEM bundle that verifies an https URL's certificate
	// (empty: the system roots).
	CA string
	// Nginx is the nginx binary; empty: no nginx column.
	Nginx string
	// Users take turns (the IMA/FMA test's WCAT sent one user's credentials).
	// Each first enumerates once before the steps: a credential's first
	// check costs an argon2id verification, later ones hit the verified-
	// credential cache. That pass is reported on its own, as cold.
	Users int
	// Rounds repeats the steps, usher's then nginx's, so that both meet
	// the same moments of a shared, noisy machine; each level reports
	// the round with the median throughput. 0 means 1.
	Rounds int
	// Wrk is the wrk binary that, after the in-process steps, drives
	// usher, nginx and nginx's null answer from another process at each
	// level; empty: not run. A missing wrk or nginx skips it with a note.
	Wrk string
	// SendBuffer is the bench site's socket send buffer in bytes, given
	// to the nginx that wrk drives too; 0: the kernel's.
	SendBuffer int64
}

// DefaultEnumerateConfig takes about two minutes: five levels of 10 s on
// usher and on nginx.
var DefaultEnumerateConfig = EnumerateConfig{Concurrency: []int{10, 20, 40, 60, 100}, StepDuration: 10 * time.Second,
	Warmup: 2 * time.Second, Nginx: DefaultNginx, Users: 1000}

// Enumerate runs the LHC and IMA/FMA enumeration tests: WCAT's closed model holding a number
// of concurrent NFuse enumerations (the IMA/FMA test's RequestAppData, ctx1
// credentials of the site's users) of 400 applications, then the same
// against nginx serving usher's answer as a static file.
func Enumerate(ctx context.Context, env Env, cfg EnumerateConfig) (*loadgen.Report, error) {
	if len(cfg.Concurrency) == 0 || cfg.StepDuration <= cfg.Warmup {
		return nil, fmt.Errorf("enumerate bench needs concurrencies and steps longer than their warm-up")
	}
	log := env.logger()
	nusers := max(cfg.Users, 1)
	s, password, err := env.startSite(ctx, nusers, 0)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	url := cfg.URL
	if url == "" {
		url = s.URL() + NFusePath
	}
	users := Users(nusers, password)
	maxConc := cfg.Concurrency[len(cfg.Concurrency)-1]
	tlsCfg, err := tlsconf.ClientConfig("--ca", cfg.CA)
	if err != nil {
		return nil, err
	}
	client := loadgen.NewClientTLS(maxConc, tlsCfg)
	usher := &loadgen.NFuse{Client: client, URL: url, Body: loadgen.AppDataRequest, Users: users, Encoding: loadgen.Ctx1}
	answer, apps, err := probeNFuse(ctx, client, url, users[0])
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(env.out(), "NFuse at %s answers %d applications in %d bytes.\n", url, apps, len(answer))

	// Cold start: concurrent first requests of one user (the last, whom
	// the cold pass below reaches last) share one password check.
	var counted Site = s
	if cfg.URL != "" {
		counted = nil // another site's checks are not ours to count
	}
	cs, err := coldStart(ctx, env, counted, url, cfg.CA, users[len(users)-1], ColdStartRequests, coldYardstick{
		nginx:  cfg.Nginx,
		tuning: cfg.nginxTuning(benchkit.PlanCPUs()),
		answer: answer,
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(env.out(), "cold start: %d concurrent first requests of one user: %d check(s) of %s ms, p99 %s ms (one check alone: %s ms)\n",
		cs.Requests, cs.Checks, cs.runCheck(), fmtMs(cs.P99), fmtMs(cs.Check))

	// Cold: every user's first enumeration, which verifies the password.
	coldExec := loadgen.FixedWork{Concurrency: []int{2 * runtime.NumCPU()}, Requests: nusers}
	fmt.Fprintf(env.out(), "usher, cold: %s\n", coldExec)
	cold, err := coldExec.Run(ctx, usher, env.options())
	if err != nil {
		return nil, fmt.Errorf("cold enumerations: %w", err)
	}

	var skipNote string
	var target *loadgen.NFuse // nginx, when it runs
	// With wrk, nginx is measured by a client in another process; the
	// in-process client would cap nginx as well as usher, so nginx is not
	// run in process then.
	_, werr := os.Stat(cfg.Wrk)
	_, nerr := os.Stat(cfg.Nginx)
	wrkRuns := cfg.Wrk != "" && werr == nil && cfg.Nginx != "" && nerr == nil
	switch n, nerr := startNginxUnless(ctx, wrkRuns, cfg.Nginx, answer); {
	case wrkRuns:
		skipNote = "nginx: measured with wrk (another process) only; an in-process client would cap it."
	case cfg.Nginx == "":
		skipNote = "nginx: skipped (no binary given)."
	case errors.Is(nerr, ErrNoNginx):
		fmt.Fprintf(env.out(), "nginx: %v; skipping the nginx column (Debian: apt-get install nginx-light)\n", nerr)
		skipNote = fmt.Sprintf("nginx: skipped, %v.", nerr)
	case nerr != nil:
		return nil, fmt.Errorf("nginx: %w", nerr)
	default:
		defer n.Stop()
		log.Info("nginx serving usher's answer", "url", n.URL)
		target = &loadgen.NFuse{Client: loadgen.NewClient(maxConc), URL: n.URL, Body: loadgen.AppDataRequest, Users: users, Encoding: loadgen.Ctx1}
	}

	exec := loadgen.Stepped{Levels: cfg.Concurrency, StepDuration: cfg.StepDuration, Warmup: cfg.Warmup}
	rounds := max(cfg.Rounds, 1)
	var ushers, nginxes []*loadgen.Result
	var runErr error
	for r := 1; r <= rounds && runErr == nil; r++ {
		fmt.Fprintf(env.out(), "usher%s: %s\n", roundOf(r, rounds), exec)
		res, err := exec.Run(ctx, usher, env.options())
		if res != nil {
			ushers = append(ushers, res)
		}
		if runErr = err; err != nil || target == nil {
			continue
		}
		fmt.Fprintf(env.out(), "nginx%s: %s\n", roundOf(r, rounds), exec)
		res, err = exec.Run(ctx, target, env.options())
		if res != nil {
			nginxes = append(nginxes, res)
		}
		runErr = err
	}
	if len(ushers) == 0 {
		return nil, runErr
	}
	rep := loadgen.NewReport("usher bench enumerate (the LHC and IMA/FMA enumeration tests)", "")
	rep.Runs = []loadgen.Run{{Name: "usher", Result: loadgen.MedianSteps(ushers...)}, {Name: "usher cold", Result: cold}}
	if skipNote != "" {
		rep.Notes = append(rep.Notes, skipNote)
	}
	ngxMedian := loadgen.MedianSteps(nginxes...)
	if ngxMedian != nil {
		rep.Runs = append(rep.Runs, loadgen.Run{Name: "nginx", Result: ngxMedian})
	}
	if rounds > 1 {
		rep.Tables = append(rep.Tables, RoundsTable(ushers, nginxes))
	}
	rep = finishEnumerate(rep, ngxMedian, apps, len(answer), cfg)
	rep.Tables = append(rep.Tables, cs.table())
	rep.Headlines = append(rep.Headlines, cs.headline())
	if cfg.Wrk != "" && runErr == nil && strings.HasPrefix(url, "https://") {
		rep.Notes = append(rep.Notes, "wrk not run: it does not verify an https server's certificate")
	} else if cfg.Wrk != "" && runErr == nil {
		base := s.URL()
		if cfg.URL != "" {
			base = "" // another site: its REST API is not known to be there
		}
		apis, err := wrkAPIs(ctx, base, url, answer, users[0])
		if err != nil {
			return rep, err
		}
		ts, notes, heads, err := enumerateWrk(ctx, env, cfg, apis)
		rep.Tables = append(append([]loadgen.Table{rep.Tables[0]}, ts...), rep.Tables[1:]...)
		rep.Notes = append(rep.Notes, notes...)
		rep.Headlines = append(heads, rep.Headlines...)
		runErr = err
	}
	return rep, runErr
}

// nginxTuning is the tuning of the nginx that wrk and the cold start's
// client meet: usher's CPUs, worker count and send buffer.
func (cfg EnumerateConfig) nginxTuning(plan benchkit.Plan) NginxTuning {
	return NginxTuning{Workers: plan.Workers(), CPUs: plan.Server, NoPush: true, SendBuffer: cfg.SendBuffer}
}

// NullPath is where the wrk part's nginx serves padding of the answer's
// size: the client's ceiling.
const NullPath = "/null"

// wrkAPI is one API the wrk part drives: usher's endpoint, and nginx
// answering the same request with usher's answer as a static file.
type wrkAPI struct {
	name   string // "NFuse", "REST"
	url    string // usher's endpoint
	path   string // where nginx serves the answer
	req    WrkRequest
	answer []byte
	ctype  string
}

// wrkLevel is what wrk measured at one level of one API.
type wrkLevel struct {
	conns              int
	usher, nginx, null WrkResult
	usherCPU, nginxCPU benchkit.Usage
	// usherRounds and nginxRounds are every round's rate, when there
	// were several; the figures above are the median round's.
	usherRounds, nginxRounds []float64
}

func (l wrkLevel) steps() (u, n benchkit.Step) {
	u = benchkit.Step{Rate: l.usher.RPS, Ceiling: l.null.RPS, Client: l.usher.Client, Server: l.usherCPU}
	n = benchkit.Step{Rate: l.nginx.RPS, Ceiling: l.null.RPS, Client: l.nginx.Client, Server: l.nginxCPU}
	return u, n
}

// enumerateWrk drives usher, nginx and nginx's null answer with wrk at
// each level, for each API, pinned as benchkit plans, and tabulates them.
// It returns no table, and a note, when wrk or nginx is missing.
func enumerateWrk(ctx context.Context, env Env, cfg EnumerateConfig, apis []wrkAPI) ([]loadgen.Table, []string, []loadgen.Headline, error) {
	if _, err := os.Stat(cfg.Wrk); err != nil {
		fmt.Fprintf(env.out(), "wrk: %v; skipping the wrk tables (Debian: apt-get install wrk)\n", ErrNoWrk)
		return nil, []string{fmt.Sprintf("wrk: skipped, %v (%s).", ErrNoWrk, cfg.Wrk)}, nil, nil
	}
	if _, err := os.Stat(cfg.Nginx); cfg.Nginx == "" || err != nil {
		fmt.Fprintf(env.out(), "wrk: no nginx (%q); skipping the wrk tables\n", cfg.Nginx)
		return nil, []string{"wrk: skipped, no nginx to calibrate the client against."}, nil, nil
	}
	plan := benchkit.PlanCPUs()
	wrk := Wrk{Binary: cfg.Wrk, Plan: plan}
	tuning := cfg.nginxTuning(plan)
	tuning.NullPath = NullPath
	restore, err := plan.PinServer()
	if err != nil {
		return nil, nil, nil, err
	}
	defer restore()
	var tables []loadgen.Table
	var heads []loadgen.Headline
	for _, api := range apis {
		levels, err := wrkRun(ctx, env, cfg, wrk, tuning, api)
		if err != nil {
			return nil, nil, nil, err
		}
		tables = append(tables, WrkTable(api.name, levels))
		heads = append(heads, wrkHeadlines(api, levels, len(Applications()), wrk.Note())...)
	}
	notes := []string{fmt.Sprintf("wrk (%s, -c as the level, %s a level with no warm-up): NFuse posts one user's RequestAppData with ctx1 credentials, "+
		"REST gets /api/v1/resources with one user's bearer token. CPUs: %s; usher runs with GOMAXPROCS %d, nginx with %d worker(s) on the same CPUs, "+
		"sendfile on, tcp_nopush off, open_file_cache on (as usher keeps its answers open), sndbuf %d. The client's ceiling is wrk's GET of %s from that nginx, padding of the answer's size as a static file. "+
		"A figure at %.0f%% of that ceiling or more is client-bound and gets no ratio. CPU per request: the server's CPU time over the run "+
		"(usher: this whole process, its simulated VDAs included; nginx: master and workers) over its requests.",
		wrk.Note(), cfg.StepDuration, plan, plan.Workers(), plan.Workers(), cfg.SendBuffer, NullPath, 100*benchkit.ClientBound)}
	return tables, notes, heads, nil
}

// wrkRun measures one API at every level, cfg.Rounds times, the levels
// and the servers taking turns in each round so that a noisy moment of a
// shared machine hits one round, not one server; each level keeps each
// server's median round by rate.
func wrkRun(ctx context.Context, env Env, cfg EnumerateConfig, wrk Wrk, tuning NginxTuning, api wrkAPI) ([]wrkLevel, error) {
	n, err := StartTunedNginx(ctx, cfg.Nginx, tuning, api.path, api.answer, api.ctype)
	if err != nil {
		return nil, fmt.Errorf("nginx for wrk: %w", err)
	}
	defer n.Stop()
	null := strings.TrimSuffix(n.URL, api.path) + NullPath
	nginxCPU := benchkit.TreeCPU(n.Pid())
	targets := []struct {
		name, url string
		req       WrkRequest
		cpu       benchkit.Meter
	}{
		{"usher", api.url, api.req, benchkit.SelfCPU},
		{"nginx", n.URL, api.req, nginxCPU},
		{"nginx " + NullPath, null, WrkRequest{}, nil},
	}
	rounds := max(cfg.Rounds, 1)
	// samples[level][target] holds each round's run.
	samples := make([][3][]wrkSample, len(cfg.Concurrency))
	for r := 1; r <= rounds; r++ {
		for i, c := range cfg.Concurrency {
			for j, t := range targets {
				fmt.Fprintf(env.out(), "wrk -t1 -c%d -d%s%s, %s: %s\n", c, cfg.StepDuration, roundOf(r, rounds), api.name, t.name)
				var before benchkit.Usage
				if t.cpu != nil {
					if before, err = t.cpu(); err != nil {
						return nil, err
					}
				}
				res, err := wrk.Run(ctx, t.url, t.req, c, cfg.StepDuration)
				if err != nil {
					return nil, err
				}
				smp := wrkSample{res: res}
				if t.cpu != nil {
					after, err := t.cpu()
					if err != nil {
						return nil, err
					}
					smp.cpu = after.Sub(before)
				}
				samples[i][j] = append(samples[i][j], smp)
			}
		}
	}
	levels := make([]wrkLevel, len(cfg.Concurrency))
	for i, c := range cfg.Concurrency {
		u, ng, nl := medianSample(samples[i][0]), medianSample(samples[i][1]), medianSample(samples[i][2])
		levels[i] = wrkLevel{conns: c, usher: u.res, usherCPU: u.cpu, nginx: ng.res, nginxCPU: ng.cpu, null: nl.res}
		if rounds > 1 {
			for _, smp := range samples[i][0] {
				levels[i].usherRounds = append(levels[i].usherRounds, smp.res.RPS)
			}
			for _, smp := range samples[i][1] {
				levels[i].nginxRounds = append(levels[i].nginxRounds, smp.res.RPS)
			}
		}
	}
	return levels, nil
}

// wrkSample is one wrk run and the server's CPU over it.
type wrkSample struct {
	res WrkResult
	cpu benchkit.Usage
}

// medianSample returns the run of median rate (the lower middle of an
// even count).
func medianSample(s []wrkSample) wrkSample {
	s = slices.Clone(s)
	slices.SortFunc(s, func(a, b wrkSample) int { return cmp.Compare(a.res.RPS, b.res.RPS) })
	return s[(len(s)-1)/2]
}

// WrkTable sets wrk's figures for usher, nginx and the client's ceiling,
// one row per level.
func WrkTable(api string, levels []wrkLevel) loadgen.Table {
	t := loadgen.Table{
		Title: fmt.Sprintf("Enumerating over %s, driven by wrk from another process: usher beside nginx serving the same bytes", api),
		Header: []string{"concurrent", "usher req/s", "usher p50 ms", "usher p99 ms", "usher errors", "usher CPU µs/req",
			"nginx req/s", "nginx p99 ms", "nginx errors", "nginx CPU µs/req", "client ceiling req/s", "wrk CPU (cores)", "usher / nginx",
			"usher µs/req user + kernel", "nginx µs/req user + kernel"},
	}
	split := func(s benchkit.Step) string {
		if s.Rate <= 0 || s.Server.Wall <= 0 {
			return "-"
		}
		ops := s.Rate * s.Server.Wall.Seconds()
		return fmtF(s.Server.User.Seconds()/ops*1e6, 1) + " + " + fmtF(s.Server.Sys.Seconds()/ops*1e6, 1)
	}
	us := func(s benchkit.Step) string {
		if v := s.CPUPerOp(); v > 0 {
			return fmtF(v*1e6, 0)
		}
		return "-"
	}
	for _, l := range levels {
		u, n := l.steps()
		wrkCPU := max(l.usher.Client.Cores(), l.nginx.Client.Cores(), l.null.Client.Cores())
		t.Rows = append(t.Rows, []string{strconv.Itoa(l.conns), fmtF(u.Rate, 1), fmtF(l.usher.P50, 2), fmtF(l.usher.P99, 2),
			strconv.FormatInt(l.usher.Errors(), 10), us(u), fmtF(n.Rate, 1), fmtF(l.nginx.P99, 2), strconv.FormatInt(l.nginx.Errors(), 10), us(n),
			fmtF(l.null.RPS, 1), fmtF(wrkCPU, 2), benchkit.Compare(u, n, 1), split(u), split(n)})
		if len(l.usherRounds) > 0 {
			row := &t.Rows[len(t.Rows)-1]
			*row = append(*row, joinRates(l.usherRounds), joinRates(l.nginxRounds))
		}
	}
	if len(levels) > 0 && len(levels[0].usherRounds) > 0 {
		t.Title += " (each level's median round; every round's rate at the right)"
		t.Header = append(t.Header, "usher req/s by round", "nginx req/s by round")
	}
	return t
}

// joinRates lists rates without decimals.
func joinRates(r []float64) string {
	s := make([]string, len(r))
	for i, v := range r {
		s[i] = fmtF(v, 0)
	}
	return strings.Join(s, " ")
}

// wrkHeadlines offers the level nearest 100 connections, and the highest
// level beside usher's peak, to a summary.
func wrkHeadlines(api wrkAPI, levels []wrkLevel, apps int, client string) []loadgen.Headline {
	if len(levels) == 0 {
		return nil
	}
	near := levels[0]
	for _, l := range levels {
		if abs(l.conns-100) < abs(near.conns-100) {
			near = l
		}
	}
	u, n := near.steps()
	heads := []loadgen.Headline{{
		What:      fmt.Sprintf("%s enumeration, %d applications (%s), %d connections", api.name, apps, bytesize(len(api.answer)), near.conns),
		Usher:     fmt.Sprintf("%s req/s, p99 %.1f ms, %d errors, %s µs CPU/req", thousands(u.Rate), near.usher.P99, near.usher.Errors(), fmtF(u.CPUPerOp()*1e6, 0)),
		Yardstick: fmt.Sprintf("nginx %s req/s, %s µs CPU/req", thousands(n.Rate), fmtF(n.CPUPerOp()*1e6, 0)),
		Ratio:     compareWithCPU(u, n),
		Client:    client,
		Ceiling:   thousands(near.null.RPS) + " req/s",
	}}
	peak := levels[0]
	for _, l := range levels {
		if l.usher.RPS > peak.usher.RPS {
			peak = l
		}
	}
	if last := levels[len(levels)-1]; last.conns != near.conns && peak.usher.RPS > 0 {
		lu, ln := last.steps()
		heads = append(heads, loadgen.Headline{
			What: fmt.Sprintf("%s enumeration at %d connections", api.name, last.conns),
			Usher: fmt.Sprintf("%s req/s, %.0f%% of its peak (%s at %d), p99 %.1f ms, %d errors", thousands(lu.Rate),
				100*lu.Rate/peak.usher.RPS, thousands(peak.usher.RPS), peak.conns, last.usher.P99, last.usher.Errors()),
			Yardstick: fmt.Sprintf("nginx %s req/s", thousands(ln.Rate)),
			Ratio:     compareWithCPU(lu, ln),
			Client:    client,
			Ceiling:   thousands(last.null.RPS) + " req/s",
		})
	}
	return heads
}

// compareWithCPU is benchkit.Compare, and, where that gives no ratio,
// the servers' CPU per request, usher's over the yardstick's (above 1:
// usher spends more).
func compareWithCPU(u, n benchkit.Step) string {
	c := benchkit.Compare(u, n, 1)
	if !benchkit.Ratio(c) && u.CPUPerOp() > 0 && n.CPUPerOp() > 0 {
		c += fmt.Sprintf("; CPU/req usher / nginx %.2f", u.CPUPerOp()/n.CPUPerOp())
	}
	return c
}

func abs(i int) int { return max(i, -i) }

// thousands formats a rate with thousands separators and no decimals.
func thousands(f float64) string {
	s := strconv.FormatInt(int64(math.Round(f)), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func bytesize(n int) string { return fmt.Sprintf("%.0f KB", float64(n)/1000) }

func roundOf(r, n int) string {
	if n == 1 {
		return ""
	}
	return fmt.Sprintf(", round %d of %d", r, n)
}

// RoundsTable lists each round's throughput per level, usher's and
// nginx's, to show the spread behind the medians.
func RoundsTable(ushers, nginxes []*loadgen.Result) loadgen.Table {
	t := loadgen.Table{Title: "Throughput of each round (tx/s); the tables above take the median round of each level",
		Header: []string{"concurrent"}}
	for i := range ushers {
		t.Header = append(t.Header, fmt.Sprintf("usher #%d", i+1))
	}
	for i := range nginxes {
		t.Header = append(t.Header, fmt.Sprintf("nginx #%d", i+1))
	}
	for i, s := range ushers[0].Steps {
		row := []string{strconv.Itoa(s.Concurrency)}
		for _, rs := range [][]*loadgen.Result{ushers, nginxes} {
			for _, r := range rs {
				if i < len(r.Steps) {
					row = append(row, fmtF(r.Steps[i].TPS, 1))
				} else {
					row = append(row, "-")
				}
			}
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

func finishEnumerate(rep *loadgen.Report, ngx *loadgen.Result, apps, size int, cfg EnumerateConfig) *loadgen.Report {
	res, cold := rep.Runs[0].Result, rep.Runs[1].Result
	rep.Tables = append([]loadgen.Table{EnumerateTable(res, ngx)}, rep.Tables...)
	rep.Tables = append(rep.Tables, loadgen.StepsTable("usher enumerations, in detail", res))
	rep.Tables = append(rep.Tables, loadgen.StepsTable(fmt.Sprintf("usher cold: each of %d users' first enumeration (an argon2id verification; later ones hit the verified-credential cache)",
		cfg.Users), cold))
	if ngx != nil {
		rep.Tables = append(rep.Tables, loadgen.StepsTable("nginx, the same bytes as a static file, in detail", ngx))
	}
	peak := res.Steps[0]
	for _, s := range res.Steps {
		if s.TPS > peak.TPS {
			peak = s
		}
	}
	if last := res.Steps[len(res.Steps)-1]; peak.TPS > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("usher's peak: %.0f tx/s at %d; at %d: %.0f tx/s, %.0f%% of the peak, %.2f%% errors.",
			peak.TPS, peak.Concurrency, last.Concurrency, last.TPS, 100*last.TPS/peak.TPS, last.ErrorPct))
	}
	broke := "never"
	for _, s := range res.Steps {
		if s.Latency.Avg > Seed004Threshold {
			broke = "at " + strconv.Itoa(s.Concurrency)
			break
		}
	}
	var s004 []string
	for _, r := range Seed004 {
		s004 = append(s004, fmt.Sprintf("%d vCPU: IMA ~%d, FMA ~%d", r.VCPU, r.IMA, r.FMA))
	}
	rep.Notes = append(rep.Notes,
		machineNote(rep),
		fmt.Sprintf("Each request is the IMA/FMA test's RequestAppData with another user's ctx1 credentials; the answer lists %d applications in %d bytes.", apps, size),
		fmt.Sprintf("The IMA/FMA test (concurrency at which the average passed 5,000 ms; %s; FMA collapsed past ~800 at 16 vCPU): usher's average passed it %s, up to %d.",
			strings.Join(s004, "; "), broke, res.Steps[len(res.Steps)-1].Concurrency),
		fmt.Sprintf("The LHC test's broker had 16 vCPU and its LHC database on a RAM disk; %s steps here, the first %s of each not measured, as WCAT's warm-up.",
			cfg.StepDuration, cfg.Warmup),
	)
	var runs []loadgen.Series
	var avgs []loadgen.Series
	for _, r := range rep.Runs {
		if r.Name == "usher cold" {
			continue
		}
		t, a := r.Result.LevelSeries(r.Name)
		runs, avgs = append(runs, t), append(avgs, a)
	}
	for k, cpu := range Seed000CPUs {
		t, a := loadgen.Series{Name: "the LHC test " + cpu}, loadgen.Series{Name: "the LHC test " + cpu}
		for _, row := range Seed000 {
			t.X, t.Y = append(t.X, float64(row.Concurrent)), append(t.Y, row.TPS[k])
			a.X, a.Y = append(a.X, float64(row.Concurrent)), append(a.Y, row.AvgMs[k])
		}
		runs, avgs = append(runs, t), append(avgs, a)
	}
	if f, err := loadgen.LogLinePlot("transactions-per-second", "Enumerations of 400 applications per second (higher is better)", "concurrent requests", "enumerations per second", runs...); err == nil {
		rep.Figures = append(rep.Figures, f)
	}
	if f, err := loadgen.LogLinePlot("average-transaction-time", "Average enumeration time, 400 applications (lower is better)", "concurrent requests", "average enumeration time (ms)", avgs...); err == nil {
		rep.Figures = append(rep.Figures, f)
	}
	return rep
}

// EnumerateTable puts usher's and nginx's steps beside the LHC test's table.
func EnumerateTable(usher, ngx *loadgen.Result) loadgen.Table {
	t := loadgen.Table{
		Title:  "Enumerating 400 applications over NFuse: usher beside nginx (same bytes, static file) and the LHC test (Citrix 7.15 LHC, 16 vCPU)",
		Header: []string{"concurrent", "usher tx/s", "usher avg ms", "usher p99 ms", "usher errors %"},
	}
	if ngx != nil {
		// The client shares the process with usher: it caps both servers,
		// so this ratio is a floor; the wrk tables measure it.
		t.Header = append(t.Header, "nginx tx/s", "nginx avg ms", "usher / nginx (in-process client)")
	}
	for _, cpu := range Seed000CPUs {
		t.Header = append(t.Header, cpu+" tx/s", cpu+" avg ms")
	}
	t.Header = append(t.Header, "usher / best the LHC test")
	for i, s := range usher.Steps {
		row := []string{strconv.Itoa(s.Concurrency), fmtF(s.TPS, 1), fmtF(s.Latency.Avg, 1), fmtF(s.Latency.P99, 1), fmtF(s.ErrorPct, 2)}
		if ngx != nil {
			if i < len(ngx.Steps) && ngx.Steps[i].TPS > 0 {
				n := ngx.Steps[i]
				row = append(row, fmtF(n.TPS, 1), fmtF(n.Latency.Avg, 1), fmtF(s.TPS/n.TPS, 2))
			} else {
				row = append(row, "-", "-", "-")
			}
		}
		if p, ok := seed000At(s.Concurrency); ok {
			best := 0.0
			for k := range Seed000CPUs {
				row = append(row, fmtF(p.TPS[k], 1), fmtF(p.AvgMs[k], 0))
				best = max(best, p.TPS[k])
			}
			row = append(row, fmtF(s.TPS/best, 0)+"x")
		} else {
			for range Seed000CPUs {
				row = append(row, "-", "-")
			}
			row = append(row, "-")
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// probeNFuse sends one enumeration and returns the answer and how many
// applications it lists, or a clear error when the endpoint is missing or
// refuses the credentials.
func probeNFuse(ctx context.Context, client *http.Client, url string, user loadgen.Credential) ([]byte, int, error) {
	body := loadgen.ParseTemplate(loadgen.AppDataRequest).Expand(loadgen.Vars{Cred: user, Encoding: loadgen.Ctx1}, nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "text/xml")
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("NFuse endpoint %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, 0, fmt.Errorf("NFuse endpoint %s: %w", url, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		return nil, 0, fmt.Errorf("no NFuse endpoint at %s (HTTP %d): the site does not serve %s; pass --url", url, resp.StatusCode, NFusePath)
	case resp.StatusCode != http.StatusOK:
		return nil, 0, fmt.Errorf("NFuse endpoint %s: HTTP %d: %.200s", url, resp.StatusCode, b)
	case bytes.Contains(b, []byte("<ErrorId>")):
		return nil, 0, fmt.Errorf("NFuse endpoint %s refused the enumeration: %.300s", url, b)
	case !bytes.Contains(b, []byte("<ResponseAppData")):
		return nil, 0, fmt.Errorf("NFuse endpoint %s: no ResponseAppData in the answer: %.200s", url, b)
	}
	return b, bytes.Count(b, []byte("<AppData")) - bytes.Count(b, []byte("<AppDataSet")), nil
}

// wrkAPIs returns the APIs the wrk part drives: NFuse at nfuseURL with
// answer, and, when base (usher's site) is set, REST enumeration with a
// token of user, whose answer it fetches.
func wrkAPIs(ctx context.Context, base, nfuseURL string, answer []byte, user loadgen.Credential) ([]wrkAPI, error) {
	body := loadgen.ParseTemplate(loadgen.AppDataRequest).Expand(loadgen.Vars{Cred: user, Encoding: loadgen.Ctx1}, nil)
	apis := []wrkAPI{{name: "NFuse", url: nfuseURL, path: NFusePath, answer: answer, ctype: "text/xml",
		req: WrkRequest{Method: "POST", ContentType: "text/xml", Body: body}}}
	if base == "" {
		return apis, nil
	}
	token, resources, err := probeREST(ctx, base, user)
	if err != nil {
		return nil, err
	}
	return append(apis, wrkAPI{name: "REST", url: base + RESTResourcesPath, path: RESTResourcesPath, answer: resources, ctype: "application/json",
		req: WrkRequest{Header: map[string]string{"Authorization": "Bearer " + token}}}), nil
}

// RESTResourcesPath is where usher's REST API enumerates a user's
// resources.
const RESTResourcesPath = "/api/v1/resources"

// probeREST logs user on over REST and returns the token and the user's
// enumeration, as bytes.
func probeREST(ctx context.Context, base string, user loadgen.Credential) (token string, answer []byte, err error) {
	call := func(method, path, auth string, body []byte) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("REST %s: %w", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("REST %s: HTTP %d: %.200s", path, resp.StatusCode, b)
		}
		return b, err
	}
	login, _ := json.Marshal(map[string]string{"username": user.Domain + `\` + user.User, "password": user.Password})
	b, err := call(http.MethodPost, "/api/v1/login", "", login)
	if err != nil {
		return "", nil, err
	}
	var out struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Token == "" {
		return "", nil, fmt.Errorf("REST login: no token in %.200s", b)
	}
	answer, err = call(http.MethodGet, RESTResourcesPath, out.Token, nil)
	return out.Token, answer, err
}
