package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/loadgen"
)

func TestRTTRows(t *testing.T) {
	got, err := rttRows([]time.Duration{250 * time.Millisecond, 10 * time.Millisecond, 0, 10 * time.Millisecond})
	if err != nil || len(got) != 3 || got[0] != 0 || got[1] != 10*time.Millisecond || got[2] != 250*time.Millisecond {
		t.Errorf("rttRows = %v, %v", got, err)
	}
	if _, err := rttRows([]time.Duration{1500 * time.Microsecond}); err == nil {
		t.Error("1.5 ms taken")
	}
}

// TestLatencyReport: every cell is a row beside its bound, the RTT-0
// cell and the zones-and-latency test's; a cell short of 0.8 × min(bound,
// RTT 0) is named with what the site DB saw; the headlines are the
// highest RTT at the highest concurrency and the lowest at the lowest.
func TestLatencyReport(t *testing.T) {
	cell := func(rtt time.Duration, c int, tps float64, place, other int64) latencyCell {
		s := loadgen.Step{Concurrency: c, TPS: tps, Requests: 100, OK: 100, Window: 100 / tps, Latency: loadgen.Latency{Avg: 1000 * float64(c) / tps, P99: 2000}}
		return latencyCell{rtt: rtt, step: s, db: DBTraffic{RoundTrips: place + other, MaxOpen: 16,
			ByKind: map[string]int64{"BEGIN; SELECT * FROM place_session($1::text, …; COMMIT": place, "UPDATE machine_status SET …": other}}}
	}
	cells := []latencyCell{
		cell(0, 12, 400, 100, 30), cell(0, 60, 500, 100, 30),
		cell(10*time.Millisecond, 12, 1000, 100, 50), // above its bound: no shortfall
		cell(10*time.Millisecond, 60, 450, 100, 50),
		cell(250*time.Millisecond, 12, 40, 100, 200), // 83% of 48
		cell(250*time.Millisecond, 60, 50, 200, 500), // 21% of 240
	}
	cells[5].step.Incomplete = true
	rep := latencyReport(cells, LatencyConfig{LaunchConfig: LaunchConfig{Launches: 2000, Concurrency: []int{12, 60}}}, latencyRun{pool: 16, limit: time.Minute})
	main := rep.Tables[0]
	if len(main.Rows) != len(cells) {
		t.Fatalf("%d rows, want %d", len(main.Rows), len(cells))
	}
	row := func(i int) map[string]string {
		m := map[string]string{}
		for j, h := range main.Header {
			m[h] = main.Rows[i][j]
		}
		return m
	}
	r := row(5)
	if r["RTT"] != "250 ms" || r["bound concurrent/RTT (launches/s)"] != "240.0" || r["usher / bound"] != "0.21" || r["RTT-0 launches/s"] != "500.0" ||
		r["the zones-and-latency test errors %"] != "99.0" || r["the zones-and-latency test launches/s"] != "n/a" || r["launches done"] != "100 of 2000 (cut off)" {
		t.Errorf("250 ms / 60: %v", r)
	}
	r = row(2)
	if r["the zones-and-latency test launches/s"] != "14.0" || r["the zones-and-latency test avg (s)"] != "0.9" || r["usher / the zones-and-latency test"] != "71x" {
		t.Errorf("10 ms / 12: %v", r)
	}
	if r := row(0); r["bound concurrent/RTT (launches/s)"] != "-" || r["the zones-and-latency test launches/s"] != "-" {
		t.Errorf("RTT 0: %v", r)
	}
	db := rep.Tables[1]
	if got := db.Rows[5][4] + "|" + db.Rows[5][5]; got != "7.00|2.00" {
		t.Errorf("round trips per launch, place_session per launch: %s", got)
	}
	kinds := rep.Tables[2]
	if len(kinds.Header) != 4 || kinds.Rows[len(kinds.Rows)-1][3] != "7.00" {
		t.Errorf("kinds table: %v %v", kinds.Header, kinds.Rows)
	}
	notes := strings.Join(rep.Notes, "\n")
	if !strings.Contains(notes, "RTT 250 ms / 60: 50.0 launches/s, 21% of 240.0; 7.00 round trips per launch (2.00 calling place_session), so 16 pool connections carry at most 9.1 launches/s") ||
		strings.Contains(notes, "RTT 10 ms / 12:") || strings.Contains(notes, "RTT 250 ms / 12:") {
		t.Errorf("shortfalls:\n%s", notes)
	}
	if len(rep.Headlines) != 2 || !strings.Contains(rep.Headlines[0].What, "250 ms RTT away, concurrency 60") ||
		!strings.Contains(rep.Headlines[1].What, "10 ms RTT away, concurrency 12") || rep.Headlines[1].Ratio != "71× the published" ||
		rep.Headlines[0].Ratio != "Citrix failed the cell" || rep.Headlines[0].Client == "" {
		t.Errorf("headlines: %+v", rep.Headlines)
	}
	if len(rep.Runs) != 3 || len(rep.Runs[2].Result.Steps) != 2 || rep.Runs[2].Result.Steps[1].Step != 1 {
		t.Errorf("runs: %+v", rep.Runs)
	}
}

func TestPoolSize(t *testing.T) {
	for dsn, want := range map[string]int{"postgres://h/d": DefaultSatellitePool, "postgres://h/d?pool_max_conns=64": 64, "host=h pool_max_conns=8": 8} {
		if got := poolSize(dsn); got != want {
			t.Errorf("poolSize(%q) = %d, want %d", dsn, got, want)
		}
	}
}
