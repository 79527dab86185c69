package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// eventTimeout bounds one batch of session reports or heartbeats.
const eventTimeout = 30 * time.Second

// pendingEvent is a session event in a batch (Broker.events, keyed by
// session), with its outcome.
type pendingEvent struct {
	ev    SessionEvent
	next  site.SessionState
	byVDA bool
	err   error
}

// applyEvent applies a session's change to next in the next batch.
func (b *Broker) applyEvent(ctx context.Context, ev SessionEvent, next site.SessionState, byVDA bool) error {
	p := &pendingEvent{ev: ev, next: next, byVDA: byVDA}
	if err := b.events.do(ctx, p); err != nil {
		return err
	}
	return p.err
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
			b.machines.loggedOn(p.ev.Machine)
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
