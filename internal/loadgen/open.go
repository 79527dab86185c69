package loadgen

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// Policy says what an open model does with a transaction that falls due
// while every worker is busy.
type Policy int

const (
	// Queue waits for a worker. The wait counts: latency runs from when
	// the schedule said to start (corrected for coordinated omission), and
	// the uncorrected latency, from when it was sent, is reported beside.
	Queue Policy = iota
	// Drop skips the transaction and counts it in the step's Dropped.
	Drop
)

func (p Policy) String() string {
	if p == Drop {
		return "drop"
	}
	return "queue"
}

// ParsePolicy reads "queue" or "drop".
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "queue":
		return Queue, nil
	case "drop":
		return Drop, nil
	}
	return 0, fmt.Errorf("policy %q is not queue or drop", s)
}

// DefaultWorkers is the most transactions an open model has in flight
// when Workers is zero.
const DefaultWorkers = 1000

// Rate is the open model: transactions start at a fixed arrival rate,
// whatever the server does. The rate goes from From to To per second in
// Steps steps of StepDuration: a staircase (each step holds its rate), or
// with Linear a ramp that rises continuously over the whole run and is
// reported per step. From = To is a constant rate. Workers bounds the
// transactions in flight; Policy says what happens past it.
type Rate struct {
	From, To         float64
	Steps            int
	StepDuration     time.Duration
	Linear           bool
	Warmup, Cooldown time.Duration
	Workers          int
	Policy           Policy
}

func (r Rate) String() string {
	shape := "staircase"
	if r.Linear {
		shape = "linear ramp"
	}
	if r.From == r.To {
		shape = "constant"
	}
	return fmt.Sprintf("open model, %s from %s/s to %s/s in %d steps of %s, at most %d in flight, %s when behind (warm-up %s, cool-down %s)",
		shape, fmtFloat(r.From), fmtFloat(r.To), max(r.Steps, 1), r.StepDuration, r.workers(), r.Policy, r.Warmup, r.Cooldown)
}

func (r Rate) workers() int {
	if r.Workers > 0 {
		return r.Workers
	}
	return DefaultWorkers
}

// segments returns the schedule of each step.
func (r Rate) segments() ([]segment, error) {
	n := max(r.Steps, 1)
	switch {
	case r.From < 0 || r.To < 0 || r.From == 0 && r.To == 0 || math.IsInf(r.From+r.To, 0) || math.IsNaN(r.From+r.To):
		return nil, fmt.Errorf("arrival rates must be positive, not %v and %v", r.From, r.To)
	case r.Warmup < 0 || r.Cooldown < 0:
		return nil, fmt.Errorf("warm-up and cool-down cannot be negative")
	case r.Warmup+r.Cooldown >= r.StepDuration:
		return nil, fmt.Errorf("warm-up %s and cool-down %s leave nothing of a %s step to measure", r.Warmup, r.Cooldown, r.StepDuration)
	}
	if err := positive("step duration", r.StepDuration); err != nil {
		return nil, err
	}
	segs := make([]segment, n)
	for k := range segs {
		var r0, r1 float64
		if r.Linear {
			r0 = r.From + (r.To-r.From)*float64(k)/float64(n)
			r1 = r.From + (r.To-r.From)*float64(k+1)/float64(n)
		} else {
			r0 = r.From
			if n > 1 {
				r0 += (r.To - r.From) * float64(k) / float64(n-1)
			}
			r1 = r0
		}
		segs[k] = segment{dur: r.StepDuration, r0: r0, r1: r1, warmup: r.Warmup, cooldown: r.Cooldown}
	}
	return segs, nil
}

// Validate reports whether the plan can run.
func (r Rate) Validate() error {
	_, err := r.segments()
	return err
}

// Run implements Executor.
func (r Rate) Run(ctx context.Context, t Target, o Options) (*Result, error) {
	segs, err := r.segments()
	if err != nil {
		return nil, err
	}
	return runOpen(ctx, t, o, "rate", r.String(), segs, r.workers(), r.Policy, false)
}

// Storm is Login VSI's logon storm: Count transactions started evenly over
// Window, one every Window/Count, whatever the server does, with at most
// Workers in flight and Policy past that. All of them are measured, and
// the step reports the time from the first start to the last completion
// against Window, the theoretical minimum.
type Storm struct {
	Count   int
	Window  time.Duration
	Workers int
	Policy  Policy
	// Timeout bounds the storm beyond its window (default one hour).
	Timeout time.Duration
}

func (s Storm) String() string {
	w := s.Workers
	if w <= 0 {
		w = DefaultWorkers
	}
	return fmt.Sprintf("storm of %d transactions spread evenly over %s (%s/s), at most %d in flight, %s when behind",
		s.Count, s.Window, fmtFloat(float64(s.Count)/s.Window.Seconds()), w, s.Policy)
}

// Validate reports whether the plan can run.
func (s Storm) Validate() error {
	if s.Count < 1 {
		return fmt.Errorf("a storm needs at least one transaction, not %d", s.Count)
	}
	return positive("storm window", s.Window)
}

