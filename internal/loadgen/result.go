package loadgen

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// Load models.
const (
	Closed = "closed" // fixed concurrency: Stepped, FixedWork
	Open   = "open"   // fixed arrival rate: Rate, Storm
)

// Result is what a run measured, one Step per load level.
type Result struct {
	Executor string    `json:"executor"` // stepped, fixed, rate or storm
	Model    string    `json:"model"`    // closed or open
	Plan     string    `json:"plan"`     // the executor's parameters, for people
	Started  time.Time `json:"started"`
	// Elapsed is the wall time of the whole run, in seconds.
	Elapsed float64 `json:"elapsed_s"`
	// Interrupted is set when the run was cancelled before its end; the
	// steps hold what was measured until then.
	Interrupted bool   `json:"interrupted,omitempty"`
	Steps       []Step `json:"steps"`
}

// Step is one load level: a concurrency (closed models) or an arrival rate
// (open models). Only transactions that started inside the step's measured
// window count: warm-up and cool-down are excluded (and counted in
// Excluded).
type Step struct {
	Step        int     `json:"step"`
	Concurrency int     `json:"concurrency,omitempty"`
	Rate        float64 `json:"rate,omitempty"` // offered arrivals per second
	// Window is the measured time in seconds: the step's duration less
	// warm-up and cool-down, stretched to the last completion when an open
	// model fell behind; for fixed work, the time to finish.
	Window   float64 `json:"window_s"`
	Requests int64   `json:"requests"` // measured transactions, ok or failed
	OK       int64   `json:"ok"`
	Errors   int64   `json:"errors"`
	// ErrorPct is Errors per Requests, in percent.
	ErrorPct     float64          `json:"error_pct"`
	ErrorsByKind map[string]int64 `json:"errors_by_kind,omitempty"`
	// Dropped transactions were due while every worker was busy (drop
	// policy); Unsent ones were still queued when the run's time ran out.
	Dropped  int64 `json:"dropped,omitempty"`
	Unsent   int64 `json:"unsent,omitempty"`
	Excluded int64 `json:"excluded,omitempty"`
	// TPS is measured transactions per second of Window.
	TPS float64 `json:"tps"`
	// Latency is each transaction's time. In open models it runs from the
	// moment the schedule said to start (corrected for coordinated
	// omission); Uncorrected runs from the moment it was sent.
	Latency     Latency            `json:"latency"`
	Uncorrected *Latency           `json:"uncorrected,omitempty"`
	Phases      map[string]Latency `json:"phases,omitempty"`
	// TimeToFinish is, for fixed work, the seconds from the first start to
	// the last completion.
	TimeToFinish float64 `json:"time_to_finish_s,omitempty"`
	// Incomplete is set when the step's time ran out before its work was
	// done (fixed work, storms).
	Incomplete bool `json:"incomplete,omitempty"`
}

// Level is the step's load level for people: "20" or "20/s".
func (s Step) Level() string {
	if s.Rate > 0 {
		return fmtFloat(s.Rate) + "/s"
	}
	return itoa(s.Concurrency)
}

// PhaseNames returns the names of the phases measured in any step, sorted.
func (r *Result) PhaseNames() []string {
	seen := map[string]bool{}
	for _, s := range r.Steps {
		for name := range s.Phases {
			seen[name] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// Totals sums the steps: requests, errors by kind, drops.
func (r *Result) Totals() Step {
	var t Step
	t.ErrorsByKind = map[string]int64{}
	for _, s := range r.Steps {
		t.Requests += s.Requests
		t.OK += s.OK
		t.Errors += s.Errors
		t.Dropped += s.Dropped
		t.Unsent += s.Unsent
		t.Excluded += s.Excluded
		for k, n := range s.ErrorsByKind {
			t.ErrorsByKind[k] += n
		}
	}
	if t.Requests > 0 {
		t.ErrorPct = 100 * float64(t.Errors) / float64(t.Requests)
	}
	return t
}

// fill sets a step's figures from its merged measurements over a window.
func (s *Step) fill(m merged, window time.Duration) {
	s.OK, s.Errors = m.ok, m.failed
	s.Requests = m.ok + m.failed
	if s.Requests > 0 {
		s.ErrorPct = 100 * float64(s.Errors) / float64(s.Requests)
	}
	if len(m.errors) > 0 {
		s.ErrorsByKind = m.errors
	}
	s.Window = window.Seconds()
	if window > 0 {
		s.TPS = float64(s.Requests) / window.Seconds()
	}
	s.Latency = m.lat
	if m.uncorr.Count > 0 {
		u := m.uncorr
		s.Uncorrected = &u
	}
	s.Phases = m.phases
}

// MedianSteps combines rounds of the same plan into one result: each step
// is the round's step with the median throughput at that position (the
// lower of the two middle ones for an even count), kept whole so that its
// latencies are ones that were measured together. Rounds that did not
// reach a step (an interrupted run) do not vote for it. It returns nil
// when rs holds no result.
func MedianSteps(rs ...*Result) *Result {
	var first *Result
	n := 0
	for _, r := range rs {
		if r == nil {
			continue
		}
		if first == nil {
			first = r
		}
		n = max(n, len(r.Steps))
	}
	if first == nil {
		return nil
	}
	out := *first
	out.Steps = make([]Step, 0, n)
	for i := range n {
		var votes []Step
		for _, r := range rs {
			if r != nil && i < len(r.Steps) {
				votes = append(votes, r.Steps[i])
			}
		}
		slices.SortStableFunc(votes, func(a, b Step) int { return cmp.Compare(a.TPS, b.TPS) })
		out.Steps = append(out.Steps, votes[(len(votes)-1)/2])
	}
	for _, r := range rs {
		if r != nil && r.Interrupted {
			out.Interrupted = true
		}
	}
	return &out
}
