package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// errNotRegistered tells a VDA to register again.
var errNotRegistered = &site.Error{Code: vdaproto.CodeNotRegistered, Message: "machine is not registered"}

// KnowsMachine reports whether a machine is configured, for enrolment.
func (b *Broker) KnowsMachine(name string) bool {
	_, _, ok := b.Snapshot().Machine(name)
	return ok
}

// Register records a VDA as ready for sessions and reconciles the broker's
// sessions on the machine with the ones the VDA reports: a live session
// the VDA does not know has ended.
func (b *Broker) Register(ctx context.Context, req vdaproto.RegisterRequest) (err error) {
	done := b.metrics.begin(OpRegister)
	defer func() { done(err) }()
	m, _, ok := b.Snapshot().Machine(req.Machine)
	if !ok {
		return site.NotFound(site.KindMachine, req.Machine)
	}
	addr := req.Address
	if addr == "" {
		addr = m.Address
	}
	proto := req.Protocol
	if proto == "" {
		proto = "rdp"
	}
	known := map[string]bool{}
	for _, s := range req.Sessions {
		known[s.ID] = true
	}
	now := b.cfg.Now().UTC()
	var st site.MachineStatus
	err = b.store.Update(ctx, func(tx site.Tx) error {
		var err error
		if st, err = tx.MachineStatus(ctx, req.Machine); err != nil {
			return err
		}
		p, err := tx.Sessions().List(ctx, site.SessionFilter{Machine: req.Machine, Live: true}, site.ListOptions{})
		if err != nil {
			return err
		}
		live, pending := 0, 0
		for _, sess := range p.Items {
			switch {
			case sess.State == site.SessionLoggedOff:
				continue
			case known[sess.ID] || sess.State == site.SessionPending:
				live++
				if sess.State == site.SessionPending {
					pending++
				}
			default:
				sess.State, sess.UpdatedAt, sess.EndedAt = site.SessionLoggedOff, now, now
				if err := tx.Sessions().Update(ctx, sess); err != nil {
					return err
				}
			}
		}
		st.Registration = site.Registered
		st.LastHeartbeat = now
		st.Sessions, st.LogonsInProgress = live, pending
		st.RegisteredAddress, st.Protocol = addr, proto
		st.ControlURL, st.ControlToken, st.AgentVersion = req.ControlURL, req.ControlToken, req.AgentVersion
		b.rescore(req.Machine, &st)
		return tx.SetMachineStatus(ctx, req.Machine, st)
	})
	if err != nil {
		return fmt.Errorf("register %q: %w", req.Machine, err)
	}
	b.machines.sync(req.Machine, st)
	b.log.Info("machine registered", "machine", req.Machine, "address", addr, "sessions", st.Sessions)
	return nil
}

// Heartbeat records a VDA's load report and returns the machine's load
// index. The broker's own session counts stand; the report updates CPU and
// memory. A machine not registered gets errNotRegistered.
func (b *Broker) Heartbeat(ctx context.Context, hb vdaproto.Heartbeat) (int, error) {
	ms, ok := b.machines.get(hb.Machine)
	if !ok {
		return 0, site.NotFound(site.KindMachine, hb.Machine)
	}
	if !ms.registered {
		return 0, errNotRegistered
	}
	now := b.cfg.Now().UTC()
	var st site.MachineStatus
	err := b.store.Update(ctx, func(tx site.Tx) error {
		var err error
		if st, err = tx.MachineStatus(ctx, hb.Machine); err != nil {
			return err
		}
		if st.Registration != site.Registered {
			return errNotRegistered
		}
		st.LastHeartbeat = now
		st.CPUPercent, st.MemoryPercent = clampPercent(hb.CPUPercent), clampPercent(hb.MemoryPercent)
		st.MemoryUsedMB, st.MemoryTotalMB = max(0, hb.MemoryUsedMB), max(0, hb.MemoryTotalMB)
		b.rescore(hb.Machine, &st)
		return tx.SetMachineStatus(ctx, hb.Machine, st)
	})
	if err != nil {
		return 0, err
	}
	var index int
	b.machines.update(hb.Machine, func(x *machineState) {
		x.lastHeartbeat = now
		x.usage.CPUPercent, x.usage.MemoryPercent = st.CPUPercent, st.MemoryPercent
		x.usage.MemoryUsedMB, x.usage.MemoryTotalMB = st.MemoryUsedMB, st.MemoryTotalMB
		x.registered = true
	})
	if x, ok := b.machines.get(hb.Machine); ok {
		index = x.load.Index
	}
	return index, nil
}