// Run implements Executor.
func (s Storm) Run(ctx context.Context, t Target, o Options) (*Result, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	rate := float64(s.Count) / s.Window.Seconds()
	w := s.Workers
	if w <= 0 {
		w = DefaultWorkers
	}
	grace := s.Timeout
	if grace <= 0 {
		grace = DefaultStepTimeout
	}
	seg := segment{dur: s.Window, r0: rate, r1: rate, limit: int64(s.Count), grace: grace}
	return runOpen(ctx, t, o, "storm", s.String(), []segment{seg}, w, s.Policy, true)
}

// segment is one step of an open schedule: arrivals at a rate going
// linearly from r0 to r1 over dur, at most limit of them (0: no limit).
type segment struct {
	dur              time.Duration
	r0, r1           float64
	warmup, cooldown time.Duration
	limit            int64
	grace            time.Duration // how long past dur the step may take (default: the transaction timeout)
}

// schedule yields the arrival times of a list of segments.
type schedule struct {
	segs   []segment
	k      int           // current segment
	origin time.Duration // its start, from the run's start
	base   float64       // arrivals due before it (fractional)
	n      int64         // arrivals emitted in it
	i      int64         // arrivals emitted in all
}

// at returns the offset within seg of arrival m (counted from the
// segment's start, fractional), or false if it never comes.
func (g segment) at(m float64) (time.Duration, bool) {
	a := (g.r1 - g.r0) / g.dur.Seconds()
	var t float64
	if math.Abs(a) < 1e-12 {
		if g.r0 <= 0 {
			return 0, false
		}
		t = m / g.r0
	} else {
		disc := g.r0*g.r0 + 2*a*m
		if disc < 0 {
			return 0, false
		}
		t = (-g.r0 + math.Sqrt(disc)) / a
	}
	if t < 0 || math.IsNaN(t) {
		return 0, false
	}
	return time.Duration(t * float64(time.Second)), true
}

// next returns the next arrival: its offset from the run's start and its
// segment; false when the schedule is over.
func (s *schedule) next() (time.Duration, int, bool) {
	for s.k < len(s.segs) {
		g := s.segs[s.k]
		if g.limit == 0 || s.n < g.limit {
			if off, ok := g.at(float64(s.i) - s.base); ok && off < g.dur {
				s.n++
				s.i++
				return s.origin + off, s.k, true
			}
		}
		s.base += (g.r0 + g.r1) / 2 * g.dur.Seconds()
		s.origin += g.dur
		s.k++
		s.n = 0
	}
	return 0, 0, false
}

type job struct {
	st  *stepState
	i   int64
	due time.Time
}

func runOpen(ctx context.Context, t Target, o Options, executor, plan string, segs []segment, workers int, policy Policy, storm bool) (*Result, error) {
	r := newRun(t, o, len(segs))
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopProgress := make(chan struct{})
	go r.progress(stopProgress)
	defer close(stopProgress)

	start := r.started
	states := make([]*stepState, len(segs))
	unsent := make([]int64, len(segs))
	dropped := make([]int64, len(segs))
	var total time.Duration
	for k, g := range segs {
		st := newStepState(k, Step{Rate: (g.r0 + g.r1) / 2}, newRecorder(workers, true))
		st.from, st.until = start.Add(total+g.warmup), start.Add(total+g.dur-g.cooldown)
		states[k] = st
		total += g.dur
	}
	grace := segs[len(segs)-1].grace
	if grace <= 0 {
		grace = r.opts.timeout()
	}
	// The dispatcher gives up at the plan's end plus grace: what is still
	// due then is counted unsent.
	dispatchCtx, stopDispatch := context.WithDeadline(runCtx, start.Add(total+grace))
	defer stopDispatch()

	jobs := make(chan job)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				r.do(runCtx, j.st, w, j.i, j.due)
			}
		}()
	}

	sched := &schedule{segs: segs}
	cur := -1
	for {
		off, k, ok := sched.next()
		if !ok {
			break
		}
		if k != cur {
			if cur >= 0 {
				states[cur].seal()
			}
			cur = k
			r.cur.Store(states[k])
			r.log.Debug("step", "step", k+1, "rate", states[k].step.Rate)
		}
		due := start.Add(off)
		if !sleep(dispatchCtx, time.Until(due)) {
			unsent[k]++
			break
		}
		st := states[k]
		st.enter() // never sealed yet: only the dispatcher seals
		j := job{st: st, i: sched.i - 1, due: due}
		if policy == Drop {
			select {
			case jobs <- j:
			default:
				st.leave()
				dropped[k]++
			}
			continue
		}
		select {
		case jobs <- j:
		case <-dispatchCtx.Done():
			st.leave()
			unsent[k]++
		}
		if dispatchCtx.Err() != nil {
			break
		}
	}
	// Count what the schedule still held.
	for {
		_, k, ok := sched.next()
		if !ok {
			break
		}
		unsent[k]++
	}
	close(jobs)
	if ctx.Err() != nil {
		cancel()
	}
	wg.Wait()
	for k, st := range states {
		st.step.Dropped, st.step.Unsent = dropped[k], unsent[k]
	}
	return r.finish(ctx, executor, Open, plan, states, func(st *stepState) time.Duration {
		if storm {
			d := st.m.last.Sub(start)
			st.step.TimeToFinish = d.Seconds()
			st.step.Incomplete = st.step.Unsent > 0
			return d
		}
		// The window, stretched when sends fell behind the schedule.
		return max(st.until.Sub(st.from), st.m.lastSent.Sub(st.from))
	})
}
