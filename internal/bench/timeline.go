package bench

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/loadgen"
)

// Timeline buckets calls by the second they started in, from its start:
// per operation the calls that succeeded and their latencies, and the
// failures by kind; and events (a cut, a mode change) at the second they
// happened.
type Timeline struct {
	start time.Time
	mu    sync.Mutex
	secs  []*second
}

type second struct {
	ok   map[string]int
	lat  map[string][]time.Duration
	errs map[string]int // "op kind" → count
	// slowestErr is the longest a failed call took to fail.
	slowestErr time.Duration
	events     []string
}

// NewTimeline returns an empty timeline starting at start.
func NewTimeline(start time.Time) *Timeline { return &Timeline{start: start} }

// at returns the bucket of t, growing the timeline to it; nil before the
// start. The caller holds mu.
func (t *Timeline) at(at time.Time) *second {
	i := int(at.Sub(t.start) / time.Second)
	if i < 0 {
		return nil
	}
	for len(t.secs) <= i {
		t.secs = append(t.secs, &second{ok: map[string]int{}, lat: map[string][]time.Duration{}, errs: map[string]int{}})
	}
	return t.secs[i]
}

// Record counts a call of op that started at start and took took; kind
// is empty when it succeeded, what failed otherwise.
func (t *Timeline) Record(op string, start time.Time, took time.Duration, kind string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.at(start)
	if s == nil {
		return
	}
	if kind != "" {
		s.errs[op+" "+kind]++
		s.slowestErr = max(s.slowestErr, took)
		return
	}
	s.ok[op]++
	s.lat[op] = append(s.lat[op], took)
}

// Event notes what happened at at.
func (t *Timeline) Event(at time.Time, what string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.at(at); s != nil {
		s.events = append(s.events, fmt.Sprintf("%s (+%s)", what, fmtSeconds(at.Sub(t.start)%time.Second)))
	}
}

// Errors returns the failures of calls that started in [from, to), by
// "op kind", counting every second the interval touches in full.
func (t *Timeline) Errors(from, to time.Time) map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]int{}
	for _, s := range t.between(from, to) {
		for k, n := range s.errs {
			out[k] += n
		}
	}
	return out
}

// SlowestError returns the longest a call that started in [from, to)
// took to fail, counting every second the interval touches in full.
func (t *Timeline) SlowestError(from, to time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var d time.Duration
	for _, s := range t.between(from, to) {
		d = max(d, s.slowestErr)
	}
	return d
}

// between returns the seconds that [from, to) touches. The caller holds
// mu.
func (t *Timeline) between(from, to time.Time) []*second {
	first := min(max(int(from.Sub(t.start)/time.Second), 0), len(t.secs))
	last := first
	for last < len(t.secs) && t.start.Add(time.Duration(last)*time.Second).Before(to) {
		last++
	}
	return t.secs[first:last]
}

// Table tabulates the timeline: a row per second, with each of ops'
// successes and p99, the failures by kind, and the events.
func (t *Timeline) Table(title string, ops ...string) loadgen.Table {
	t.mu.Lock()
	defer t.mu.Unlock()
	tb := loadgen.Table{Title: title, Header: []string{"s"}}
	for _, op := range ops {
		tb.Header = append(tb.Header, op+" ok", op+" p99 ms")
	}
	tb.Header = append(tb.Header, "errors", "events")
	for i, s := range t.secs {
		row := []string{strconv.Itoa(i)}
		for _, op := range ops {
			p99 := "-"
			if l := s.lat[op]; len(l) > 0 {
				p99 = fmtF(float64(quantile(l, 0.99))/1e6, 1)
			}
			row = append(row, strconv.Itoa(s.ok[op]), p99)
		}
		row = append(row, joinCounts(s.errs), strings.Join(s.events, "; "))
		tb.Rows = append(tb.Rows, row)
	}
	return tb
}

// joinCounts lists counts by key, in key order: "a: 1; b: 2".
func joinCounts(m map[string]int) string {
	var s []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s = append(s, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return strings.Join(s, "; ")
}

// quantile returns the q quantile of l (nearest rank), sorting l.
func quantile(l []time.Duration, q float64) time.Duration {
	slices.Sort(l)
	i := int(float64(len(l))*q+0.999999) - 1
	return l[min(max(i, 0), len(l)-1)]
}

// fmtSeconds formats d in seconds with two decimals.
func fmtSeconds(d time.Duration) string { return fmtF(d.Seconds(), 2) + " s" }
