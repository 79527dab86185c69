package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/benchkit"
	"github.com/usher-vdi/usher/internal/loadgen"
	"github.com/usher-vdi/usher/internal/tlsconf"
)

// coldYardstick is the nginx that calibrates the cold start's client:
// the binary ("" for none), its tuning, and the answer it serves.
type coldYardstick struct {
	nginx  string
	tuning NginxTuning
	answer []byte
}

// ColdStart is what n concurrent first requests of one user cost: the
// password checks they made (one, when concurrent misses share a check)
// and their latency beside one argon2id check's.
type ColdStart struct {
	Requests int           `json:"requests"`
	Checks   int64         `json:"checks"` // -1: the site does not count
	Errors   int           `json:"errors"`
	P50, P99 time.Duration `json:"-"`
	Check    time.Duration `json:"-"` // one argon2id check at the site's parameters, alone
	// RunCheck is what the checks of the cold start itself took each, by
	// the site's own clock (0: the site does not time them): on memory
	// the process has let go of since, a check costs more than Check.
	RunCheck time.Duration `json:"-"`
	// WarmP99 is the p99 of the same requests sent again once the
	// credentials are verified: the cost of n new connections and answers
	// alone.
	WarmP99 time.Duration `json:"-"`
	// ClientP99 is the p99 of the same requests sent by the same client
	// to nginx serving the same answer: the client's own floor, which no
	// server can beat; 0: not measured (no nginx).
	ClientP99 time.Duration `json:"-"`
	// Client says how the requests were sent, for the report.
	Client string `json:"-"`
}

// Within is how many single checks the p99 took.
func (c ColdStart) Within() float64 {
	if c.Check <= 0 {
		return 0
	}
	return float64(c.P99) / float64(c.Check)
}

// coldStart sends n NFuse enumerations of user at once, as the first
// requests the site sees from that user, and times one argon2id check
// alone beforehand. When env.Self names this binary, the requests come
// from it in another process (ColdStartClient), pinned to the client's
// CPUs, while this process, and so the site, is pinned to the server's:
// the check alone is timed there too. Otherwise they come from this
// process. With y's nginx, the same client then sends the same requests
// to nginx serving the same answer, for the client's own floor.
func coldStart(ctx context.Context, env Env, site Site, url, ca string, user loadgen.Credential, n int, y coldYardstick) (ColdStart, error) {
	c := ColdStart{Requests: n, Checks: -1, Client: "Go HTTP client in the bench process, one connection per request"}
	plan := benchkit.PlanCPUs()
	if len(env.Self) > 0 {
		restore, err := plan.PinServer()
		if err != nil {
			return c, err
		}
		defer restore()
	}
	hash, err := auth.HashPassword("a password of the bench", auth.DefaultParams)
	if err != nil {
		return c, err
	}
	var ts []time.Duration
	for range 5 {
		start := time.Now()
		if _, err := auth.VerifyPassword(hash, "a password of the bench"); err != nil {
			return c, err
		}
		ts = append(ts, time.Since(start))
	}
	slices.Sort(ts)
	c.Check = ts[len(ts)/2]

	body := loadgen.ParseTemplate(loadgen.AppDataRequest).Expand(loadgen.Vars{Cred: user, Encoding: loadgen.Ctx1}, nil)
	var checks0 int64
	var took0 time.Duration
	h, counts := site.(Hasher)
	timer, timed := site.(CheckTimer)
	if counts {
		checks0, _ = h.Hashes()
	}
	if timed {
		took0 = timer.CheckTime()
	}
	send := func(url string) (ColdStartResult, error) {
		if len(env.Self) == 0 {
			return ColdStartClient(ctx, url, ca, body, n), nil
		}
		res, note, err := coldStartProcess(ctx, env.Self, plan, url, ca, body, n)
		c.Client = note
		return res, err
	}
	res, err := send(url)
	if err != nil {
		return c, err
	}
	if counts {
		checks1, _ := h.Hashes()
		c.Checks = checks1 - checks0
		if timed && c.Checks > 0 {
			c.RunCheck = (timer.CheckTime() - took0) / time.Duration(c.Checks)
		}
	}
	c.Errors, c.P50, c.P99 = res.Errors, res.P50, res.P99
	// The same requests again, the credentials now verified: what n new
	// connections cost without any check.
	warm, err := send(url)
	if err != nil {
		return c, err
	}
	c.WarmP99 = warm.P99
	if c.Errors == n {
		return c, fmt.Errorf("cold start: every request failed: %s", res.FirstError)
	}
	if c.ClientP99, err = coldClientFloor(ctx, y, send); err != nil {
		return c, err
	}
	return c, nil
}

