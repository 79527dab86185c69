package broker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// batchStore records the batches of session changes it gets, holding the
// first until released.
type batchStore struct {
	site.Store // only ChangeSessions is called
	mu         sync.Mutex
	batches    [][]site.SessionChange
	first      chan struct{} // closed once the first batch arrived
	release    chan struct{}
}

func (s *batchStore) ChangeSessions(ctx context.Context, cs []site.SessionChange) ([]site.SessionVerdict, error) {
	s.mu.Lock()
	s.batches = append(s.batches, cs)
	n := len(s.batches)
	s.mu.Unlock()
	if n == 1 {
		close(s.first)
		<-s.release
	}
	out := make([]site.SessionVerdict, len(cs))
	for i := range out {
		out[i] = site.VerdictChanged
	}
	return out, nil
}

// TestSessionEventsKeepTheirOrder: while a batch holding a session's
// logon is in flight, the same session's disconnect waits for it instead
// of going out in a second batch that could commit first; other sessions'
// events go on in a batch of their own.
func TestSessionEventsKeepTheirOrder(t *testing.T) {
	st := &batchStore{first: make(chan struct{}), release: make(chan struct{})}
	b := &Broker{store: st, machines: newTable(time.Now), cfg: Config{Now: time.Now}}
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := b.applyEvent(ctx, SessionEvent{Machine: "m1", SessionID: "s1"}, site.SessionActive, false); err != nil {
			t.Error(err)
		}
	})
	<-st.first // s1's logon is in flight
	wg.Go(func() {
		if err := b.applyEvent(ctx, SessionEvent{Machine: "m1", SessionID: "s1"}, site.SessionDisconnected, false); err != nil {
			t.Error(err)
		}
	})
	done2 := make(chan struct{})
	go func() {
		defer close(done2)
		if err := b.applyEvent(ctx, SessionEvent{Machine: "m2", SessionID: "s2"}, site.SessionActive, false); err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-done2:
	case <-time.After(10 * time.Second):
		t.Fatal("another session's event waited for the batch in flight")
	}
	st.mu.Lock()
	for _, batch := range st.batches[1:] {
		for _, c := range batch {
			if c.Session == "s1" {
				st.mu.Unlock()
				t.Fatal("s1's disconnect went out while its logon was in flight")
			}
		}
	}
	st.mu.Unlock()
	close(st.release)
	wg.Wait()
	st.mu.Lock()
	defer st.mu.Unlock()
	last := st.batches[len(st.batches)-1]
	if len(last) != 1 || last[0].Session != "s1" || last[0].State != site.SessionDisconnected {
		t.Fatalf("batches %v: want s1's disconnect last, alone", st.batches)
	}
}

// TestNextBatch: a batch takes each session's first event, up to the
// bound, skipping sessions in flight; what it leaves keeps its order.
func TestNextBatch(t *testing.T) {
	ev := func(id string) *pendingEvent { return &pendingEvent{ev: SessionEvent{SessionID: id}} }
	ids := func(ps []*pendingEvent) (out []string) {
		for _, p := range ps {
			out = append(out, p.ev.SessionID)
		}
		return out
	}
	queue := []*pendingEvent{ev("a"), ev("b"), ev("a"), ev("c"), ev("d"), ev("b")}
	batch, rest := nextBatch(queue, map[string]bool{"c": true})
	if got := ids(batch); !slices.Equal(got, []string{"a", "b", "d"}) {
		t.Errorf("batch %v, want a b d", got)
	}
	if got := ids(rest); !slices.Equal(got, []string{"a", "c", "b"}) {
		t.Errorf("rest %v, want a c b", got)
	}
	// At the bound, a session left out keeps its later events out too.
	var long []*pendingEvent
	for i := range maxEventBatch {
		long = append(long, ev(fmt.Sprint("s", i)))
	}
	long = append(long, ev("x"), ev("s0"), ev("x"))
	batch, rest = nextBatch(long, nil)
	if len(batch) != maxEventBatch || !slices.Equal(ids(rest), []string{"x", "s0", "x"}) {
		t.Errorf("at the bound: %d in the batch, rest %v; want %d and x s0 x", len(batch), ids(rest), maxEventBatch)
	}
}
