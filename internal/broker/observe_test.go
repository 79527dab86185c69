package broker_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
)

// recorder is an Observer that records what it is told.
type recorder struct {
	mu                      sync.Mutex
	started, finished, done []string
}

func (r *recorder) TransactionStarted(op string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = append(r.started, op)
}

func (r *recorder) TransactionFinished(op string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finished = append(r.finished, op)
}

func (r *recorder) TransactionDone(op string, _ time.Duration, _ error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = append(r.done, op)
}

func (r *recorder) Refused()     {}
func (r *recorder) Reconnected() {}

func (r *recorder) TimerLogoff(string) {}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started, r.finished, r.done = nil, nil, nil
}

func (r *recorder) check(t *testing.T, started, done string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Equal(r.started, []string{started}) || !slices.Equal(r.finished, []string{started}) || !slices.Equal(r.done, []string{done}) {
		t.Fatalf("started %q, finished %q, done %q; want [%s], [%s], [%s]", r.started, r.finished, r.done, started, started, done)
	}
}

// TestObserverSeesEveryOperationInFlight checks that logins and
// reconnections are counted among the transactions in flight, under
// their own operation, as launches and enumerations are.
func TestObserverSeesEveryOperationInFlight(t *testing.T) {
	rec := &recorder{}
	h := newHarness(t, 3, 250, func(c *broker.Config) { c.Observer = rec })
	ctx := context.Background()
	rec.reset() // registrations

	t.Run("login", func(t *testing.T) {
		defer rec.reset()
		done := h.b.Begin(broker.OpLogin)
		done(nil)
		rec.check(t, broker.OpLogin, broker.OpLogin)
	})
	var first *broker.Launch
	t.Run("launch", func(t *testing.T) {
		defer rec.reset()
		var err error
		if first, err = h.b.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: "calc"}); err != nil {
			t.Fatal(err)
		}
		rec.check(t, broker.OpLaunch, broker.OpLaunch)
	})
	t.Run("reconnect", func(t *testing.T) {
		defer rec.reset()
		again, err := h.b.Reconnect(ctx, "u0001", first.Session.ID, "")
		if err != nil || !again.Reconnected {
			t.Fatalf("reconnect: %v %+v", err, again)
		}
		rec.check(t, broker.OpReconnect, broker.OpReconnect)
	})
	t.Run("enumerate", func(t *testing.T) {
		defer rec.reset()
		h.b.Resources(ctx, "u0001")
		rec.check(t, broker.OpEnumerate, broker.OpEnumerate)
	})
}
