package loadgen

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func sampleResult() *Result {
	return &Result{Executor: "stepped", Model: Closed, Plan: "test", Started: time.Unix(0, 0).UTC(), Steps: []Step{
		{Step: 1, Concurrency: 10, Requests: 1000, OK: 990, Errors: 10, ErrorPct: 1, ErrorsByKind: map[string]int64{"http-503": 10},
			TPS: 980.5, Window: 1.02, Latency: Latency{Count: 1000, Avg: 10.2, P50: 10, P90: 11, P99: 15, Max: 30}},
		{Step: 2, Concurrency: 20, Requests: 1900, OK: 1900, TPS: 1890, Window: 1.005,
			Latency: Latency{Count: 1900, Avg: 10.6, P50: 10.4, P90: 12, P99: 20, Max: 42},
			Phases:  map[string]Latency{"login": {Avg: 1}, "launch": {Avg: 9}}},
	}}
}

func TestReportRoundTrips(t *testing.T) {
	res := sampleResult()
	rep := NewReport("sample", "usher load --test")
	rep.Runs = []Run{{Name: "usher", Result: res}}
	rep.Tables = []Table{StepsTable("usher", res)}
	if pt, ok := PhasesTable("phases", res); ok {
		rep.Tables = append(rep.Tables, pt)
	}
	figs, err := LevelFigures(rep.Runs...)
	if err != nil {
		t.Fatal(err)
	}
	rep.Figures = figs
	dir := t.TempDir()
	if err := rep.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	t.Run("json", func(t *testing.T) {
		var back Report
		if err := json.Unmarshal(read("report.json"), &back); err != nil {
			t.Fatal(err)
		}
		got := back.Runs[0].Result
		if len(got.Steps) != 2 || got.Steps[0].ErrorsByKind["http-503"] != 10 || got.Steps[1].Latency.P99 != 20 ||
			got.Steps[1].Phases["launch"].Avg != 9 {
			t.Errorf("read back %+v", got)
		}
	})
	t.Run("csv", func(t *testing.T) {
		rows, err := csv.NewReader(bytes.NewReader(read("report.csv"))).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 3 || strings.Join(rows[0], ",") != strings.Join(CSVHeader, ",") {
			t.Fatalf("rows %v", rows)
		}
		col := map[string]int{}
		for i, h := range rows[0] {
			col[h] = i
		}
		if rows[1][col["concurrency"]] != "10" || rows[1][col["tps"]] != "980.5" || rows[1][col["errors_by_kind"]] != "http-503=10" ||
			rows[2][col["p99_ms"]] != "20" {
			t.Errorf("rows %v", rows[1:])
		}
	})
	t.Run("html is self-contained", func(t *testing.T) {
		html := read("report.html")
		if ext := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?\s*(https?:)?//`).Find(html); ext != nil {
			t.Errorf("the page fetches %s", ext)
		}
		if n := bytes.Count(html, []byte(`src="data:image/svg`)); n != 2 {
			t.Errorf("%d embedded figures, want 2", n)
		}
		for _, want := range []string{"<table>", "980.5", "usher load --test", "http-503=10"} {
			if !bytes.Contains(html, []byte(want)) {
				t.Errorf("the page lacks %q", want)
			}
		}
	})
	t.Run("svg and text", func(t *testing.T) {
		if svg := read("tps.svg"); !bytes.Contains(svg, []byte("<svg")) {
			t.Errorf("tps.svg: %.100s", svg)
		}
		md := string(read("report.md"))
		for _, want := range []string{"| concurrent |", "| 10 ", "980.5", "| 20         | launch |"} {
			if !strings.Contains(md, want) {
				t.Errorf("report.md lacks %q:\n%s", want, md)
			}
		}
	})
}

func TestThresholds(t *testing.T) {
	res := sampleResult()
	check := func(specs ...string) []string {
		var ts []Threshold
		for _, s := range specs {
			th, err := ParseThreshold(s)
			if err != nil {
				t.Fatal(err)
			}
			ts = append(ts, th)
		}
		return CheckThresholds(res, ts)
	}
	if f := check("p99<50ms", "errors<=1%", "tps>900", "max<0.1s", "avg<11"); len(f) != 0 {
		t.Errorf("failures %v", f)
	}
	f := check("p99<18ms", "errors<1%")
	if len(f) != 2 || !strings.Contains(f[0], "step 1 (10): errors is 1.00%") || !strings.Contains(f[1], "step 2 (20): p99 is 20 ms") {
		t.Errorf("failures %q", f)
	}
	for _, bad := range []string{"p99", "p98<1ms", "p99<fast", "errors<lots"} {
		if _, err := ParseThreshold(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

// TestNewReportNamesTCP: a report records the host's TCP congestion
// control and default qdisc, as the kernel reports them.
func TestNewReportNamesTCP(t *testing.T) {
	r := NewReport("t", "c")
	for key, file := range map[string]string{"tcp_congestion_control": "/proc/sys/net/ipv4/tcp_congestion_control", "default_qdisc": "/proc/sys/net/core/default_qdisc"} {
		want := "unknown"
		if b, err := os.ReadFile(file); err == nil {
			want = strings.TrimSpace(string(b))
		}
		if r.Host[key] != want || want == "" {
			t.Errorf("Host[%q] = %q, want %q", key, r.Host[key], want)
		}
	}
}
