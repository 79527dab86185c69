package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/bench"
	"github.com/usher-vdi/usher/internal/loadgen"
	"github.com/usher-vdi/usher/internal/tlsconf"
)

const loadUsage = `--target KIND --url URL [target flags] [--executor KIND executor flags] [output flags]

Drives load at one URL and reports per step: requests, transactions/s,
average, p50, p90, p99 and max latency (HDR histograms), errors by kind.
It speaks only HTTP to the URL given and works against any NFuse endpoint,
a Citrix XML broker included.

Targets (--target):
  nfuse          POST an NFuse request (--body-file; default: the IMA/FMA test's
                 RequestAppData) to the XML service URL, e.g.
                 http://broker/scripts/wpnbr.dll. A body without {{...}}
                 placeholders gets each user's credentials in its UserName,
                 Password and Domain elements; passwords are sent as
                 --password-encoding (ctx1 or cleartext).
  nfuse-launch   POST RequestAddress for the --apps in turn (or --body-file
                 with {{app}}).
  rest           a flow through usher's REST API at the base URL (--flow
                 login,enumerate,launch,logoff; --apps to launch).
  http           any request: --method, --header, --body-file, --expect-*.
Body and URL placeholders: {{user}} {{password}} {{domain}} {{encoding}}
{{app}} {{i}}. Users files hold "user:password" (or DOMAIN\user:password)
lines, or CSV with user,password[,domain] columns; transaction i uses user
i mod N. Against a demo site (usher serve --demo, its password from
--demo-password or printed at its first start), --demo-users N --password P
stands for a file of user0001..N in domain DEMO, which
  usher load users --count N --password P > users.txt
writes (--domain to change it).

Executors (--executor):
  stepped  closed model, WCAT's: --concurrency START:STEP:MAX (or rising
           C1,C2,...), a step every --step-duration, each measured less
           --warmup and --cooldown.
  fixed    closed model, the zones-and-latency test's: --requests N at each of --concurrency
           C1,C2,... (or START:STEP:MAX); reports the time to finish each.
  rate     open model: --rate R (or FROM:TO over --steps, --ramp staircase
           or linear), at most --workers in flight; --policy queue charges
           the wait (latency corrected for coordinated omission, with the
           uncorrected beside it) or drop counts what could not start.
  storm    open model, Login VSI's: --count N started evenly over --window.

Thresholds (--threshold, repeatable) apply to every step and make the exit
status 1 when one fails: p99<50ms, avg<=2s, errors<1%, tps>=100, dropped==0.

Examples:
  usher load --target nfuse --url http://127.0.0.1:8080/scripts/wpnbr.dll \
    --demo-users 1000 --password secret --executor stepped --concurrency 10:10:100 --step-duration 1m
  usher load --target nfuse --url https://broker.example:8443/scripts/wpnbr.dll --ca site-ca.pem \
    --demo-users 1000 --password secret --executor fixed --concurrency 50 --requests 10000
  usher load users --count 1000 --password secret > users.txt
  usher load --target rest --url http://127.0.0.1:8080 --users users.txt \
    --flow login,launch,logoff --apps office-writer-001 --executor rate --rate 20 \
    --step-duration 5m --threshold 'p99<2s' --out report/`

