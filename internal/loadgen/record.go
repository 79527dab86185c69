package loadgen

import (
	"context"
	"maps"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram range and precision: 1 µs to 1 hour, 3 significant digits.
const (
	histLowest  = 1
	histHighest = int64(time.Hour / time.Microsecond)
	histSigFigs = 3
)

func newHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(histLowest, histHighest, histSigFigs)
}

func recordDur(h *hdrhistogram.Histogram, d time.Duration) {
	us := max(d.Microseconds(), histLowest)
	h.RecordValue(min(us, histHighest)) // in range: cannot fail
}

// Latency summarizes a histogram, in milliseconds.
type Latency struct {
	Count int64   `json:"count"`
	Avg   float64 `json:"avg_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

func summarize(h *hdrhistogram.Histogram) Latency {
	if h == nil || h.TotalCount() == 0 {
		return Latency{}
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Latency{
		Count: h.TotalCount(),
		Avg:   math.Round(h.Mean()) / 1000,
		P50:   ms(h.ValueAtQuantile(50)),
		P90:   ms(h.ValueAtQuantile(90)),
		P99:   ms(h.ValueAtQuantile(99)),
		Max:   ms(h.Max()),
	}
}

// shard is one slice of a step's measurements. HDR histograms are not safe
// for concurrent use: each worker records into its own shard (worker w into
// shard w mod n), and the shards are merged when the step is done. There
// are at most a few shards per CPU, so that 2,000 workers do not hold 2,000
// histograms; below that, every worker has a shard of its own.
type shard struct {
	mu          sync.Mutex
	lat, uncorr *hdrhistogram.Histogram
	phases      map[string]*hdrhistogram.Histogram
	errors      map[string]int64
	ok, failed  int64
	first, last time.Time // earliest start, latest end
	lastSent    time.Time // latest actual start
}

// recorder collects one step's measurements.
type recorder struct {
	shards []shard
	open   bool // keep the uncorrected latency too
}

func maxShards() int { return 4 * runtime.GOMAXPROCS(0) }

func newRecorder(workers int, open bool) *recorder {
	n := min(max(workers, 1), maxShards())
	return &recorder{shards: make([]shard, n), open: open}
}

// sample is one finished transaction.
type sample struct {
	intended, start, end time.Time // intended start is the schedule's, for open models
	err                  error
	phases               []phaseSample
}

func (r *recorder) record(worker int, s sample) {
	sh := &r.shards[worker%len(r.shards)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.lat == nil {
		sh.lat = newHist()
		if r.open {
			sh.uncorr = newHist()
		}
	}
	begin := s.start
	if !s.intended.IsZero() {
		begin = s.intended
	}
	recordDur(sh.lat, s.end.Sub(begin))
	if sh.uncorr != nil {
		recordDur(sh.uncorr, s.end.Sub(s.start))
	}
	for _, p := range s.phases {
		h := sh.phases[p.name]
		if h == nil {
			if sh.phases == nil {
				sh.phases = map[string]*hdrhistogram.Histogram{}
			}
			h = newHist()
			sh.phases[p.name] = h
		}
		recordDur(h, p.d)
	}
	if s.err != nil {
		if sh.errors == nil {
			sh.errors = map[string]int64{}
		}
		sh.errors[KindOf(s.err)]++
		sh.failed++
	} else {
		sh.ok++
	}
	if sh.first.IsZero() || begin.Before(sh.first) {
		sh.first = begin
	}
	if s.end.After(sh.last) {
		sh.last = s.end
	}
	if s.start.After(sh.lastSent) {
		sh.lastSent = s.start
	}
}

// merged is a recorder's shards merged.
type merged struct {
	lat, uncorr Latency
	phases      map[string]Latency
	errors      map[string]int64
	ok, failed  int64
	first, last time.Time
	lastSent    time.Time
}

func (r *recorder) merge() merged {
	lat, uncorr := newHist(), newHist()
	phases := map[string]*hdrhistogram.Histogram{}
	m := merged{errors: map[string]int64{}}
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		if sh.lat != nil {
			lat.Merge(sh.lat)
		}
		if sh.uncorr != nil {
			uncorr.Merge(sh.uncorr)
		}
		for name, h := range sh.phases {
			if phases[name] == nil {
				phases[name] = newHist()
			}
			phases[name].Merge(h)
		}
		for k, n := range sh.errors {
			m.errors[k] += n
		}
		m.ok += sh.ok
		m.failed += sh.failed
		if !sh.first.IsZero() && (m.first.IsZero() || sh.first.Before(m.first)) {
			m.first = sh.first
		}
		if sh.last.After(m.last) {
			m.last = sh.last
		}
		if sh.lastSent.After(m.lastSent) {
			m.lastSent = sh.lastSent
		}
		sh.mu.Unlock()
	}
	m.lat = summarize(lat)
	if r.open {
		m.uncorr = summarize(uncorr)
	}
	if len(phases) > 0 {
		m.phases = map[string]Latency{}
		for _, name := range slices.Sorted(maps.Keys(phases)) {
			m.phases[name] = summarize(phases[name])
		}
	}
	return m
}

// Phases: a Target that performs several requests per transaction (log on,
// then launch) may time each one; the step reports each phase's latency
// beside the transaction's.

type phaseSample struct {
	name string
	d    time.Duration
}

type phaseKey struct{}

// phaseLog collects one transaction's phases. A transaction runs on one
// goroutine at a time, but a Target may hand work to others: lock anyway.
type phaseLog struct {
	mu sync.Mutex
	s  []phaseSample
}

func withPhases(ctx context.Context) (context.Context, *phaseLog) {
	p := &phaseLog{}
	return context.WithValue(ctx, phaseKey{}, p), p
}

// ObservePhase records that the named phase of the current transaction
// took d. It does nothing outside a transaction run by an executor.
func ObservePhase(ctx context.Context, name string, d time.Duration) {
	if p, ok := ctx.Value(phaseKey{}).(*phaseLog); ok {
		p.mu.Lock()
		p.s = append(p.s, phaseSample{name, d})
		p.mu.Unlock()
	}
}

func (p *phaseLog) samples() []phaseSample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.s
}
