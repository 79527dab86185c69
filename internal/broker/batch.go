package broker

import (
	"context"
	"sync"
)

// Batches of site DB writes that come from many VDAs at once (session
// reports, heartbeats) go as one site DB call each: on PostgreSQL one
// round trip whatever the batch's size, holding the rows it writes only
// while the database writes them. While a batch is in flight the next one
// gathers, so that a broker far from its site DB pays one round trip for
// every write that arrived meanwhile rather than for each.
const (
	// maxBatch bounds the items of one batch.
	maxBatch = 256
	// batchers is how many batches of a kind may be in flight at once.
	batchers = 2
)

// batcher gathers items into batches for apply. Items of one key (a
// session, a machine) are applied in the order they were added: a batch
// holds one item of a key at most, and none of a key in a batch in
// flight. The zero value is not ready: set key and apply.
type batcher[T any] struct {
	key   func(T) string
	apply func([]T) // sets each item's outcome

	mu       sync.Mutex
	queue    []job[T]
	running  int             // batchers running
	inFlight map[string]bool // keys of the batches in flight
}

type job[T any] struct {
	item T
	done chan struct{}
}

// do adds item to the next batch and waits until its batch was applied.
// The batch runs to its end whatever ctx does; ctx only stops the wait.
func (b *batcher[T]) do(ctx context.Context, item T) error {
	j := job[T]{item: item, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, j)
	start := b.running < batchers
	if start {
		b.running++
	}
	b.mu.Unlock()
	if start {
		go b.run()
	}
	select {
	case <-j.done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// run applies queued items a batch at a time until none is left that it
// may take. It stops with items left only when their keys are in another
// batcher's batch in flight: that batcher takes them next.
func (b *batcher[T]) run() {
	for {
		b.mu.Lock()
		var batch []job[T]
		batch, b.queue = b.next(b.queue)
		if len(batch) == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		if b.inFlight == nil {
			b.inFlight = map[string]bool{}
		}
		items := make([]T, len(batch))
		for i, j := range batch {
			items[i] = j.item
			b.inFlight[b.key(j.item)] = true
		}
		b.mu.Unlock()
		b.apply(items)
		b.mu.Lock()
		for _, it := range items {
			delete(b.inFlight, b.key(it))
		}
		b.mu.Unlock()
		for _, j := range batch {
			close(j.done)
		}
	}
}

// next takes the next batch from the queue: up to maxBatch items, the
// first of each key not in flight; a key's later items, and every item of
// a key in flight, stay queued in their order for a later batch. The
// caller holds b.mu.
func (b *batcher[T]) next(queue []job[T]) (batch, rest []job[T]) {
	taken := make(map[string]bool, min(len(queue), maxBatch))
	held := map[string]bool{} // keys with an item left queued
	rest = queue[:0:0]
	for _, j := range queue {
		k := b.key(j.item)
		if len(batch) == maxBatch || taken[k] || held[k] || b.inFlight[k] {
			held[k] = true
			rest = append(rest, j)
			continue
		}
		taken[k] = true
		batch = append(batch, j)
	}
	return batch, rest
}