type loadFlags struct {
	target, url, ca, bodyFile, usersFile, encoding, apps, flow, method string
	demoUsers                                                          int
	// credUsers is how many users the target sends credentials of (set
	// by buildTarget): a broker hashes each one's password once.
	credUsers                             int
	password                              string
	headers, thresholds                   multiFlag
	expectStatus, expectBody, expectMatch string
	reuseTokens                           bool

	executor, concurrency, rate, ramp, policy string
	stepDuration, warmup, cooldown, window    time.Duration
	timeout, maxDuration                      time.Duration
	requests, steps, workers, count           int

	out, jsonFile, csvFile, htmlFile string
	quiet                            bool
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ", ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func (m *Main) load(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "users" {
		return m.loadUsers(args[1:])
	}
	var f loadFlags
	fs := m.flagSet("load", loadUsage)
	fs.StringVar(&f.target, "target", "", "what to load: nfuse, nfuse-launch, rest or http (required)")
	fs.StringVar(&f.url, "url", "", "the URL to load: the NFuse XML service, the REST API's base, or the HTTP request's (required)")
	fs.StringVar(&f.ca, "ca", "", "PEM CA certificates that verify an https --url's certificate, the server's own for a self-signed one (default: the system roots; a certificate neither verifies is an error, never skipped)")
	fs.StringVar(&f.bodyFile, "body-file", "", "request body template (nfuse: default the IMA/FMA test's RequestAppData)")
	fs.StringVar(&f.usersFile, "users", "", "users file: user:password lines or CSV with user,password[,domain]")
	fs.IntVar(&f.demoUsers, "demo-users", 0, "instead of --users: the demo site's users user0001..N in domain "+bench.Domain+", with --password")
	fs.StringVar(&f.password, "password", "", "with --demo-users: their password")
	fs.StringVar(&f.encoding, "password-encoding", "", "how {{password}} is sent: ctx1 or cleartext (default ctx1 for nfuse, cleartext for http)")
	fs.StringVar(&f.apps, "apps", "", "comma-separated applications: {{app}} in bodies, launched by nfuse-launch and rest")
	fs.StringVar(&f.flow, "flow", "login,enumerate,launch,logoff", "rest: the steps of each transaction")
	fs.BoolVar(&f.reuseTokens, "reuse-tokens", false, "rest: log each user on once and keep the token")
	fs.StringVar(&f.method, "method", "GET", "http: request method")
	fs.Var(&f.headers, "header", "http: request header 'Name: value' (repeatable)")
	fs.StringVar(&f.expectStatus, "expect-status", "", "http: comma-separated statuses that succeed (default any 2xx)")
	fs.StringVar(&f.expectBody, "expect-body", "", "a string the answer must contain (http, nfuse)")
	fs.StringVar(&f.expectMatch, "expect-match", "", "http: a regular expression the answer must match")

	fs.StringVar(&f.executor, "executor", "stepped", "load model: stepped, fixed, rate or storm")
	fs.StringVar(&f.concurrency, "concurrency", "", "stepped, fixed: C1,C2,... or START:STEP:MAX (default stepped 10:10:100, fixed 12,24,36,48,60)")
	fs.DurationVar(&f.stepDuration, "step-duration", time.Minute, "stepped, rate: how long each step lasts")
	fs.DurationVar(&f.warmup, "warmup", 0, "stepped, rate: time at the start of each step not measured")
	fs.DurationVar(&f.cooldown, "cooldown", 0, "stepped, rate: time at the end of each step not measured")
	fs.IntVar(&f.requests, "requests", 1000, "fixed: transactions at each concurrency")
	fs.StringVar(&f.rate, "rate", "", "rate: arrivals per second, R or FROM:TO")
	fs.IntVar(&f.steps, "steps", 1, "rate: steps from FROM to TO")
	fs.StringVar(&f.ramp, "ramp", "staircase", "rate: staircase (each step holds its rate) or linear")
	fs.IntVar(&f.workers, "workers", loadgen.DefaultWorkers, "rate, storm: most transactions in flight")
	fs.StringVar(&f.policy, "policy", "queue", "rate, storm: when every worker is busy, queue (and charge the wait) or drop")
	fs.IntVar(&f.count, "count", 0, "storm: transactions to start")
	fs.DurationVar(&f.window, "window", 0, "storm: the time they are spread over")
	fs.DurationVar(&f.timeout, "timeout", loadgen.DefaultTimeout, "bound of each transaction")
	fs.DurationVar(&f.maxDuration, "max-duration", 2*time.Hour, "bound of the whole run; what was measured by then is reported")
	fs.Var(&f.thresholds, "threshold", "pass/fail condition on every step, e.g. p99<50ms or errors<1% (repeatable)")

	fs.StringVar(&f.out, "out", "", "write report.{md,json,csv,html} and plots (SVG) into this directory")
	fs.StringVar(&f.jsonFile, "json", "", "write the result as JSON to this file (- for stdout)")
	fs.StringVar(&f.csvFile, "csv", "", "write one CSV row per step to this file (- for stdout)")
	fs.StringVar(&f.htmlFile, "html", "", "write a self-contained HTML report to this file")
	fs.BoolVar(&f.quiet, "q", false, "print no table")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })

	target, err := f.buildTarget()
	if err != nil {
		return err
	}
	exec, err := f.buildExecutor(set)
	if err != nil {
		return err
	}
	var thresholds []loadgen.Threshold
	for _, s := range f.thresholds {
		t, err := loadgen.ParseThreshold(s)
		if err != nil {
			return usageError{err.Error()}
		}
		thresholds = append(thresholds, t)
	}

	ctx, cancel := context.WithTimeout(ctx, f.maxDuration)
	defer cancel()
	opts := loadgen.Options{Timeout: f.timeout}
	progress := m.progressLine()
	opts.Progress = progress.update
	fmt.Fprintf(m.Stderr, "usher load: %s at %s, %s\n", f.target, f.url, exec)
	if f.credUsers > 0 {
		fmt.Fprintf(m.Stderr, "usher load: the first pass over the %d users pays one password hash each on the broker (cold users, tens of ms of CPU each); "+
			"later passes come from its verified-password cache, so measure warm after --warmup or a first step\n", f.credUsers)
	}
	res, runErr := exec.Run(ctx, target, opts)
	progress.clear()
	if res == nil {
		return runErr
	}
	if runErr != nil {
		fmt.Fprintf(m.Stderr, "usher load: stopped early (%v); reporting what was measured\n", runErr)
	}

	rep := loadgen.NewReport("usher load: "+f.target+" at "+f.url, shellCommand(append([]string{"usher", "load"}, args...)...))
	rep.Runs = []loadgen.Run{{Name: f.target, Result: res}}
	rep.Tables = []loadgen.Table{loadgen.StepsTable(exec.String(), res)}
	if t, ok := loadgen.PhasesTable("Phases of each transaction", res); ok {
		rep.Tables = append(rep.Tables, t)
	}
	fails := loadgen.CheckThresholds(res, thresholds)
	for _, fl := range fails {
		rep.Notes = append(rep.Notes, "threshold failed: "+fl)
	}
	if !f.quiet {
		rep.WriteText(m.Stdout)
	}
	if err := m.writeLoadOutputs(f, rep); err != nil {
		return err
	}
	if len(fails) > 0 {
		// Named here too, so that -q (no table) still says which failed.
		return fmt.Errorf("%d threshold check(s) failed:\n  %s", len(fails), strings.Join(fails, "\n  "))
	}
	if res.Interrupted && errors.Is(runErr, context.Canceled) {
		return runErr
	}
	return nil
}

