package api

import (
	"testing"
	"time"
)

// TestTrendRing: readings' gains go to their minute; the hour is 60
// minutes, the last the current one, those not read filled with no
// launches and the sessions before them; older minutes are dropped; a
// counter that starts again counts from zero.
func TestTrendRing(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	var r trendRing
	r.observe(t0.Add(10*time.Second), 100, 40, 3) // the first reading: a base, no gain
	r.observe(t0.Add(40*time.Second), 105, 42, 4)
	r.observe(t0.Add(3*time.Minute+5*time.Second), 107, 42, 6)
	got := r.trends(t0.Add(3*time.Minute + 30*time.Second))
	if len(got.Samples) != TrendMinutes {
		t.Fatalf("%d samples, want %d", len(got.Samples), TrendMinutes)
	}
	last := got.Samples[TrendMinutes-1]
	if !last.At.Equal(t0.Add(3*time.Minute)) || last.Launches != 2 || last.Logons != 0 || last.Sessions != 6 {
		t.Errorf("the current minute: %+v, want 05:03, 2 launches, 0 logons, 6 sessions", last)
	}
	for k, want := range map[int]TrendSample{
		TrendMinutes - 4: {At: t0, Launches: 5, Logons: 2, Sessions: 4},
		TrendMinutes - 3: {At: t0.Add(time.Minute), Sessions: 4},
		TrendMinutes - 2: {At: t0.Add(2 * time.Minute), Sessions: 4},
		TrendMinutes - 5: {At: t0.Add(-time.Minute)},
		0:                {At: t0.Add(-56 * time.Minute)},
	} {
		if g := got.Samples[k]; !g.At.Equal(want.At) || g.Launches != want.Launches || g.Logons != want.Logons || g.Sessions != want.Sessions {
			t.Errorf("sample %d: %+v, want %+v", k, g, want)
		}
	}

	// Two hours on, only the current minute is kept; a counter that went
	// back (a new registry) counts from zero.
	later := t0.Add(2 * time.Hour)
	r.observe(later, 3, 1, 1)
	if len(r.minutes) != 1 {
		t.Errorf("%d minutes kept two hours on, want 1", len(r.minutes))
	}
	got = r.trends(later)
	if last := got.Samples[TrendMinutes-1]; last.Launches != 3 || last.Logons != 1 || last.Sessions != 1 {
		t.Errorf("after a counter reset: %+v, want 3 launches, 1 logon, 1 session", last)
	}
	if first := got.Samples[0]; first.Launches != 0 || first.Sessions != 0 || !first.At.Equal(later.Add(-59*time.Minute)) {
		t.Errorf("the hour's first minute: %+v", first)
	}
	for i := 0; i < 3*TrendMinutes; i++ {
		r.observe(later.Add(time.Duration(i)*time.Minute), float64(10+i), 1, 1)
	}
	if len(r.minutes) > TrendMinutes {
		t.Errorf("%d minutes kept, more than %d", len(r.minutes), TrendMinutes)
	}
}
