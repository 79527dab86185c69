package bench

import (
	"testing"
	"time"
)

// TestTimeline: calls land in the second they started in, p99 is the
// nearest rank, Errors counts the seconds an interval touches, and
// events show in their second.
func TestTimeline(t *testing.T) {
	start := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	tl := NewTimeline(start)
	for i := range 100 {
		tl.Record("launch", start.Add(100*time.Millisecond), time.Duration(i+1)*time.Millisecond, "")
	}
	tl.Record("launch", start.Add(1500*time.Millisecond), time.Millisecond, "503 unavailable")
	tl.Record("launch", start.Add(-time.Second), time.Millisecond, "before the start") // dropped
	tl.Record("enumerate", start.Add(2100*time.Millisecond), 3*time.Millisecond, "")
	tl.Event(start.Add(1250*time.Millisecond), "cut")

	tb := tl.Table("t", "launch", "enumerate")
	if len(tb.Rows) != 3 {
		t.Fatalf("%d rows, want 3: %v", len(tb.Rows), tb.Rows)
	}
	if r := tb.Rows[0]; r[1] != "100" || r[2] != "99.0" || r[3] != "0" || r[4] != "-" {
		t.Errorf("second 0: %v; want 100 launches, p99 99.0 ms, no enumeration", r)
	}
	if r := tb.Rows[1]; r[1] != "0" || r[5] != "launch 503 unavailable: 1" || r[6] != "cut (+0.25 s)" {
		t.Errorf("second 1: %v", r)
	}
	if r := tb.Rows[2]; r[3] != "1" || r[4] != "3.0" {
		t.Errorf("second 2: %v", r)
	}
	if got := tl.Errors(start.Add(1900*time.Millisecond), start.Add(3*time.Second)); len(got) != 1 {
		t.Errorf("errors from 1.9 s: %v; want second 1's", got)
	}
	if got := tl.Errors(start.Add(2*time.Second), start.Add(3*time.Second)); len(got) != 0 {
		t.Errorf("errors from 2 s: %v; want none", got)
	}
	if got := tl.SlowestError(start, start.Add(3*time.Second)); got != time.Millisecond {
		t.Errorf("slowest failure %s, want 1ms", got)
	}
}
