package loadgen

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/usher-vdi/usher/internal/memnet"
)

// delayServer answers every request after delay(n), n counting requests
// from 0, and remembers when each arrived. It serves on an in-memory
// network, for a test in a synctest bubble: the delays, and so what the
// executors measure, are exact on the bubble's clock.
type delayServer struct {
	*httptest.Server
	net      *memnet.Network
	n        atomic.Int64
	mu       sync.Mutex
	arrivals []time.Time
}

func newDelayServer(t *testing.T, delay func(n int64) time.Duration) *delayServer {
	t.Helper()
	s := &delayServer{net: memnet.New()}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.n.Add(1) - 1
		s.mu.Lock()
		s.arrivals = append(s.arrivals, time.Now())
		s.mu.Unlock()
		if d := delay(n); d > 0 {
			time.Sleep(d) // the target's latency, on the bubble's clock
		}
		w.Write([]byte("ok"))
	}))
	ln, err := s.net.Listen("target.test:80")
	if err != nil {
		t.Fatal(err)
	}
	s.Listener.Close()
	s.Listener = ln
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// get returns a GET of the server by a NewClient that dials the in-memory
// network.
func (s *delayServer) get(t *testing.T) *Request {
	c := NewClient(100)
	tr := c.Transport.(*http.Transport)
	tr.DialContext = s.net.DialContext
	t.Cleanup(tr.CloseIdleConnections)
	return &Request{Client: c, URL: s.URL}
}

func constant(d time.Duration) func(int64) time.Duration {
	return func(int64) time.Duration { return d }
}

func within(t *testing.T, what string, got, lo, hi float64) {
	t.Helper()
	if got < lo || got > hi {
		t.Errorf("%s = %.1f, want %.0f..%.0f", what, got, lo, hi)
	}
}

func TestClosedModelThroughput(t *testing.T) {
	t.Run("stepped", func(t *testing.T) { synctest.Test(t, testClosedModelStepped) })
	t.Run("fixed work", func(t *testing.T) { synctest.Test(t, testClosedModelFixedWork) })
}

func testClosedModelStepped(t *testing.T) {
	srv := newDelayServer(t, constant(10*time.Millisecond))
	{
		res, err := Stepped{Start: 10, Step: 10, Max: 10, StepDuration: 1500 * time.Millisecond, Warmup: 300 * time.Millisecond}.
			Run(context.Background(), srv.get(t), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Steps) != 1 {
			t.Fatalf("%d steps, want 1", len(res.Steps))
		}
		s := res.Steps[0]
		within(t, "transactions/s of a 10 ms server at concurrency 10", s.TPS, 600, 1100)
		within(t, "average latency (ms)", s.Latency.Avg, 9.5, 100)
		if s.Errors != 0 || s.Excluded == 0 {
			t.Errorf("errors %d, excluded %d; want 0 and the warm-up's", s.Errors, s.Excluded)
		}
	}
}

func testClosedModelFixedWork(t *testing.T) {
	srv := newDelayServer(t, constant(10*time.Millisecond))
	{
		res, err := FixedWork{Concurrency: []int{5, 10}, Requests: 400}.Run(context.Background(), srv.get(t), Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []float64{500, 1000} {
			s := res.Steps[i]
			if s.Requests != 400 || s.Incomplete {
				t.Errorf("step %d: %d requests (incomplete %v), want 400", i+1, s.Requests, s.Incomplete)
			}
			within(t, "transactions/s", s.TPS, want*0.6, want*1.1)
			if s.TimeToFinish <= 0 || s.TimeToFinish != s.Window {
				t.Errorf("time to finish %v, window %v", s.TimeToFinish, s.Window)
			}
		}
	}
}

func TestFixedWorkNumbersTransactionsAcrossSteps(t *testing.T) {
	var mu sync.Mutex
	var seen []int64
	target := TargetFunc(func(ctx context.Context, i int64) error {
		mu.Lock()
		seen = append(seen, i)
		mu.Unlock()
		return nil
	})
	var before []int
	_, err := FixedWork{Concurrency: []int{2, 3}, Requests: 5, Warmup: 1,
		Before: func(_ context.Context, step int) error { before = append(before, step); return nil }}.
		Run(context.Background(), target, Options{})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(seen)
	if want := []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}; !slices.Equal(seen, want) {
		t.Errorf("transactions %v, want %v", seen, want)
	}
	if !slices.Equal(before, []int{0, 1}) {
		t.Errorf("before hooks %v", before)
	}
}

