package site

import (
	"context"
	"fmt"
	"slices"
)

// Placer seats a launch in one round trip to the site DB, so that a broker
// across a WAN from it pays one round trip per launch, not one per
// statement. A store on a local database may implement Place with PlaceTx in
// an Update; a store across a network implements the same rules in one
// statement or one pipelined transaction. The storetest suite holds every
// implementation to PlaceTx's behaviour.
type Placer interface {
	// Place returns the user to a live session that p.Reconnect allows,
	// else claims the first candidate that can still take a session and
	// records p.Session there, atomically. Placements of one user that
	// carry a rule are seated one at a time, through every broker of the
	// site: one that follows another sees the session that one made, so
	// that concurrent launches of one resource (a pending session is
	// always gone back to) make one session. When neither is possible it
	// returns a zero Placed (with Refused filled) and no error. Errors: as
	// Update's (EUnavailable when the site DB cannot be reached), and
	// EInvalid for a malformed placement.
	Place(ctx context.Context, p Placement) (Placed, error)
}

// Placement is one launch to seat.
type Placement struct {
	// Session is the session to create, in state SessionPending; its
	// Machine is set to the candidate claimed.
	Session Session
	// Reconnect, when set, selects the live sessions of Session.User that
	// the launch goes back to instead of creating one.
	Reconnect *ReconnectRule
	// Candidates are tried in order.
	Candidates []Candidate
}

// ReconnectRule selects the sessions a launch may go back to: a session of
// the user that has not ended, in one of Groups, serving one of
// Resources, on a machine that is registered, and not in Skip; pending and
// disconnected sessions always, active ones when the group's policy is
// ReconnectAlways, or ReconnectSameEndpointOnly and the session's client
// is ClientName (not empty). Of several, the one with the lowest ID.
type ReconnectRule struct {
	// Groups are delivery groups, each with its policy in Policies.
	Groups   []string
	Policies []ReconnectPolicy
	// Resources are the resources whose sessions serve the launch: a
	// desktop its own, an application every application of the groups
	// (session sharing).
	Resources []string
	// ClientName is the launching client's name.
	ClientName string
	// Skip are sessions not to go back to (their VDA refused).
	Skip []string
}

// Candidate is a machine a new session may go to.
type Candidate struct {
	Machine string
	// Limit is the most sessions the machine takes; 0 means no limit.
	Limit int
	// LoadIndex is the machine's load index with the new session counted,
	// as the broker computes it from its rules; the claim stores it (the
	// next heartbeat recomputes it from the stored usage).
	LoadIndex int
	// Assign makes the machine the user's own (the first launch of an
	// assigned desktop): the claim fails when the machine belongs to
	// someone else. Assigning moves the configuration version.
	Assign bool
}

// Placed is what a Place did.
type Placed struct {
	// Reconnect is the session the user goes back to, nil when none.
	Reconnect *Session
	// Session is the session created, with its Machine; zero when none.
	Session Session
	// Status is the status of the machine of Reconnect or Session, after
	// the claim.
	Status MachineStatus
	// Refused holds the current status of each candidate tried that could
	// not take the session (one that no longer exists is absent), so that
	// the caller can correct its view.
	Refused map[string]MachineStatus
}

// Placed reports whether a session was found or made.
func (p Placed) Placed() bool { return p.Reconnect != nil || p.Session.ID != "" }

// Validate checks a placement's form.
func (p Placement) Validate() error {
	switch {
	case p.Session.ID == "" || p.Session.User == "" || p.Session.Resource == "" || p.Session.DeliveryGroup == "":
		return Errorf(EInvalid, "placement: the session needs an ID, a user, a resource and a delivery group")
	case p.Session.State != SessionPending:
		return Errorf(EInvalid, "placement: a new session is %s, not %s", SessionPending, p.Session.State)
	case p.Reconnect != nil && len(p.Reconnect.Groups) != len(p.Reconnect.Policies):
		return Errorf(EInvalid, "placement: %d reconnection groups and %d policies", len(p.Reconnect.Groups), len(p.Reconnect.Policies))
	}
	for _, c := range p.Candidates {
		if c.Machine == "" || c.Limit < 0 || c.LoadIndex < 0 || c.LoadIndex > MaxLoadIndex {
			return Errorf(EInvalid, "placement: candidate %+v is malformed", c)
		}
	}
	return nil
}

// Allows reports whether the rule lets a launch go back to sess.
func (r *ReconnectRule) Allows(sess Session) bool {
	if sess.State == SessionLoggedOff || !sess.EndedAt.IsZero() || slices.Contains(r.Skip, sess.ID) ||
		!slices.Contains(r.Resources, sess.Resource) {
		return false
	}
	i := slices.Index(r.Groups, sess.DeliveryGroup)
	if i < 0 {
		return false
	}
	switch sess.State {
	case SessionPending, SessionDisconnected:
		return true
	case SessionActive:
		p := r.Policies[i]
		return p == ReconnectAlways || p == ReconnectSameEndpointOnly && r.ClientName != "" && sess.ClientName == r.ClientName
	}
	return false
}

// PlaceTx does p in tx, an Update transaction, with tx's own statements:
// the reference behaviour of Placer, for stores whose round trips cost
// nothing.
func PlaceTx(ctx context.Context, tx Tx, p Placement) (Placed, error) {
	if err := p.Validate(); err != nil {
		return Placed{}, err
	}
	if r := p.Reconnect; r != nil {
		live, err := tx.Sessions().List(ctx, SessionFilter{User: p.Session.User, Live: true}, ListOptions{})
		if err != nil {
			return Placed{}, err
		}
		for _, sess := range live.Items { // in ID order
			if !r.Allows(sess) {
				continue
			}
			st, err := tx.MachineStatus(ctx, sess.Machine)
			if ErrorCode(err) == ENotFound {
				continue
			}
			if err != nil {
				return Placed{}, err
			}
			if st.Registration != Registered {
				continue
			}
			return Placed{Reconnect: &sess, Status: st}, nil
		}
	}
	var out Placed
	for _, c := range p.Candidates {
		st, err := tx.MachineStatus(ctx, c.Machine)
		if ErrorCode(err) == ENotFound {
			continue
		}
		if err != nil {
			return Placed{}, err
		}
		if st.Registration != Registered || (c.Limit > 0 && st.Sessions >= c.Limit) {
			refuse(&out, c.Machine, st)
			continue
		}
		if c.Assign {
			m, err := tx.Machines().Get(ctx, c.Machine)
			if err != nil {
				return Placed{}, err
			}
			if m.AssignedUser != "" && m.AssignedUser != p.Session.User {
				refuse(&out, c.Machine, st)
				continue
			}
			if m.AssignedUser == "" {
				m.AssignedUser = p.Session.User
				if err := tx.Machines().Update(ctx, m); err != nil {
					return Placed{}, err
				}
			}
		}
		st.Sessions++
		st.LogonsInProgress++
		st.LoadIndex = c.LoadIndex
		if err := tx.SetMachineStatus(ctx, c.Machine, st); err != nil {
			return Placed{}, err
		}
		sess := p.Session
		sess.Machine = c.Machine
		if err := tx.Sessions().Create(ctx, sess); err != nil {
			return Placed{}, fmt.Errorf("place session on %q: %w", c.Machine, err)
		}
		out.Session, out.Status = sess, st
		return out, nil
	}
	return out, nil
}

func refuse(p *Placed, machine string, st MachineStatus) {
	if p.Refused == nil {
		p.Refused = map[string]MachineStatus{}
	}
	p.Refused[machine] = st
}
