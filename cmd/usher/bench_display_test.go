package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/displaybench"
)

// TestBenchDisplay runs the bench small: every session's bytes arrived
// unchanged straight from the source, through usher's gateway (its own
// process) and through websockify, and the report holds its table and
// headlines. The speed figures are the bench's to measure, not asserted.
func TestBenchDisplay(t *testing.T) {
	ws := "/usr/bin/websockify"
	if _, err := exec.LookPath(ws); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("websockify is not installed (apt-get install -y websockify): %v", err)
		}
		t.Logf("websockify is not installed: the gateway runs alone")
		ws = ""
	}
	dir := t.TempDir()
	const sessions = 20
	code, stdout, stderr := run(t, "", "bench", "display", "--sessions", "20", "--duration", "2s", "--echoes", "100", "--websockify", ws, "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	b, err := os.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res displaybench.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	ways := []string{displaybench.Direct, displaybench.Gateway}
	if ws != "" {
		ways = append(ways, displaybench.Websockify)
	} else if !strings.Contains(res.Note, "websockify not found") {
		t.Errorf("no yardstick, and the result does not say so: %q", res.Note)
	}
	for _, name := range ways {
		p := res.Proxy(name)
		if p == nil {
			t.Errorf("no %s in the result", name)
			continue
		}
		if p.Opened != sessions || p.Verified != sessions || len(p.Errors) > 0 {
			t.Errorf("%s: %d opened, %d verified of %d: %v", name, p.Opened, p.Verified, sessions, p.Errors)
		}
		if p.Pings == 0 || p.RTTP99 < p.RTTP50 || p.RTTP50 <= 0 || p.IdleRTTP50 <= 0 || p.IdleRTTP99 < p.IdleRTTP50 {
			t.Errorf("%s: %d echoes, p50 %v, p99 %v", name, p.Pings, p.RTTP50, p.RTTP99)
		}
		if (name != displaybench.Direct) != p.Measured {
			t.Errorf("%s: proxy CPU measured %v", name, p.Measured)
		}
	}
	rep := readReport(t, dir)
	if len(rep.Tables) != 1 {
		t.Fatalf("%d tables", len(rep.Tables))
	}
	tb := rep.Tables[0]
	for _, col := range []string{"verified", "sessions per CPU-second", "sessions per core at rate", "added p99 ms", "bench process cores"} {
		if !slices.Contains(tb.Header, col) {
			t.Errorf("no column %q in %v", col, tb.Header)
		}
	}
	if len(tb.Rows) != len(ways) {
		t.Errorf("%d rows, want %d", len(tb.Rows), len(ways))
	}
	if len(rep.Headlines) != 3 {
		t.Fatalf("%d headlines, want 3", len(rep.Headlines))
	}
	for _, h := range rep.Headlines {
		if h.Usher == "" || h.Client == "" || h.Ceiling == "" || (ws != "") == strings.Contains(h.Yardstick, "missing") {
			t.Errorf("headline %+v", h)
		}
	}
	if !strings.Contains(stdout, "| usher gateway ") {
		t.Errorf("stdout lacks the table:\n%s", stdout)
	}
}

func TestBenchDisplayParseRate(t *testing.T) {
	for in, want := range map[string]int64{"2Mbit": 250_000, "2mbit/s": 250_000, "500kbit": 62_500, "250KB": 250_000, "1000": 1000} {
		if got, err := displaybench.ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "fast", "-2Mbit", "0"} {
		if _, err := displaybench.ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q): no error", bad)
		}
	}
}
