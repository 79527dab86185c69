package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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
	eq := ""
	for strings.Contains(body, "]"+eq+"]") {
		eq += "="
	}
	return fmt.Sprintf("wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"text/xml\"\nwrk.body = [%s[%s]%s]\n", eq, body, eq)
}

// RunWrk runs binary (wrk) with one thread and conns connections against
// url for d, posting with script (a file; empty: GET), and parses its
// output. wrk is killed if it outlasts d by 15 s. It returns ErrNoWrk when
// binary does not exist.
func RunWrk(ctx context.Context, binary, url, script string, conns int, d time.Duration) (WrkResult, error) {
	if _, err := os.Stat(binary); err != nil {
		return WrkResult{}, fmt.Errorf("%w (%s)", ErrNoWrk, binary)
	}
	ctx, cancel := context.WithTimeout(ctx, d+15*time.Second)
	defer cancel()
	secs := max(int((d+time.Second/2)/time.Second), 1)
	args := []string{"-t1", "-c" + strconv.Itoa(conns), "-d" + strconv.Itoa(secs) + "s", "--latency", "--timeout", "10s"}
	if script != "" {
		args = append(args, "-s", script)
	}
	out, err := exec.CommandContext(ctx, binary, append(args, url)...).CombinedOutput()
	if err != nil {
		return WrkResult{}, fmt.Errorf("wrk %s: %w: %.300s", url, err, out)
	}
	return ParseWrk(string(out))
}

// writeWrkScript writes WrkScript(body) into dir.
func writeWrkScript(dir, body string) (string, error) {
	p := filepath.Join(dir, "nfuse.lua")
	return p, os.WriteFile(p, []byte(WrkScript(body)), 0o644)
}