// coldClientFloor starts y's nginx and returns the p99 of the cold
// start's requests sent to it by send, or 0 without an nginx.
func coldClientFloor(ctx context.Context, y coldYardstick, send func(string) (ColdStartResult, error)) (time.Duration, error) {
	if y.nginx == "" {
		return 0, nil
	}
	ngx, err := StartTunedNginx(ctx, y.nginx, y.tuning, NFusePath, y.answer, "text/xml")
	switch {
	case errors.Is(err, ErrNoNginx):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("cold start: nginx: %w", err)
	}
	defer ngx.Stop()
	res, err := send(ngx.URL)
	switch {
	case err != nil:
		return 0, fmt.Errorf("cold start against nginx: %w", err)
	case res.Errors > 0:
		return 0, fmt.Errorf("cold start against nginx: %d errors: %s", res.Errors, res.FirstError)
	}
	return res.P99, nil
}

// ColdStartResult is what the cold start's client measured.
type ColdStartResult struct {
	Errors     int           `json:"errors"`
	FirstError string        `json:"first_error,omitempty"`
	P50        time.Duration `json:"p50_ns"`
	P99        time.Duration `json:"p99_ns"`
}

// ColdStartClient posts body to url n times at once, each on its own
// connection, and measures the answers. An https server's certificate is
// verified with the CA bundle in ca (empty: the system roots). It is the client of the cold
// start, run by 'usher bench coldstart-client' in its own process.
//
// What the client itself costs is kept out of the timed part where it
// can be, since after the server's one check it must still read every
// answer: the request is rendered once; each request has a connection
// of its own and no pool (net/http's Transport costs a cold request
// more); the collector is off for the short run; and the answers are
// scanned as they come through one small buffer per request, allocated
// before the requests go, not kept: copying each answer into fresh
// memory made the client's floor against nginx 1.9 × one argon2id
// check in one VM.
func ColdStartClient(ctx context.Context, url, ca, body string, n int) ColdStartResult {
	fail := func(err error) ColdStartResult {
		return ColdStartResult{Errors: n, FirstError: err.Error()}
	}
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return fail(err)
	}
	req.Header.Set("Content-Type", "text/xml")
	var raw bytes.Buffer
	if err := req.Write(&raw); err != nil {
		return fail(err)
	}
	dial, port := (&net.Dialer{}).DialContext, "80"
	switch req.URL.Scheme {
	case "http":
	case "https":
		cfg, err := tlsconf.ClientConfig("--ca", ca)
		if err != nil {
			return fail(err)
		}
		dial, port = (&tls.Dialer{Config: cfg}).DialContext, "443" // the server's name from host
	default:
		return fail(fmt.Errorf("the cold start's client speaks http and https, not %q", req.URL.Scheme))
	}
	host := req.URL.Host
	if req.URL.Port() == "" {
		host = net.JoinHostPort(req.URL.Hostname(), port)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	bufs := make([][]byte, n)
	brs := make([]*bufio.Reader, n)
	for i := range bufs {
		// Touched now: a fresh page faults in when first written.
		bufs[i] = bytes.Repeat([]byte{1}, 16<<10)
		brs[i] = bufio.NewReader(bytes.NewReader(bufs[i]))
		brs[i].ReadByte()
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	lat := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-gate
			start := time.Now()
			errs[i] = postNFuse(ctx, dial, host, raw.Bytes(), brs[i], bufs[i])
			lat[i] = time.Since(start)
		})
	}
	close(gate)
	wg.Wait()
	var r ColdStartResult
	for _, err := range errs {
		if err != nil {
			r.Errors++
			if r.FirstError == "" {
				r.FirstError = err.Error()
			}
		}
	}
	slices.Sort(lat)
	r.P50, r.P99 = lat[n/2], lat[min(n-1, (n*99+99)/100-1)]
	return r
}

// coldStartProcess runs the cold start's client as self (this binary)
// 'bench coldstart-client' in its own process, as the plan pins it.
func coldStartProcess(ctx context.Context, self []string, plan benchkit.Plan, url, ca, body string, n int) (ColdStartResult, string, error) {
	var r ColdStartResult
	dir, err := os.MkdirTemp("", "usher-coldstart-*")
	if err != nil {
		return r, "", err
	}
	defer os.RemoveAll(dir)
	bodyFile := filepath.Join(dir, "body.xml")
	if err := os.WriteFile(bodyFile, []byte(body), 0o600); err != nil {
		return r, "", err
	}
	args := append(slices.Clone(self[1:]), "bench", "coldstart-client", "--url", url, "--requests", strconv.Itoa(n), "--body", bodyFile)
	if ca != "" {
		args = append(args, "--ca", ca)
	}
	cmd, note := benchkit.Command(plan, self[0], args...)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, _, err := benchkit.Run(ctx, cmd)
	if err != nil {
		return r, "", fmt.Errorf("cold start client: %w: %.300s", err, out)
	}
	if err := json.Unmarshal(lastLine(out), &r); err != nil {
		return r, "", fmt.Errorf("cold start client printed %.300q: %w", out, err)
	}
	note = strings.Replace(note, filepath.Base(self[0]), "usher bench coldstart-client (Go HTTP client)", 1)
	return r, note + ", one connection per request", nil
}