func clampPercent(v float64) float64 { return min(max(v, 0), 100) }

// SessionEvent applies a VDA's report of a session's change. Events for a
// session on another machine are refused; repeated events are harmless.
func (b *Broker) SessionEvent(ctx context.Context, ev vdaproto.SessionEvent) error {
	if ms, ok := b.machines.get(ev.Machine); !ok {
		return site.NotFound(site.KindMachine, ev.Machine)
	} else if !ms.registered {
		return errNotRegistered
	}
	if ev.Event == vdaproto.EventLogoff {
		return b.endSession(ctx, ev.SessionID, ev.Machine)
	}
	var next site.SessionState
	switch ev.Event {
	case vdaproto.EventLogon, vdaproto.EventReconnect:
		next = site.SessionActive
	case vdaproto.EventDisconnect:
		next = site.SessionDisconnected
	default:
		return site.Errorf(site.EInvalid, "unknown session event %q", ev.Event)
	}
	var wasPending bool
	err := b.store.Update(ctx, func(tx site.Tx) error {
		sess, err := tx.Sessions().Get(ctx, ev.SessionID)
		if err != nil {
			return err
		}
		if sess.Machine != ev.Machine {
			return site.Errorf(site.EForbidden, "session %q is not on machine %q", ev.SessionID, ev.Machine)
		}
		if sess.State == site.SessionLoggedOff || sess.State == next {
			return nil
		}
		wasPending = sess.State == site.SessionPending
		if wasPending {
			st, err := tx.MachineStatus(ctx, sess.Machine)
			if err != nil {
				return err
			}
			st.LogonsInProgress = max(0, st.LogonsInProgress-1)
			b.rescore(sess.Machine, &st)
			if err := tx.SetMachineStatus(ctx, sess.Machine, st); err != nil {
				return err
			}
		}
		sess.State, sess.UpdatedAt = next, b.cfg.Now().UTC()
		if ev.ClientName != "" {
			sess.ClientName = ev.ClientName
		}
		return tx.Sessions().Update(ctx, sess)
	})
	if err == nil && wasPending {
		b.machines.loggedOn(ev.Machine)
	}
	return err
}

// expireMachines unregisters machines whose heartbeats stopped.
func (b *Broker) expireMachines(ctx context.Context) {
	deadline := b.cfg.Now().Add(-b.cfg.HeartbeatTimeout)
	for _, name := range b.machines.stale(deadline) {
		var st site.MachineStatus
		expired := false
		err := b.store.Update(ctx, func(tx site.Tx) error {
			var err error
			if st, err = tx.MachineStatus(ctx, name); err != nil {
				return err
			}
			if st.Registration != site.Registered || !st.LastHeartbeat.Before(deadline) {
				return nil // it heartbeated meanwhile
			}
			st.Registration = site.Unregistered
			expired = true
			return tx.SetMachineStatus(ctx, name, st)
		})
		switch {
		case err != nil:
			b.log.Warn("unregister silent machine", "machine", name, "err", err)
		case expired:
			b.machines.sync(name, st)
			b.log.Warn("machine missed its heartbeats; unregistered", "machine", name, "last_heartbeat", st.LastHeartbeat)
		default:
			b.machines.sync(name, st)
		}
	}
}

