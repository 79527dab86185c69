package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/loadgen"
)

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
	usher := &loadgen.NFuse{Client: loadgen.NewClient(maxConc), URL: url, Body: loadgen.AppDataRequest, Users: users, Encoding: loadgen.Ctx1}
	answer, apps, err := probeNFuse(ctx, url, users[0])
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(env.out(), "NFuse at %s answers %d applications in %d bytes.\n", url, apps, len(answer))

	// Cold: every user's first enumeration, which verifies the password.
	coldExec := loadgen.FixedWork{Concurrency: []int{2 * runtime.NumCPU()}, Requests: nusers}
	fmt.Fprintf(env.out(), "usher, cold: %s\n", coldExec)
	cold, err := coldExec.Run(ctx, usher, env.options())
	if err != nil {
		return nil, fmt.Errorf("cold enumerations: %w", err)
	}

	var skipNote string
	var target *loadgen.NFuse // nginx, when it runs
	switch n, nerr := StartNginx(ctx, cfg.Nginx, NFusePath, answer, "text/xml"); {
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
	if cfg.Wrk != "" && runErr == nil {
		body := loadgen.ParseTemplate(loadgen.AppDataRequest).Expand(loadgen.Vars{Cred: users[0], Encoding: loadgen.Ctx1}, nil)
		t, notes, err := enumerateWrk(ctx, env, cfg, url, answer, body, rep.Runs[0].Result, ngxMedian)
		if t != nil {
			rep.Tables = append([]loadgen.Table{rep.Tables[0], *t}, rep.Tables[1:]...)
		}
		rep.Notes = append(rep.Notes, notes...)
		runErr = err
	}
	return rep, runErr
}

// ClientBound is the share of the client's ceiling at which a server's
// figure says more about the client than about the server.
const ClientBound = 0.9

// NullPath is where the wrk part's nginx serves padding of the answer's
// size: the client's ceiling.
const NullPath = "/null"

// enumerateWrk drives usher, nginx and nginx's null answer with wrk at
// each level and tabulates them beside the in-process figures. It
// returns no table, and a note, when wrk or nginx is missing.
func enumerateWrk(ctx context.Context, env Env, cfg EnumerateConfig, url string, answer []byte, body string, usher, ngx *loadgen.Result) (*loadgen.Table, []string, error) {
	if _, err := os.Stat(cfg.Wrk); err != nil {
		fmt.Fprintf(env.out(), "wrk: %v; skipping the wrk table (Debian: apt-get install wrk)\n", ErrNoWrk)
		return nil, []string{fmt.Sprintf("wrk: skipped, %v (%s).", ErrNoWrk, cfg.Wrk)}, nil
	}
	tuning := NginxTuning{Workers: 1, NoPush: true, SendBuffer: cfg.SendBuffer, NullPath: NullPath}
	n, err := StartTunedNginx(ctx, cfg.Nginx, tuning, NFusePath, answer, "text/xml")
	switch {
	case cfg.Nginx == "" || errors.Is(err, ErrNoNginx):
		fmt.Fprintf(env.out(), "wrk: no nginx (%q); skipping the wrk table\n", cfg.Nginx)
		return nil, []string{"wrk: skipped, no nginx to calibrate the client against."}, nil
	case err != nil:
		return nil, nil, fmt.Errorf("nginx for wrk: %w", err)
	}
	defer n.Stop()
	dir, err := os.MkdirTemp("", "usher-bench-wrk-*")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	script, err := writeWrkScript(dir, body)
	if err != nil {
		return nil, nil, err
	}
	null := strings.TrimSuffix(n.URL, NFusePath) + NullPath
	var wu, wn, wc []WrkResult
	for _, c := range cfg.Concurrency {
		for _, r := range []struct {
			name, url, script string
			into              *[]WrkResult
		}{{"usher", url, script, &wu}, {"nginx", n.URL, script, &wn}, {"nginx " + NullPath, null, "", &wc}} {
			fmt.Fprintf(env.out(), "wrk -t1 -c%d -d%s: %s\n", c, cfg.StepDuration, r.name)
			res, err := RunWrk(ctx, cfg.Wrk, r.url, r.script, c, cfg.StepDuration)
			if err != nil {
				return nil, nil, err
			}
			*r.into = append(*r.into, res)
		}
	}
	t := WrkTable(cfg.Concurrency, usher, ngx, wu, wn, wc)
	return &t, []string{
		fmt.Sprintf("wrk (another process, one thread, -c as the level, %s a level with no warm-up) posts one user's RequestAppData with ctx1 credentials. "+
			"Its nginx: one worker, sendfile on, tcp_nopush off, sndbuf %d; the client's ceiling is wrk's GET of %s there, padding of the answer's size as a static file. "+
			"A figure at %.0f%% of that ceiling or more is client-bound and gets no ratio.", cfg.StepDuration, cfg.SendBuffer, NullPath, 100*ClientBound),
	}, nil
}

// WrkTable sets wrk's figures for usher (wu), nginx (wn) and the client's
// ceiling (wc), one per level, beside the in-process ones (ngx may be nil).
func WrkTable(levels []int, usher, ngx *loadgen.Result, wu, wn, wc []WrkResult) loadgen.Table {
	t := loadgen.Table{
		Title: "Enumerating over NFuse, driven by wrk from another process, beside the in-process client",
		Header: []string{"concurrent", "in-process usher tx/s", "in-process nginx tx/s", "wrk usher req/s", "usher p50 ms", "usher p99 ms", "usher errors",
			"wrk nginx req/s", "nginx p99 ms", "nginx errors", "client ceiling req/s", "usher / nginx (wrk)"},
	}
	in := func(r *loadgen.Result, i int) string {
		if r == nil || i >= len(r.Steps) {
			return "-"
		}
		return fmtF(r.Steps[i].TPS, 1)
	}
	for i, c := range levels {
		u, n, ceil := wu[i], wn[i], wc[i].RPS
		ratio := "-"
		switch ub, nb := u.RPS >= ClientBound*ceil, n.RPS >= ClientBound*ceil; {
		case ub && nb:
			ratio = "client-bound"
		case ub:
			ratio = "client-bound (usher)"
		case nb:
			ratio = "client-bound (nginx)"
		case n.RPS > 0:
			ratio = fmtF(u.RPS/n.RPS, 2)
		}
		t.Rows = append(t.Rows, []string{strconv.Itoa(c), in(usher, i), in(ngx, i), fmtF(u.RPS, 1), fmtF(u.P50, 2), fmtF(u.P99, 2),
			strconv.FormatInt(u.Errors(), 10), fmtF(n.RPS, 1), fmtF(n.P99, 2), strconv.FormatInt(n.Errors(), 10), fmtF(ceil, 1), ratio})
	}
	return t
}

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
		t.Header = append(t.Header, "nginx tx/s", "nginx avg ms", "usher / nginx")
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
func probeNFuse(ctx context.Context, url string, user loadgen.Credential) ([]byte, int, error) {
	body := loadgen.ParseTemplate(loadgen.AppDataRequest).Expand(loadgen.Vars{Cred: user, Encoding: loadgen.Ctx1}, nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "text/xml")
	resp, err := http.DefaultClient.Do(req)
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
