package loadgen

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Stepped is WCAT's closed model: Start virtual clients, Step more every
// StepDuration, up to Max, each client sending its next request as soon as
// the last one returns. Each concurrency level is a step, measured from
// Warmup after it starts to Cooldown before it ends. Levels, when set,
// lists the concurrencies instead of Start, Step and Max (the LHC test's 10,
// 20, 40, 60, 100); they must rise.
type Stepped struct {
	Start, Step, Max int
	Levels           []int
	StepDuration     time.Duration
	Warmup, Cooldown time.Duration
}

func (s Stepped) String() string {
	if s.Levels != nil {
		return fmt.Sprintf("stepped concurrency %v, %s each (warm-up %s, cool-down %s)", s.Levels, s.StepDuration, s.Warmup, s.Cooldown)
	}
	return fmt.Sprintf("stepped concurrency %d, +%d every %s up to %d (warm-up %s, cool-down %s)",
		s.Start, s.Step, s.StepDuration, s.Max, s.Warmup, s.Cooldown)
}

// Concurrencies returns the concurrency of each step.
func (s Stepped) Concurrencies() []int {
	if s.Levels != nil {
		return s.Levels
	}
	var out []int
	for c := s.Start; c <= s.Max; c += s.Step {
		out = append(out, c)
		if s.Step <= 0 {
			break
		}
	}
	return out
}

// Validate reports whether the plan can run.
func (s Stepped) Validate() error {
	if s.Levels != nil {
		for i, c := range s.Levels {
			if c < 1 || i > 0 && c <= s.Levels[i-1] {
				return fmt.Errorf("concurrency levels %v must be positive and rise", s.Levels)
			}
		}
		if len(s.Levels) == 0 {
			return fmt.Errorf("no concurrency levels")
		}
		s.Start, s.Step, s.Max = 1, 1, 1
	}
	switch {
	case s.Start < 1:
		return fmt.Errorf("start concurrency must be at least 1, not %d", s.Start)
	case s.Max < s.Start:
		return fmt.Errorf("maximum concurrency %d is below the start %d", s.Max, s.Start)
	case s.Step < 1 && s.Max > s.Start:
		return fmt.Errorf("concurrency step must be at least 1, not %d", s.Step)
	case s.Warmup < 0 || s.Cooldown < 0:
		return fmt.Errorf("warm-up and cool-down cannot be negative")
	case s.Warmup+s.Cooldown >= s.StepDuration:
		return fmt.Errorf("warm-up %s and cool-down %s leave nothing of a %s step to measure", s.Warmup, s.Cooldown, s.StepDuration)
	}
	return positive("step duration", s.StepDuration)
}

// Run implements Executor.
func (s Stepped) Run(ctx context.Context, t Target, o Options) (*Result, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	levels := s.Concurrencies()
	r := newRun(t, o, len(levels))
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopProgress := make(chan struct{})
	go r.progress(stopProgress)
	defer close(stopProgress)

	var (
		stop    atomic.Bool // no new transactions
		next    atomic.Int64
		wg      sync.WaitGroup
		workers int
		states  []*stepState
	)
	worker := func(w int) {
		defer wg.Done()
		for !stop.Load() && runCtx.Err() == nil {
			st := r.cur.Load()
			if !st.enter() {
				continue // sealed as the next step began: take that one
			}
			r.do(runCtx, st, w, next.Add(1)-1, time.Time{})
		}
	}
	for k, c := range levels {
		begin := time.Now()
		st := newStepState(k, Step{Concurrency: c}, newRecorder(c, false))
		st.from, st.until = begin.Add(s.Warmup), begin.Add(s.StepDuration-s.Cooldown)
		prev := r.cur.Swap(st)
		if prev != nil {
			prev.seal()
		}
		states = append(states, st)
		r.log.Debug("step", "step", k+1, "concurrency", c)
		for ; workers < c; workers++ {
			wg.Add(1)
			go worker(workers)
		}
		if !sleep(ctx, time.Until(begin.Add(s.StepDuration))) {
			break
		}
	}
	stop.Store(true)
	if ctx.Err() != nil {
		cancel()
	}
	wg.Wait()
	return r.finish(ctx, "stepped", Closed, s.String(), states, func(st *stepState) time.Duration {
		until := st.until
		if st.m.last.Before(until) && ctx.Err() != nil {
			until = st.m.last // interrupted: the window ended early
		}
		return max(until.Sub(st.from), 0)
	})
}