// expirePending ends sessions whose user never arrived: pending longer
// than the ticket lifetime plus the prepare timeout.
func (b *Broker) expirePending(ctx context.Context) {
	deadline := b.cfg.Now().Add(-(b.cfg.TicketTTL + b.cfg.PrepareTimeout))
	var stale []site.Session
	err := b.store.View(ctx, func(tx site.Tx) error {
		p, err := tx.Sessions().List(ctx, site.SessionFilter{State: site.SessionPending}, site.ListOptions{})
		for _, s := range p.Items {
			if s.UpdatedAt.Before(deadline) {
				stale = append(stale, s)
			}
		}
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			b.log.Warn("list pending sessions", "err", err)
		}
		return
	}
	for _, s := range stale {
		if err := b.endSession(ctx, s.ID, s.Machine); err != nil {
			b.log.Warn("end abandoned session", "session", s.ID, "err", err)
			continue
		}
		b.log.Info("session abandoned: the user never arrived", "session", s.ID, "user", s.User, "machine", s.Machine)
	}
}

// UserSessions returns a user's live sessions.
func (b *Broker) UserSessions(ctx context.Context, user string) ([]site.Session, error) {
	var out []site.Session
	err := b.store.View(ctx, func(tx site.Tx) error {
		p, err := tx.Sessions().List(ctx, site.SessionFilter{User: user, Live: true}, site.ListOptions{})
		out = p.Items
		return err
	})
	return out, err
}

// ownSession returns the user's live session with the ID; ENotFound for a
// session of another user, so that IDs reveal nothing.
func (b *Broker) ownSession(ctx context.Context, user, id string) (site.Session, error) {
	var s site.Session
	err := b.store.View(ctx, func(tx site.Tx) (err error) {
		s, err = tx.Sessions().Get(ctx, id)
		return err
	})
	if err != nil && site.ErrorCode(err) != site.ENotFound {
		return s, err
	}
	if err != nil || s.User != user || s.State == site.SessionLoggedOff {
		return site.Session{}, site.NotFound(site.KindSession, id)
	}
	return s, nil
}

// Logoff ends one of the user's sessions: the VDA is asked to log it off,
// and the session ends in the site DB whatever the VDA answers.
func (b *Broker) Logoff(ctx context.Context, user, id string) error {
	s, err := b.ownSession(ctx, user, id)
	if err != nil {
		return err
	}
	if ms, ok := b.machines.get(s.Machine); ok && ms.registered && s.State != site.SessionPending {
		cctx, cancel := context.WithTimeout(ctx, b.cfg.PrepareTimeout)
		if err := b.cfg.Control.Logoff(cctx, ms.control, id); err != nil {
			b.log.Warn("VDA logoff failed; ending the session anyway", "machine", s.Machine, "session", id, "err", err)
		}
		cancel()
	}
	return b.endSession(ctx, id, s.Machine)
}

// Disconnect disconnects one of the user's active sessions through its VDA.
func (b *Broker) Disconnect(ctx context.Context, user, id string) error {
	s, err := b.ownSession(ctx, user, id)
	if err != nil {
		return err
	}
	if s.State != site.SessionActive {
		return site.Errorf(site.EConflict, "session %q is %s, not active", id, s.State)
	}
	ms, ok := b.machines.get(s.Machine)
	if !ok || !ms.registered {
		return site.Errorf(site.EUnavailable, "the machine of session %q is not registered", id)
	}
	cctx, cancel := context.WithTimeout(ctx, b.cfg.PrepareTimeout)
	defer cancel()
	if err := b.cfg.Control.Disconnect(cctx, ms.control, id); err != nil {
		return site.Errorf(site.EUnavailable, "the machine did not disconnect the session")
	}
	return b.SessionEvent(ctx, vdaproto.SessionEvent{Machine: s.Machine, SessionID: id, Event: vdaproto.EventDisconnect, At: time.Now()})
}

// Reconnect launches the resource of one of the user's sessions again,
// which returns to that session when the policy allows.
func (b *Broker) Reconnect(ctx context.Context, user, id, clientName string) (*Launch, error) {
	s, err := b.ownSession(ctx, user, id)
	if err != nil {
		return nil, err
	}
	return b.Launch(ctx, LaunchRequest{User: user, Resource: s.Resource, ClientName: clientName})
}
