package broker

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// Session events (logon, reconnect, disconnect) are applied in batches:
// each batch is one site DB transaction, which on PostgreSQL costs two
// round trips whatever its size (the statuses and sessions read and
// locked in one, written with the commit in the other). While a batch is
// in flight the next one gathers, so that a broker far from its site DB
// pays those two round trips for every event that arrived meanwhile
// rather than for each one: a launch then costs little more than its own
// round trip.
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

// eventQueue gathers session events for the batches.
type eventQueue struct {
	mu      sync.Mutex
	queue   []*pendingEvent
	running int // batches in flight
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

// runEvents applies queued events a batch at a time until none is left.
func (b *Broker) runEvents() {
	q := &b.events
	for {
		q.mu.Lock()
		n := min(len(q.queue), maxEventBatch)
		if n == 0 {
			q.running--
			q.mu.Unlock()
			return
		}
		batch := slices.Clone(q.queue[:n])
		q.queue = slices.Delete(q.queue, 0, n)
		q.mu.Unlock()
		b.applyBatch(batch)
		for _, p := range batch {
			if p.err == nil && p.wasPending {
				b.machines.loggedOn(p.ev.Machine)
			}
			close(p.done)
		}
	}
}

// applyBatch applies a batch of events in one transaction. An event that
// is refused (an unknown session, another machine's, a VDA that does not
// hold the registration) gets its error and leaves the others be; a
// transaction that fails fails them all.
func (b *Broker) applyBatch(batch []*pendingEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
	defer cancel()
	var machines, ids []string
	for _, p := range batch {
		machines, ids = append(machines, p.ev.Machine), append(ids, p.ev.SessionID)
	}
	slices.Sort(machines)
	slices.Sort(ids)
	machines, ids = slices.Compact(machines), slices.Compact(ids)
	err := b.store.Update(ctx, func(tx site.Tx) error {
		for _, p := range batch {
			p.err, p.wasPending = nil, false
		}
		sts, sess, err := tx.MachineSessions(ctx, machines, ids)
		if err != nil {
			return err
		}
		dirtyStatus, dirtySession := map[string]bool{}, map[string]bool{}
		now := b.cfg.Now().UTC()
		for _, p := range batch {
			ev := p.ev
			st, ok := sts[ev.Machine]
			if !ok {
				p.err = site.NotFound(site.KindMachine, ev.Machine)
				continue
			}
			s, ok := sess[ev.SessionID]
			switch {
			case !ok:
				p.err = site.NotFound(site.KindSession, ev.SessionID)
				continue
			case p.byVDA && (st.Registration != site.Registered || st.Credential != ev.Credential):
				p.err = ErrNotRegistered
				continue
			case s.Machine != ev.Machine:
				p.err = site.Errorf(site.EForbidden, "session %q is not on machine %q", ev.SessionID, ev.Machine)
				continue
			case s.State == site.SessionLoggedOff || s.State == p.next:
				continue
			}
			if s.State == site.SessionPending {
				p.wasPending = true
				st.LogonsInProgress = max(0, st.LogonsInProgress-1)
				b.rescore(ev.Machine, &st)
				sts[ev.Machine], dirtyStatus[ev.Machine] = st, true
			}
			s.State, s.UpdatedAt = p.next, now
			if ev.ClientName != "" {
				s.ClientName = ev.ClientName
			}
			sess[ev.SessionID], dirtySession[ev.SessionID] = s, true
		}
		for _, m := range machines {
			if dirtyStatus[m] {
				if err := tx.SetMachineStatus(ctx, m, sts[m]); err != nil {
					return err
				}
			}
		}
		for _, id := range ids {
			if dirtySession[id] {
				if err := tx.Sessions().Update(ctx, sess[id]); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		for _, p := range batch {
			p.err, p.wasPending = err, false
		}
	}
}