// lastLine returns the last non-empty line of out.
func lastLine(out []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	return lines[len(lines)-1]
}

// postNFuse sends the request req, as written out, on a new connection
// to host made by dial, reads the answer through br and buf, and checks
// that it was answered: a status of 200 and no NFuse error in the answer.
func postNFuse(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), host string, req []byte, br *bufio.Reader, buf []byte) error {
	conn, err := dial(ctx, "tcp", host)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if _, err := conn.Write(req); err != nil {
		return err
	}
	br.Reset(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	start, found, err := scanFor(resp.Body, buf, nfuseError)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || found {
		return fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, start)
	}
	return nil
}

var nfuseError = []byte("<ErrorId>")

// scanFor reads r to its end through buf (longer than pat) and reports
// whether pat occurs in what it read, and the start of it.
func scanFor(r io.Reader, buf, pat []byte) (start []byte, found bool, err error) {
	keep := 0 // bytes carried over: pat may straddle two reads
	for {
		n, err := r.Read(buf[keep:])
		if start == nil && n > 0 {
			start = bytes.Clone(buf[keep : keep+min(n, 200)])
		}
		seen := buf[:keep+n]
		found = found || bytes.Contains(seen, pat)
		keep = copy(buf, seen[len(seen)-min(len(seen), len(pat)-1):])
		switch {
		case err == io.EOF:
			return start, found, nil
		case err != nil:
			return start, found, err
		}
	}
}

// table sets the cold start out for a report.
func (c ColdStart) table() loadgen.Table {
	checks := "not counted"
	if c.Checks >= 0 {
		checks = fmt.Sprint(c.Checks)
	}
	return loadgen.Table{
		Title: fmt.Sprintf("Cold start: %d concurrent first enumerations of one user", c.Requests),
		Header: []string{"requests", "argon2id checks", "errors", "p50 ms", "p99 ms", "one check alone ms", "p99 / one check",
			"the same requests warm: p99 ms", "p99 - warm p99 ms", "the client against nginx: p99 ms", "the run's check: ms"},
		Rows: [][]string{{fmt.Sprint(c.Requests), checks, fmt.Sprint(c.Errors), fmtMs(c.P50), fmtMs(c.P99), fmtMs(c.Check),
			fmtF(c.Within(), 2), fmtMs(c.WarmP99), fmtMs(c.P99 - c.WarmP99), c.clientFloor(), c.runCheck()}},
	}
}

// headline offers the cold start to a summary.
func (c ColdStart) headline() loadgen.Headline {
	checks := "checks not counted"
	if c.Checks >= 0 {
		checks = fmt.Sprintf("%d argon2id check(s)", c.Checks)
	}
	return loadgen.Headline{
		What: fmt.Sprintf("Cold start: %d concurrent first NFuse enumerations of one user", c.Requests),
		Usher: fmt.Sprintf("%s, p99 %s ms (the same requests once verified: %s ms), %d errors", checks, fmtMs(c.P99),
			fmtMs(c.WarmP99), c.Errors),
		Yardstick: fmt.Sprintf("one argon2id check alone: %s ms; the same requests from the same client to nginx serving the answer: p99 %s ms",
			fmtMs(c.Check), c.clientFloor()),
		Ratio:  c.ratio(),
		Client: c.Client,
	}
}

// ratio is the p99 in single checks: the one timed alone (warm: it
// follows others), and, when timed, the run's own.
func (c ColdStart) ratio() string {
	r := fmt.Sprintf("p99 = %.2f × one check", c.Within())
	if c.RunCheck > 0 {
		r += fmt.Sprintf(" (%.2f × the run's own check)", float64(c.P99)/float64(c.RunCheck))
	}
	return r
}

// runCheck is RunCheck for a report, "-" when not measured.
func (c ColdStart) runCheck() string {
	if c.RunCheck <= 0 {
		return "-"
	}
	return fmtMs(c.RunCheck)
}

// clientFloor is ClientP99 for a report, "-" when not measured.
func (c ColdStart) clientFloor() string {
	if c.ClientP99 <= 0 {
		return "-"
	}
	return fmtMs(c.ClientP99)
}

func fmtMs(d time.Duration) string { return fmtF(float64(d)/1e6, 1) }