// FixedWork is the zones-and-latency test's closed model: Requests transactions at each
// concurrency in turn, reporting the time to finish them. Transactions are
// numbered on across steps, so a Target that maps i to a user gives each
// step fresh users when it has enough of them. Warmup transactions run
// before each step's measured ones and are excluded.
type FixedWork struct {
	Concurrency []int
	Requests    int
	Warmup      int
	// StepTimeout bounds each step (default one hour); work not done by
	// then is abandoned and the step marked incomplete.
	StepTimeout time.Duration
	// Before, when set, runs before each step, untimed: logging off the
	// last step's sessions, say. An error ends the run.
	Before func(ctx context.Context, step int) error
}

// DefaultStepTimeout bounds a fixed-work step or a storm.
const DefaultStepTimeout = time.Hour

func (f FixedWork) String() string {
	return fmt.Sprintf("fixed work: %d transactions at each concurrency of %v", f.Requests, f.Concurrency)
}

// Validate reports whether the plan can run.
func (f FixedWork) Validate() error {
	if len(f.Concurrency) == 0 {
		return fmt.Errorf("fixed work needs at least one concurrency")
	}
	for _, c := range f.Concurrency {
		if c < 1 {
			return fmt.Errorf("concurrency must be at least 1, not %d", c)
		}
	}
	if f.Requests < 1 || f.Warmup < 0 {
		return fmt.Errorf("fixed work needs at least one transaction per step, not %d", f.Requests)
	}
	return nil
}

// Run implements Executor.
func (f FixedWork) Run(ctx context.Context, t Target, o Options) (*Result, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	limit := f.StepTimeout
	if limit <= 0 {
		limit = DefaultStepTimeout
	}
	r := newRun(t, o, len(f.Concurrency))
	stopProgress := make(chan struct{})
	go r.progress(stopProgress)
	defer close(stopProgress)

	var states []*stepState
	var next int64
	for k, c := range f.Concurrency {
		if ctx.Err() != nil {
			break
		}
		if f.Before != nil {
			if err := f.Before(ctx, k); err != nil {
				return nil, fmt.Errorf("before step %d: %w", k+1, err)
			}
		}
		stepCtx, cancel := context.WithTimeout(ctx, limit)
		if f.Warmup > 0 {
			warm := newStepState(k, Step{Concurrency: c}, newRecorder(1, false)) // from = until: nothing measured
			r.cur.Store(warm)
			r.batch(stepCtx, warm, c, next, f.Warmup)
			warm.seal()
			next += int64(f.Warmup)
		}
		st := newStepState(k, Step{Concurrency: c}, newRecorder(c, false))
		st.until = time.Now().Add(100 * 365 * 24 * time.Hour)
		r.cur.Store(st)
		r.log.Debug("step", "step", k+1, "concurrency", c, "transactions", f.Requests)
		r.batch(stepCtx, st, c, next, f.Requests)
		next += int64(f.Requests)
		if stepCtx.Err() != nil && ctx.Err() == nil {
			st.step.Incomplete = true
			r.log.Warn("step ran out of time", "step", k+1, "limit", limit)
		}
		cancel()
		st.seal()
		states = append(states, st)
	}
	return r.finish(ctx, "fixed", Closed, f.String(), states, func(st *stepState) time.Duration {
		d := st.m.last.Sub(st.m.first)
		st.step.TimeToFinish = d.Seconds()
		return d
	})
}

// batch runs transactions base..base+n-1 on c workers.
func (r *run) batch(ctx context.Context, st *stepState, c int, base int64, n int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				k := next.Add(1) - 1
				if k >= int64(n) || !st.enter() {
					return
				}
				r.do(ctx, st, w, base+k, time.Time{})
			}
		}()
	}
	wg.Wait()
}
