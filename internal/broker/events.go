package broker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// Session events (logon, reconnect, disconnect) are applied in batches,
// each one site.SessionChanger call: on PostgreSQL one round trip whatever
// its size, which holds the rows it changes only while the database
// applies it. While a batch is in flight the next one gathers, so that a
// broker far from its site DB pays that round trip for every event that
// arrived meanwhile rather than for each one: a launch then costs little
// more than its own round trip.
const (
	// maxEventBatch bounds the events of one transaction.
	maxEventBatch = 256
	// eventBatchers is how many batches may be in flight at once.
	eventBatchers = 2
	// eventTimeout bounds one batch's transaction.
	eventTimeout = 30 * time.Second
)

// pendingEvent is a session event waiting for its batch.
type pendingEvent struct {
	ev    SessionEvent
	next  site.SessionState
	byVDA bool
	err   error
	// wasPending is set when the event ended the session's logon.
	wasPending bool
	done       chan struct{}
}

// eventQueue gathers session events for the batches. A session's events
// are applied in the order they were queued: a batch holds one event of a
// session at most, and no event of a session in a batch in flight.
type eventQueue struct {
	mu       sync.Mutex
	queue    []*pendingEvent
	running  int             // batchers running
	inFlight map[string]bool // sessions of the batches in flight
}

// applyEvent queues a session's change to next and waits for its batch.
// The batch runs to its end whatever ctx does; ctx only stops the wait.
func (b *Broker) applyEvent(ctx context.Context, ev SessionEvent, next site.SessionState, byVDA bool) error {
	p := &pendingEvent{ev: ev, next: next, byVDA: byVDA, done: make(chan struct{})}
	q := &b.events
	q.mu.Lock()
	q.queue = append(q.queue, p)
	start := q.running < eventBatchers
	if start {
		q.running++
	}
	q.mu.Unlock()
	if start {
		go b.runEvents()
	}
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// runEvents applies queued events a batch at a time until none is left
// that it may take. It stops with events left only when their sessions
// are in another batcher's batch in flight: that batcher takes them next.
func (b *Broker) runEvents() {
	q := &b.events
	for {
		q.mu.Lock()
		var batch []*pendingEvent
		batch, q.queue = nextBatch(q.queue, q.inFlight)
		if len(batch) == 0 {
			q.running--
			q.mu.Unlock()
			return
		}
		if q.inFlight == nil {
			q.inFlight = map[string]bool{}
		}
		for _, p := range batch {
			q.inFlight[p.ev.SessionID] = true
		}
		q.mu.Unlock()
		b.applyBatch(batch)
		q.mu.Lock()
		for _, p := range batch {
			delete(q.inFlight, p.ev.SessionID)
		}
		q.mu.Unlock()
		for _, p := range batch {
			if p.err == nil && p.wasPending {
				b.machines.loggedOn(p.ev.Machine)
			}
			close(p.done)
		}
	}
}

// nextBatch takes the next batch from the queue: up to maxEventBatch
// events, the first of each session not in flight; a session's later
// events, and every event of a session in flight, stay queued in their
// order for a later batch.
func nextBatch(queue []*pendingEvent, inFlight map[string]bool) (batch, rest []*pendingEvent) {
	taken := make(map[string]bool, min(len(queue), maxEventBatch))
	held := map[string]bool{} // sessions with an event left queued
	rest = queue[:0:0]
	for _, p := range queue {
		id := p.ev.SessionID
		if len(batch) == maxEventBatch || taken[id] || held[id] || inFlight[id] {
			held[id] = true
			rest = append(rest, p)
			continue
		}
		taken[id] = true
		batch = append(batch, p)
	}
	return batch, rest
}

// applyBatch applies a batch of events (no session twice) with one
// ChangeSessions. An event that is refused (an unknown session, another
// machine's, a VDA that does not hold the registration) gets its error
// and leaves the others be; a batch that fails fails them all.
func (b *Broker) applyBatch(batch []*pendingEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
	defer cancel()
	now := b.cfg.Now().UTC()
	changes := make([]site.SessionChange, len(batch))
	for i, p := range batch {
		changes[i] = site.SessionChange{Machine: p.ev.Machine, Session: p.ev.SessionID, State: p.next, ClientName: p.ev.ClientName,
			CheckCredential: p.byVDA, Credential: p.ev.Credential, At: now}
	}
	verdicts, err := b.store.ChangeSessions(ctx, changes)
	for i, p := range batch {
		if err != nil {
			p.err = err
			continue
		}
		switch verdicts[i] {
		case site.VerdictLoggedOn:
			p.wasPending = true
		case site.VerdictChanged, site.VerdictUnchanged:
		case site.VerdictNoMachine:
			p.err = site.NotFound(site.KindMachine, p.ev.Machine)
		case site.VerdictNoSession:
			p.err = site.NotFound(site.KindSession, p.ev.SessionID)
		case site.VerdictNotRegistered:
			p.err = ErrNotRegistered
		case site.VerdictOtherMachine:
			p.err = site.Errorf(site.EForbidden, "session %q is not on machine %q", p.ev.SessionID, p.ev.Machine)
		default:
			p.err = fmt.Errorf("session %q: the site DB's verdict %q", p.ev.SessionID, verdicts[i])
		}
	}
}
