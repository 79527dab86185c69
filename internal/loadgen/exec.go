package loadgen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// An Executor runs a Target under a load model.
type Executor interface {
	// Run drives t until the plan is done and returns what it measured.
	// When ctx is cancelled it stops starting transactions, cancels those
	// in flight and returns the partial Result (Interrupted) with ctx's
	// error. It returns an error without a Result when the plan is invalid.
	Run(ctx context.Context, t Target, o Options) (*Result, error)
	// Validate reports whether the plan can run, as Run would.
	Validate() error
	// String describes the plan: "stepped 10+10/1m0s..100".
	String() string
}

// DefaultTimeout bounds each transaction when Options.Timeout is zero.
const DefaultTimeout = 60 * time.Second

// Options apply to every executor.
type Options struct {
	// Timeout bounds each transaction (default DefaultTimeout); a
	// transaction past it fails with kind timeout.
	Timeout time.Duration
	// Progress, when set, is called twice a second from another goroutine
	// with the run's live figures.
	Progress func(Progress)
	Logger   *slog.Logger
}

func (o Options) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return DefaultTimeout
}

func (o Options) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// Progress is a run's live state.
type Progress struct {
	Step, Steps int
	Level       string // the step's Level
	Elapsed     time.Duration
	// Done and Errors count the step's finished transactions, measured or
	// not; InFlight is the run's.
	Done, Errors, InFlight int64
	TPS                    float64 // over the last interval
}

// stepState is a step while it runs. Transactions enter it when they
// start and leave it when recorded; once the step is sealed no transaction
// may enter, and when the last one has left its shards are merged.
type stepState struct {
	index       int
	level       string // step.Level(), for progress
	step        Step   // level and counters; filled at the end
	rec         *recorder
	from, until time.Time // measured window (closed stepped: of start times)

	done, errs, excluded atomic.Int64

	mu       sync.Mutex
	sealed   bool
	inflight sync.WaitGroup
	merged   chan struct{} // closed once m is set
	m        merged
}

func newStepState(index int, step Step, rec *recorder) *stepState {
	return &stepState{index: index, level: step.Level(), step: step, rec: rec, merged: make(chan struct{})}
}

func (s *stepState) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sealed {
		return false
	}
	s.inflight.Add(1)
	return true
}

func (s *stepState) leave() { s.inflight.Done() }

// seal stops new transactions from entering and merges the shards once
// those in flight have left, in the background.
func (s *stepState) seal() {
	s.mu.Lock()
	if s.sealed {
		s.mu.Unlock()
		return
	}
	s.sealed = true
	s.mu.Unlock()
	go func() {
		s.inflight.Wait()
		s.m = s.rec.merge()
		s.rec = nil // the histograms can go
		close(s.merged)
	}()
}

func (s *stepState) measured(start time.Time) bool {
	return !start.Before(s.from) && start.Before(s.until)
}

// run is what every executor shares: the live counters, the progress line
// and the way one transaction is run and recorded.
type run struct {
	target   Target
	opts     Options
	log      *slog.Logger
	started  time.Time
	inflight atomic.Int64
	cur      atomic.Pointer[stepState]
	steps    int
}

func newRun(t Target, o Options, steps int) *run {
	return &run{target: t, opts: o, log: o.logger(), started: time.Now(), steps: steps}
}

// do runs transaction i in step st on behalf of worker w, recording it if
// its start (or intended start) falls in st's measured window. The caller
// has entered st; do leaves it.
func (r *run) do(ctx context.Context, st *stepState, w int, i int64, intended time.Time) {
	defer st.leave()
	r.inflight.Add(1)
	tctx, cancel := context.WithTimeout(ctx, r.opts.timeout())
	tctx, phases := withPhases(tctx)
	start := time.Now()
	err := r.target.Do(tctx, i)
	end := time.Now()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		err = &Error{Kind: KindCanceled, Err: err}
	case errors.Is(tctx.Err(), context.DeadlineExceeded):
		err = &Error{Kind: KindTimeout, Err: err} // whatever form the timeout took
	}
	cancel()
	r.inflight.Add(-1)
	st.done.Add(1)
	if err != nil {
		st.errs.Add(1)
	}
	at := start
	if !intended.IsZero() {
		at = intended
	}
	// Warm-up and cool-down are not measured, nor are transactions cut
	// short by a stopped run: that is no fault of the target's.
	if !st.measured(at) || ctx.Err() != nil {
		st.excluded.Add(1)
		return
	}
	st.rec.record(w, sample{intended: intended, start: start, end: end, err: err, phases: phases.samples()})
}

// progress calls opts.Progress twice a second until stop is closed.
func (r *run) progress(stop <-chan struct{}) {
	if r.opts.Progress == nil {
		return
	}
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	var last *stepState
	var lastDone int64
	lastAt := time.Now()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			st := r.cur.Load()
			if st == nil {
				continue
			}
			done := st.done.Load()
			if st != last {
				last, lastDone = st, 0
			}
			tps := float64(done-lastDone) / now.Sub(lastAt).Seconds()
			lastDone, lastAt = done, now
			r.opts.Progress(Progress{Step: st.index + 1, Steps: r.steps, Level: st.level, Elapsed: now.Sub(r.started),
				Done: done, Errors: st.errs.Load(), InFlight: r.inflight.Load(), TPS: tps})
		}
	}
}

// finish waits for every step's merge and builds the Result; window gives
// each step's measured time from its merged figures.
func (r *run) finish(ctx context.Context, executor, model, plan string, states []*stepState, window func(*stepState) time.Duration) (*Result, error) {
	res := &Result{Executor: executor, Model: model, Plan: plan, Started: r.started}
	for _, st := range states {
		st.seal()
		<-st.merged
		w := window(st) // may set figures of st.step
		s := st.step
		s.Step = st.index + 1
		s.Excluded = st.excluded.Load()
		s.fill(st.m, w)
		res.Steps = append(res.Steps, s)
	}
	res.Elapsed = time.Since(r.started).Seconds()
	if err := ctx.Err(); err != nil {
		res.Interrupted = true
		return res, err
	}
	return res, nil
}

// sleep waits d or until ctx is done, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func positive(name string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%s must be positive, not %s", name, d)
	}
	return nil
}