func (f *loadFlags) buildTarget() (loadgen.Target, error) {
	if f.url == "" {
		return nil, usageError{"--url is required"}
	}
	if !strings.HasPrefix(f.url, "http://") && !strings.HasPrefix(f.url, "https://") {
		return nil, usageError{fmt.Sprintf("--url %q is not an http:// or https:// URL", f.url)}
	}
	if f.encoding == "" {
		f.encoding = loadgen.Cleartext
		if strings.HasPrefix(f.target, "nfuse") {
			f.encoding = loadgen.Ctx1
		}
	}
	if f.encoding != loadgen.Ctx1 && f.encoding != loadgen.Cleartext {
		return nil, usageError{fmt.Sprintf("--password-encoding %q is not ctx1 or cleartext", f.encoding)}
	}
	var users loadgen.Users
	switch {
	case f.demoUsers != 0 && f.usersFile != "":
		return nil, usageError{"--demo-users and --users exclude each other"}
	case f.demoUsers < 0 || f.demoUsers > maxDemoUsers:
		return nil, usageError{fmt.Sprintf("--demo-users must be 1 to %d", maxDemoUsers)}
	case (f.demoUsers > 0) != (f.password != ""):
		return nil, usageError{"--demo-users N and --password P go together"}
	case f.demoUsers > 0:
		users = bench.Users(f.demoUsers, f.password)
	case f.usersFile != "":
		var err error
		if users, err = loadgen.LoadUsers(f.usersFile); err != nil {
			return nil, err
		}
	}
	var body string
	if f.bodyFile != "" {
		b, err := os.ReadFile(f.bodyFile)
		if err != nil {
			return nil, fmt.Errorf("body file: %w", err)
		}
		body = string(b)
	}
	var apps []string
	for _, a := range strings.Split(f.apps, ",") {
		if a = strings.TrimSpace(a); a != "" {
			apps = append(apps, a)
		}
	}
	if f.ca != "" && !strings.HasPrefix(f.url, "https://") {
		return nil, usageError{"--ca verifies an https:// --url"}
	}
	var tlsCfg *tls.Config
	if f.ca != "" {
		var err error
		if tlsCfg, err = tlsconf.ClientConfig("--ca", f.ca); err != nil {
			return nil, usageError{err.Error()}
		}
	}
	client := loadgen.NewClientTLS(256, tlsCfg)
	switch f.target {
	case "nfuse", "nfuse-launch":
		if f.target == "nfuse-launch" && body == "" {
			body = loadgen.AddressRequest
		}
		n := &loadgen.NFuse{Client: client, URL: f.url, Body: body, Users: users, Encoding: f.encoding, Apps: apps, Expect: f.expectBody}
		if err := n.Check(); err != nil {
			return nil, usageError{err.Error() + " (--users, --apps)"}
		}
		f.credUsers = len(users)
		return n, nil
	case "rest":
		flow, err := loadgen.ParseFlow(f.flow)
		if err != nil {
			return nil, usageError{"--flow: " + err.Error()}
		}
		r := &loadgen.REST{Client: client, BaseURL: strings.TrimRight(f.url, "/"), Users: users, Flow: flow, Resources: apps,
			ReuseTokens: f.reuseTokens, ClientName: "usher-load"}
		if err := r.Check(); err != nil {
			return nil, usageError{err.Error() + " (--users, --flow, --apps)"}
		}
		f.credUsers = len(users)
		return r, nil
	case "http":
		r := &loadgen.Request{Client: client, Method: strings.ToUpper(f.method), URL: f.url, Header: http.Header{}, Body: body,
			Users: users, Encoding: f.encoding, Apps: apps, BodyContains: f.expectBody}
		for _, h := range f.headers {
			k, v, ok := strings.Cut(h, ":")
			if !ok || strings.TrimSpace(k) == "" {
				return nil, usageError{fmt.Sprintf("--header %q is not 'Name: value'", h)}
			}
			r.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
		if f.expectStatus != "" {
			for _, s := range strings.Split(f.expectStatus, ",") {
				code, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || code < 100 || code > 599 {
					return nil, usageError{fmt.Sprintf("--expect-status %q is not a list of HTTP statuses", f.expectStatus)}
				}
				r.Status = append(r.Status, code)
			}
		}
		if f.expectMatch != "" {
			re, err := regexp.Compile(f.expectMatch)
			if err != nil {
				return nil, usageError{"--expect-match: " + err.Error()}
			}
			r.BodyMatch = re
		}
		tmpl := loadgen.ParseTemplate(f.url + body)
		if (tmpl.Uses("user") || tmpl.Uses("password")) && len(users) == 0 {
			return nil, usageError{"the request has credential placeholders but no --users"}
		}
		if tmpl.Uses("password") {
			f.credUsers = len(users)
		}
		return r, nil
	case "":
		return nil, usageError{"--target is required: nfuse, nfuse-launch, rest or http"}
	}
	return nil, usageError{fmt.Sprintf("--target %q is not nfuse, nfuse-launch, rest or http", f.target)}
}

func (f *loadFlags) buildExecutor(set map[string]bool) (loadgen.Executor, error) {
	only := func(flags map[string][]string) error {
		for name, executors := range flags {
			if set[name] && !slices.Contains(executors, f.executor) {
				return usageError{fmt.Sprintf("--%s does not apply to --executor %s", name, f.executor)}
			}
		}
		return nil
	}
	if err := only(map[string][]string{
		"requests": {"fixed"}, "rate": {"rate"}, "steps": {"rate"}, "ramp": {"rate"}, "count": {"storm"}, "window": {"storm"},
		"workers": {"rate", "storm"}, "policy": {"rate", "storm"}, "concurrency": {"stepped", "fixed"},
		"step-duration": {"stepped", "rate"}, "warmup": {"stepped", "rate"}, "cooldown": {"stepped", "rate"},
	}); err != nil {
		return nil, err
	}
	policy, err := loadgen.ParsePolicy(f.policy)
	if err != nil {
		return nil, usageError{"--policy: " + err.Error()}
	}
	var exec loadgen.Executor
	switch f.executor {
	case "stepped":
		lv, err := loadgen.ParseLevels(cmp.Or(f.concurrency, "10:10:100"))
		if err != nil {
			return nil, usageError{"--concurrency " + err.Error()}
		}
		exec = loadgen.Stepped{Start: lv.Start, Step: lv.Step, Max: lv.Max, Levels: lv.List,
			StepDuration: f.stepDuration, Warmup: f.warmup, Cooldown: f.cooldown}
	case "fixed":
		lv, err := loadgen.ParseLevels(cmp.Or(f.concurrency, "12,24,36,48,60"))
		if err != nil {
			return nil, usageError{"--concurrency " + err.Error()}
		}
		exec = loadgen.FixedWork{Concurrency: lv.Concurrencies(), Requests: f.requests}
	case "rate":
		if f.rate == "" {
			return nil, usageError{"--executor rate needs --rate R or FROM:TO"}
		}
		from, to, err := loadgen.ParseRate(f.rate)
		if err != nil {
			return nil, usageError{"--rate " + err.Error()}
		}
		if f.ramp != "staircase" && f.ramp != "linear" {
			return nil, usageError{fmt.Sprintf("--ramp %q is not staircase or linear", f.ramp)}
		}
		exec = loadgen.Rate{From: from, To: to, Steps: f.steps, StepDuration: f.stepDuration, Linear: f.ramp == "linear",
			Warmup: f.warmup, Cooldown: f.cooldown, Workers: f.workers, Policy: policy}
	case "storm":
		if f.count < 1 || f.window <= 0 {
			return nil, usageError{"--executor storm needs --count N and --window DURATION"}
		}
		exec = loadgen.Storm{Count: f.count, Window: f.window, Workers: f.workers, Policy: policy, Timeout: f.timeout}
	default:
		return nil, usageError{fmt.Sprintf("--executor %q is not stepped, fixed, rate or storm", f.executor)}
	}
	if err := exec.Validate(); err != nil {
		return nil, usageError{err.Error()}
	}
	return exec, nil
}

func (m *Main) writeLoadOutputs(f loadFlags, rep *loadgen.Report) error {
	if f.out != "" || f.htmlFile != "" {
		figs, err := loadgen.LevelFigures(rep.Runs...)
		if err != nil {
			return err
		}
		rep.Figures = figs
	}
	if f.out != "" {
		if err := rep.WriteDir(f.out); err != nil {
			return err
		}
		fmt.Fprintf(m.Stderr, "usher load: report in %s\n", filepath.Join(f.out, "report.html"))
	}
	for _, o := range []struct {
		path  string
		write func(io.Writer) error
	}{{f.jsonFile, rep.WriteJSON}, {f.csvFile, rep.WriteCSV}, {f.htmlFile, rep.WriteHTML}} {
		if o.path == "" {
			continue
		}
		if o.path == "-" {
			if err := o.write(m.Stdout); err != nil {
				return err
			}
			continue
		}
		fh, err := os.Create(o.path)
		if err != nil {
			return fmt.Errorf("output: %w", err)
		}
		err = o.write(fh)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", o.path, err)
		}
	}
	return nil
}

