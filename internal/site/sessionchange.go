package site

import (
	"context"
	"slices"
	"time"
)

// SessionChanger moves sessions to the states their VDAs report, many at
// once, in one round trip to the site DB, holding the rows it changes only
// while the database applies the changes: a broker across a WAN from its
// site DB then pays one round trip for every report that arrived while
// the last batch was on its way, and keeps no machine's status locked
// across the network. A store on a local database may implement it with
// ChangeSessionsTx in an Update; the storetest suite holds every
// implementation to ChangeSessionsTx's behaviour.
type SessionChanger interface {
	// ChangeSessions applies changes (SessionChanges.Validate) and returns
	// the verdict of each, in order. A change that is refused (an unknown
	// session, another machine's, a VDA that does not hold the
	// registration) leaves the others be. Errors: as Update's, and
	// EInvalid for malformed changes.
	ChangeSessions(ctx context.Context, changes []SessionChange) ([]SessionVerdict, error)
}

// SessionChange is a session's move to a new state, reported for the
// machine it is on.
type SessionChange struct {
	Machine, Session string
	// State is SessionActive (a logon or a reconnection) or
	// SessionDisconnected.
	State SessionState
	// ClientName, when set, replaces the session's.
	ClientName string
	// CheckCredential, for a change its VDA reports, requires that the
	// machine is registered with Credential.
	CheckCredential bool
	Credential      string
	// At is when the change happened: the session's UpdatedAt.
	At time.Time
}

// SessionVerdict is what ChangeSessions did with one change.
type SessionVerdict string

const (
	// VerdictLoggedOn: a pending session became State; the machine counts
	// one logon in progress fewer.
	VerdictLoggedOn SessionVerdict = "logged-on"
	// VerdictChanged: the session moved to State.
	VerdictChanged SessionVerdict = "changed"
	// VerdictUnchanged: the session was in State already, or logged off.
	VerdictUnchanged SessionVerdict = "unchanged"
	// VerdictNoMachine and VerdictNoSession: no such machine or session.
	VerdictNoMachine SessionVerdict = "no-machine"
	VerdictNoSession SessionVerdict = "no-session"
	// VerdictNotRegistered: the credential is not the machine's
	// registration's.
	VerdictNotRegistered SessionVerdict = "not-registered"
	// VerdictOtherMachine: the session is on another machine.
	VerdictOtherMachine SessionVerdict = "other-machine"
)

// SessionChanges is a batch of changes.
type SessionChanges []SessionChange

// Validate checks that every change names a machine and a session, moves
// to an active or disconnected state, and that no session is changed
// twice.
func (cs SessionChanges) Validate() error {
	seen := make(map[string]bool, len(cs))
	for _, c := range cs {
		switch {
		case c.Machine == "" || c.Session == "":
			return Errorf(EInvalid, "a session change names a machine and a session")
		case c.State != SessionActive && c.State != SessionDisconnected:
			return Errorf(EInvalid, "session %q: a change to %q: only %s and %s are reported", c.Session, c.State, SessionActive, SessionDisconnected)
		case seen[c.Session]:
			return Errorf(EInvalid, "session %q is changed twice in one batch", c.Session)
		}
		seen[c.Session] = true
	}
	return nil
}

// ChangeSessionsTx is ChangeSessions in a transaction: it locks the
// machines' statuses, then the sessions (MachineSessions), and writes
// what changes.
func ChangeSessionsTx(ctx context.Context, tx Tx, changes []SessionChange) ([]SessionVerdict, error) {
	if err := SessionChanges(changes).Validate(); err != nil {
		return nil, err
	}
	var machines, ids []string
	for _, c := range changes {
		machines, ids = append(machines, c.Machine), append(ids, c.Session)
	}
	slices.Sort(machines)
	slices.Sort(ids)
	sts, sess, err := tx.MachineSessions(ctx, slices.Compact(machines), ids)
	if err != nil {
		return nil, err
	}
	out := make([]SessionVerdict, len(changes))
	ended := map[string]int{}
	for i, c := range changes {
		st, okM := sts[c.Machine]
		s, okS := sess[c.Session]
		switch {
		case !okM:
			out[i] = VerdictNoMachine
		case !okS:
			out[i] = VerdictNoSession
		case c.CheckCredential && (st.Registration != Registered || st.Credential != c.Credential):
			out[i] = VerdictNotRegistered
		case s.Machine != c.Machine:
			out[i] = VerdictOtherMachine
		case s.State == SessionLoggedOff || s.State == c.State:
			out[i] = VerdictUnchanged
		default:
			out[i] = VerdictChanged
			if s.State == SessionPending {
				out[i] = VerdictLoggedOn
				ended[c.Machine]++
			}
			s.State, s.UpdatedAt = c.State, c.At
			if c.ClientName != "" {
				s.ClientName = c.ClientName
			}
			if err := tx.Sessions().Update(ctx, s); err != nil {
				return nil, err
			}
		}
	}
	for _, m := range slices.Compact(machines) {
		if n := ended[m]; n > 0 {
			st := sts[m]
			st.LogonsInProgress = max(0, st.LogonsInProgress-n)
			if err := tx.SetMachineStatus(ctx, m, st); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}