// A server that stalls once for 500 ms while one worker keeps a 100/s
// schedule: the requests queued behind the stall waited, and only the
// corrected latency shows it (coordinated omission).
func TestOpenModelCorrectsForCoordinatedOmission(t *testing.T) {
	synctest.Test(t, testOpenModelCorrectsForCoordinatedOmission)
}

func testOpenModelCorrectsForCoordinatedOmission(t *testing.T) {
	srv := newDelayServer(t, func(n int64) time.Duration {
		if n == 20 {
			return 500 * time.Millisecond
		}
		return 0
	})
	res, err := Rate{From: 100, To: 100, StepDuration: 2 * time.Second, Workers: 1, Policy: Queue}.
		Run(context.Background(), srv.get(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Steps[0]
	if s.Uncorrected == nil {
		t.Fatal("no uncorrected latency")
	}
	if s.Requests != 200 || s.Dropped != 0 || s.Unsent != 0 {
		t.Errorf("requests %d dropped %d unsent %d, want 200 0 0", s.Requests, s.Dropped, s.Unsent)
	}
	if s.Latency.P90 < 100 {
		t.Errorf("corrected p90 %.1f ms: the stall's queue is missing", s.Latency.P90)
	}
	if s.Uncorrected.P90 > 50 {
		t.Errorf("uncorrected p90 %.1f ms: it should show only the one stalled request", s.Uncorrected.P90)
	}
	if s.Uncorrected.Max < 450 || s.Latency.Max < 450 {
		t.Errorf("max %.1f (uncorrected %.1f), want the 500 ms stall in both", s.Latency.Max, s.Uncorrected.Max)
	}
}

func TestOpenModelDropsAndCounts(t *testing.T) {
	synctest.Test(t, testOpenModelDropsAndCounts)
}

func testOpenModelDropsAndCounts(t *testing.T) {
	srv := newDelayServer(t, constant(50*time.Millisecond))
	res, err := Rate{From: 100, To: 100, StepDuration: time.Second, Workers: 1, Policy: Drop}.
		Run(context.Background(), srv.get(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Steps[0]
	if s.Dropped == 0 {
		t.Fatalf("nothing dropped: %+v", s)
	}
	if got := s.Requests + s.Dropped + s.Unsent + s.Excluded; got != 100 {
		t.Errorf("requests %d + dropped %d + unsent %d + excluded %d = %d, want the 100 scheduled", s.Requests, s.Dropped, s.Unsent, s.Excluded, got)
	}
	if s.Requests > 40 {
		t.Errorf("%d requests sent by one worker to a 50 ms server in 1 s", s.Requests)
	}
}

func TestStormSpreadsStartsEvenly(t *testing.T) {
	t.Run("schedule", func(t *testing.T) {
		g := &schedule{segs: []segment{{dur: time.Second, r0: 40, r1: 40, limit: 40}}}
		for k := range 40 {
			off, _, ok := g.next()
			if want := time.Duration(k) * 25 * time.Millisecond; !ok || (off-want).Abs() > time.Microsecond {
				t.Fatalf("start %d at %v, want %v", k, off, want)
			}
		}
		if _, _, ok := g.next(); ok {
			t.Fatal("more than 40 starts")
		}
	})
	t.Run("run", func(t *testing.T) { synctest.Test(t, testStormRun) })
}

func testStormRun(t *testing.T) {
	{
		srv := newDelayServer(t, constant(time.Millisecond))
		res, err := Storm{Count: 40, Window: 800 * time.Millisecond, Workers: 8}.Run(context.Background(), srv.get(t), Options{})
		if err != nil {
			t.Fatal(err)
		}
		s := res.Steps[0]
		if s.Requests != 40 || s.Errors != 0 || s.Incomplete {
			t.Fatalf("storm: %+v", s)
		}
		within(t, "rate", s.Rate, 50, 50)
		srv.mu.Lock()
		spread := srv.arrivals[len(srv.arrivals)-1].Sub(srv.arrivals[0])
		srv.mu.Unlock()
		// 39 gaps of 20 ms: not all at once, and not later than a late machine would be.
		if spread < 700*time.Millisecond || spread > 3*time.Second {
			t.Errorf("starts spread over %v, want about 780ms", spread)
		}
		if s.TimeToFinish < 0.78 {
			t.Errorf("time to finish %.2fs, less than the window", s.TimeToFinish)
		}
	}
}

func TestRateSchedule(t *testing.T) {
	count := func(r Rate) []int {
		segs, err := r.segments()
		if err != nil {
			t.Fatal(err)
		}
		g := &schedule{segs: segs}
		n := make([]int, len(segs))
		for {
			_, k, ok := g.next()
			if !ok {
				return n
			}
			n[k]++
		}
	}
	if got := count(Rate{From: 10, To: 40, Steps: 4, StepDuration: time.Second}); !slices.Equal(got, []int{10, 20, 30, 40}) {
		t.Errorf("staircase: %v arrivals per step", got)
	}
	got := count(Rate{From: 0, To: 40, Steps: 2, StepDuration: 2 * time.Second, Linear: true})
	if got[0] < 19 || got[0] > 21 || got[1] < 59 || got[1] > 61 {
		t.Errorf("linear ramp 0..40/s over 4 s: %v arrivals per half, want 20 and 60", got)
	}
	if _, err := (Rate{From: 0, To: 0, StepDuration: time.Second}).segments(); err == nil {
		t.Error("a zero rate was accepted")
	}
}

func TestSteppedLevelsAndErrors(t *testing.T) {
	if got := (Stepped{Start: 10, Step: 10, Max: 40}).Concurrencies(); !slices.Equal(got, []int{10, 20, 30, 40}) {
		t.Errorf("levels %v", got)
	}
	for _, s := range []Stepped{
		{Start: 0, Step: 1, Max: 1, StepDuration: time.Second},
		{Start: 2, Step: 1, Max: 1, StepDuration: time.Second},
		{Start: 1, Step: 1, Max: 2},
		{Start: 1, Step: 1, Max: 2, StepDuration: time.Second, Warmup: time.Second},
		{Levels: []int{10, 5}, StepDuration: time.Second},
		{Levels: []int{}, StepDuration: time.Second},
	} {
		if _, err := s.Run(context.Background(), TargetFunc(func(context.Context, int64) error { return nil }), Options{}); err == nil {
			t.Errorf("%+v was accepted", s)
		}
	}
	// Errors by kind, and a transaction timeout.
	target := TargetFunc(func(ctx context.Context, i int64) error {
		switch i % 3 {
		case 0:
			return Errorf(StatusKind(503), "busy")
		case 1:
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	res, err := FixedWork{Concurrency: []int{3}, Requests: 9}.Run(context.Background(), target, Options{Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Steps[0]
	if s.ErrorsByKind["http-503"] != 3 || s.ErrorsByKind[KindTimeout] != 3 || s.OK != 3 {
		t.Errorf("errors %v, ok %d", s.ErrorsByKind, s.OK)
	}
	within(t, "error %", s.ErrorPct, 66, 67)
}

// The targets below take their time on the fake clock of a synctest bubble:
// the runs are exact and take no real time.

func TestInterruptedRunReturnsWhatItMeasured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var n atomic.Int64
		target := TargetFunc(func(ctx context.Context, i int64) error {
			if n.Add(1) == 50 {
				cancel()
			}
			time.Sleep(time.Millisecond) // the target's latency, on the bubble's clock
			return nil
		})
		res, err := Stepped{Start: 2, Step: 2, Max: 4, StepDuration: time.Minute}.Run(ctx, target, Options{})
		if err == nil || res == nil || !res.Interrupted {
			t.Fatalf("err %v, result %+v", err, res)
		}
		if res.Steps[0].Requests < 40 || res.Steps[0].Errors != 0 {
			t.Errorf("step: %+v", res.Steps[0])
		}
	})
}

func TestProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		// The target's latency (the sleep), on the bubble's clock.
		_, err := FixedWork{Concurrency: []int{2}, Requests: 120}.Run(context.Background(),
			TargetFunc(func(context.Context, int64) error { time.Sleep(10 * time.Millisecond); return nil }),
			Options{Progress: func(p Progress) {
				calls.Add(1)
				if p.Steps != 1 || p.Level != "2" {
					t.Errorf("progress %+v", p)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		if calls.Load() == 0 {
			t.Error("no progress in a run of 600 ms")
		}
	})
}