// progressLine prints a run's live state on one line of stderr, when
// stderr is a terminal.
type progressLine struct {
	mu sync.Mutex
	w  io.Writer
	n  int // characters on the line
}

func (m *Main) progressLine() *progressLine {
	if !isTerminal(m.Stderr) {
		return &progressLine{}
	}
	return &progressLine{w: m.Stderr}
}

func (p *progressLine) update(s loadgen.Progress) {
	if p.w == nil {
		return
	}
	line := fmt.Sprintf("step %d/%d at %s: %d done, %d errors, %d in flight, %.0f tx/s, %s",
		s.Step, s.Steps, s.Level, s.Done, s.Errors, s.InFlight, s.TPS, s.Elapsed.Round(time.Second))
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "\r%-*s", p.n, line)
	p.n = len(line)
}

func (p *progressLine) clear() {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n > 0 {
		fmt.Fprintf(p.w, "\r%*s\r", p.n, "")
		p.n = 0
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// shellCommand writes a command line as a POSIX shell would read it
// back: each argument as it is when it needs no quoting, otherwise in
// single quotes (a single quote inside written '\”).
func shellCommand(args ...string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellQuote(a)
	}
	return strings.Join(quoted, " ")
}

func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:,=+@%", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// maxDemoUsers bounds --demo-users and usher load users --count.
const maxDemoUsers = 1_000_000

// loadUsers writes a users file of the demo site's users.
func (m *Main) loadUsers(args []string) error {
	fs := m.flagSet("load users", "--count N --password P [--domain DEMO] > users.txt\n\n"+
		"Writes a users file for --users: DOMAIN\\user:password lines for user0001..N,\n"+
		"the users of the demo site (usher serve --demo) and of the bench site.")
	count := fs.Int("count", 0, "users, user0001 to userN (required)")
	password := fs.String("password", "", "their password (required)")
	domain := fs.String("domain", bench.Domain, "their domain")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *count < 1 || *count > maxDemoUsers || *password == "" {
		return usageError{fmt.Sprintf("--count 1 to %d and --password are required", maxDemoUsers)}
	}
	var b strings.Builder
	for _, u := range bench.Users(*count, *password) {
		if *domain != "" {
			b.WriteString(*domain + `\`)
		}
		fmt.Fprintf(&b, "%s:%s\n", u.User, u.Password)
	}
	_, err := io.WriteString(m.Stdout, b.String())
	return err
}
