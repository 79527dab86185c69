package broker

import (
	"context"

	"github.com/usher-vdi/usher/internal/site"
)

// Delegate hands a broker's brokering to another broker of its zone: the
// zone's leader while the site DB is down (the Local Host Cache), so
// that one broker seats every launch of the zone, on every VDA of the
// zone, and none is refused.
//
// Leader reports whether requests go to another broker now, and which;
// the other methods carry a request there, the user's identity having
// been checked by the caller. They fail with an EUnavailable error when
// the leader cannot be reached.
type Delegate interface {
	Leader() (name string, elsewhere bool)
	Launch(ctx context.Context, req LaunchRequest) (*Launch, error)
	Reconnect(ctx context.Context, user, id, clientName string) (*Launch, error)
	Logoff(ctx context.Context, user, id string) error
	Disconnect(ctx context.Context, user, id string) error
	UserSessions(ctx context.Context, user string) ([]site.Session, error)
	DisplayTarget(ctx context.Context, user, id string) (Control, error)
}

// SetDelegate sets the broker's Delegate; nil brokers everything here.
// Call it before the broker serves.
func (b *Broker) SetDelegate(d Delegate) { b.delegate = d }

// Leader reports where the broker's brokering goes now, as its
// Delegate's Leader has it: elsewhere, to the named broker (the zone's
// leader), or here ("", false; always so without a Delegate).
func (b *Broker) Leader() (leader string, elsewhere bool) {
	if b.delegate == nil {
		return "", false
	}
	return b.delegate.Leader()
}

type noDelegateKey struct{}

// DelegatedContext returns ctx marked as the context of a request that
// another broker delegated to this one: it is brokered here, whatever
// this broker's Delegate says, so that a request never goes round
// between brokers that disagree on their leader.
func DelegatedContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, noDelegateKey{}, true)
}

// delegated returns the Delegate to hand ctx's request to, nil when the
// broker brokers it.
func (b *Broker) delegated(ctx context.Context) Delegate {
	if b.delegate == nil || ctx.Value(noDelegateKey{}) != nil {
		return nil
	}
	if _, elsewhere := b.delegate.Leader(); !elsewhere {
		return nil
	}
	return b.delegate
}

// notLeader refuses a VDA's registration, heartbeat or report at a broker
// that hands its zone's brokering to another: its VDAs go to the leader.
// The refusal is EUnavailable (503), which usher vda takes to its next
// broker at once and never gives up on: the leader may change again.
func (b *Broker) notLeader() error {
	if b.delegate == nil {
		return nil
	}
	leader, elsewhere := b.delegate.Leader()
	if !elsewhere {
		return nil
	}
	return site.Errorf(site.EUnavailable, "the site DB is down and broker %q brokers this zone meanwhile: register with it", leader)
}
