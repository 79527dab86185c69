package loadgen

import "testing"

func TestMedianSteps(t *testing.T) {
	round := func(interrupted bool, tps ...float64) *Result {
		r := &Result{Executor: "stepped", Interrupted: interrupted}
		for i, v := range tps {
			r.Steps = append(r.Steps, Step{Step: i + 1, Concurrency: 10 * (i + 1), TPS: v, Latency: Latency{P99: v / 10}})
		}
		return r
	}
	got := MedianSteps(round(false, 100, 50), nil, round(false, 300, 40), round(false, 200, 60))
	if len(got.Steps) != 2 {
		t.Fatalf("steps = %d, want 2", len(got.Steps))
	}
	for i, want := range []float64{200, 50} {
		s := got.Steps[i]
		if s.TPS != want || s.Latency.P99 != want/10 {
			t.Errorf("step %d: tps %v p99 %v, want the whole step of the median round (%v)", i, s.TPS, s.Latency.P99, want)
		}
	}
	// An even count takes the lower middle; a short round does not vote
	// for the steps it never reached, and interrupts the whole.
	got = MedianSteps(round(false, 10, 7), round(true, 30), round(false, 20, 9), round(false, 40, 8))
	if got.Steps[0].TPS != 20 || got.Steps[1].TPS != 8 || !got.Interrupted {
		t.Errorf("got %v %v interrupted %v, want 20, 8, true", got.Steps[0].TPS, got.Steps[1].TPS, got.Interrupted)
	}
	if MedianSteps(nil, nil) != nil {
		t.Error("MedianSteps of no result is not nil")
	}
	one := round(false, 5)
	if got := MedianSteps(one); got.Steps[0].TPS != 5 || got == one {
		t.Error("MedianSteps of one round is not a copy of it")
	}
}
