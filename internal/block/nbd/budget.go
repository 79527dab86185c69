package nbd

import (
	"sync"
	"sync/atomic"
)

// budget is a semaphore of bytes: the memory a connection, or the
// server, may hold for requests in flight.
type budget struct {
	mu    sync.Mutex
	cond  sync.Cond
	limit int64
	used  int64
}

func newBudget(limit int64) *budget {
	b := &budget{limit: limit}
	b.cond.L = &b.mu
	return b
}

// acquire waits until n bytes (at most the limit) are free and takes
// them; it gives up, reporting false, once dead is set and the budget
// woken (wake).
func (b *budget) acquire(n int64, dead *atomic.Bool) bool {
	n = min(n, b.limit)
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.used+n > b.limit {
		if dead.Load() {
			return false
		}
		b.cond.Wait()
	}
	if dead.Load() {
		return false
	}
	b.used += n
	return true
}

// release gives back what acquire(n) took.
func (b *budget) release(n int64) {
	n = min(n, b.limit)
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	b.cond.Broadcast()
}

// wake wakes every waiter, so that those of a dead connection give up.
func (b *budget) wake() {
	b.mu.Lock() // orders the wake after a waiter's check
	b.cond.Broadcast()
	b.mu.Unlock()
}

func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
