package bench

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/benchkit"
)

// DefaultWrk is where Debian installs wrk.
const DefaultWrk = "/usr/bin/wrk"

// ErrNoWrk is returned by RunWrk when the binary is missing.
var ErrNoWrk = errors.New("wrk is not installed")

// WrkResult is what one wrk run printed.
type WrkResult struct {
	Requests      int64
	RPS           float64 // Requests/sec
	P50, P90, P99 float64 // latency in milliseconds, from --latency
	// Non2xx counts "Non-2xx or 3xx responses"; SocketErrors the sum of
	// connect, read, write and timeout socket errors.
	Non2xx, SocketErrors int64
	// Client is wrk's own CPU use over the run.
	Client benchkit.Usage
}

// Errors is the number of failed requests wrk counted.
func (r WrkResult) Errors() int64 { return r.Non2xx + r.SocketErrors }

// ParseWrk reads the output of wrk --latency. It returns an error when
// the output has no Requests/sec line.
func ParseWrk(out string) (WrkResult, error) {
	var r WrkResult
	var rps bool
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		var err error
		switch {
		case len(f) == 2 && f[0] == "Requests/sec:":
			r.RPS, err = strconv.ParseFloat(f[1], 64)
			rps = true
		case len(f) >= 2 && f[1] == "requests" && len(f) >= 3 && f[2] == "in":
			r.Requests, err = strconv.ParseInt(f[0], 10, 64)
		case len(f) == 2 && (f[0] == "50%" || f[0] == "90%" || f[0] == "99%"):
			p := map[string]*float64{"50%": &r.P50, "90%": &r.P90, "99%": &r.P99}[f[0]]
			*p, err = wrkMillis(f[1])
		case strings.HasPrefix(sc.Text(), "  Non-2xx or 3xx responses:") && len(f) == 5:
			r.Non2xx, err = strconv.ParseInt(f[4], 10, 64)
		case len(f) == 10 && f[0] == "Socket" && f[1] == "errors:":
			// Socket errors: connect 0, read 1, write 0, timeout 0
			for _, i := range []int{3, 5, 7, 9} {
				n, perr := strconv.ParseInt(strings.TrimSuffix(f[i], ","), 10, 64)
				if perr != nil {
					err = perr
					break
				}
				r.SocketErrors += n
			}
		}
		if err != nil {
			return r, fmt.Errorf("wrk output %q: %w", sc.Text(), err)
		}
	}
	if !rps {
		return r, fmt.Errorf("wrk output has no Requests/sec: %.300s", out)
	}
	return r, nil
}

// wrkMillis turns wrk's times (631.24us, 1.20ms, 2.01s, 1.00m) into milliseconds.
func wrkMillis(s string) (float64, error) {
	for _, u := range []struct {
		suffix string
		ms     float64
	}{{"us", 1e-3}, {"ms", 1}, {"s", 1e3}, {"m", 60e3}, {"h", 3600e3}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f * u.ms, err
		}
	}
	return 0, fmt.Errorf("time %q has no unit", s)
}

// WrkScript is a wrk Lua script that posts body as text/xml.
func WrkScript(body string) string {
	return WrkRequest{Method: "POST", ContentType: "text/xml", Body: body}.Script()
}

// WrkRequest is the request wrk sends again and again.
type WrkRequest struct {
	Method      string // default GET
	ContentType string
	Header      map[string]string
	Body        string
	// Delay, when set, makes each connection wait that long between
	// requests: a deliberately slow client, for tests.
	Delay time.Duration
}

// Script returns the request as a wrk Lua script.
func (r WrkRequest) Script() string {
	var b strings.Builder
	fmt.Fprintf(&b, "wrk.method = %s\n", luaString(cmp.Or(r.Method, "GET")))
	if r.ContentType != "" {
		fmt.Fprintf(&b, "wrk.headers[\"Content-Type\"] = %s\n", luaString(r.ContentType))
	}
	for _, k := range slices.Sorted(maps.Keys(r.Header)) {
		// "[ [[" and not "[[[", which Lua reads as a long string.
		fmt.Fprintf(&b, "wrk.headers[ %s ] = %s\n", luaString(k), luaString(r.Header[k]))
	}
	if r.Body != "" {
		fmt.Fprintf(&b, "wrk.body = %s\n", luaString(r.Body))
	}
	if r.Delay > 0 {
		fmt.Fprintf(&b, "function delay() return %d end\n", r.Delay.Milliseconds())
	}
	return b.String()
}

// luaString quotes s as a Lua long string, with as many '=' as it takes
// for s not to close it.
func luaString(s string) string {
	eq := ""
	for strings.Contains(s+"]", "]"+eq+"]") {
		eq += "="
	}
	return "[" + eq + "[" + s + "]" + eq + "]"
}

// Wrk runs wrk, the load generator of the benches' HTTP yardstick runs,
// in its own process as the plan says (pinned to the client's CPU).
type Wrk struct {
	Binary string
	Plan   benchkit.Plan
}

// Run runs wrk with one thread and conns connections against url for d,
// sending req, and parses its output; the result carries wrk's CPU use.
// wrk is killed if it outlasts d by 15 s. It returns ErrNoWrk when the
// binary does not exist.
func (w Wrk) Run(ctx context.Context, url string, req WrkRequest, conns int, d time.Duration) (WrkResult, error) {
	if _, err := os.Stat(w.Binary); err != nil {
		return WrkResult{}, fmt.Errorf("%w (%s)", ErrNoWrk, w.Binary)
	}
	dir, err := os.MkdirTemp("", "usher-bench-wrk-*")
	if err != nil {
		return WrkResult{}, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "request.lua")
	if err := os.WriteFile(script, []byte(req.Script()), 0o600); err != nil {
		return WrkResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, d+15*time.Second)
	defer cancel()
	secs := max(int((d+time.Second/2)/time.Second), 1)
	args := []string{"-t1", "-c" + strconv.Itoa(conns), "-d" + strconv.Itoa(secs) + "s", "--latency", "--timeout", "10s", "-s", script, url}
	cmd, _ := benchkit.Command(w.Plan, w.Binary, args...)
	out, use, err := benchkit.Run(ctx, cmd)
	if err != nil {
		return WrkResult{}, fmt.Errorf("wrk %s: %w: %.300s", url, err, out)
	}
	r, err := ParseWrk(string(out))
	r.Client = use
	return r, err
}

// Note says how wrk runs, for a report.
func (w Wrk) Note() string {
	_, note := benchkit.Command(w.Plan, w.Binary)
	return note + ", one thread"
}
