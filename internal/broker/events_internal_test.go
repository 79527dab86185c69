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
	b.initBatchers()
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

// TestNextBatch: a batch takes each key's first item, up to the bound,
// skipping keys in flight; what it leaves keeps its order.
func TestNextBatch(t *testing.T) {
	bt := &batcher[string]{key: func(s string) string { return s[:1] }}
	jobs := func(items ...string) (out []job[string]) {
		for _, it := range items {
			out = append(out, job[string]{item: it})
		}
		return out
	}
	items := func(js []job[string]) (out []string) {
		for _, j := range js {
			out = append(out, j.item)
		}
		return out
	}
	bt.inFlight = map[string]bool{"c": true}
	batch, rest := bt.next(jobs("a1", "b1", "a2", "c1", "d1", "b2"))
	if got := items(batch); !slices.Equal(got, []string{"a1", "b1", "d1"}) {
		t.Errorf("batch %v, want a1 b1 d1", got)
	}
	if got := items(rest); !slices.Equal(got, []string{"a2", "c1", "b2"}) {
		t.Errorf("rest %v, want a2 c1 b2", got)
	}
	// At the bound, a key left out keeps its later items out too.
	bt = &batcher[string]{key: func(s string) string { return s }}
	var long []string
	for i := range maxBatch {
		long = append(long, fmt.Sprint("s", i))
	}
	long = append(long, "x", "s0", "x")
	batch, rest = bt.next(jobs(long...))
	if len(batch) != maxBatch || !slices.Equal(items(rest), []string{"x", "s0", "x"}) {
		t.Errorf("at the bound: %d in the batch, rest %v; want %d and x s0 x", len(batch), items(rest), maxBatch)
	}
}
