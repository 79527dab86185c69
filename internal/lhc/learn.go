package lhc

import (
	"context"
	"slices"

	"github.com/usher-vdi/usher/internal/site"
)

// Handover is what the zone's leader needs to know when a broker hands
// it its brokering, the leader's copy being older: the sessions the broker
// wrote to the site DB since its copy was read and those it wrote to its
// copy in outage mode, and the machines registered with it, which the
// leader takes over until their VDAs come to it.
type Handover struct {
	Sessions []site.Session  `json:"sessions"`
	Machines []HandedMachine `json:"machines"`
}

// HandedMachine is a machine's status handed over, with what the status's
// JSON form leaves out.
type HandedMachine struct {
	Name         string             `json:"name"`
	Status       site.MachineStatus `json:"status"`
	ControlToken string             `json:"control_token"`
	Credential   string             `json:"credential"`
}

// Handover returns what this broker hands its zone's leader. It waits for
// the calls under way to finish, and from then on, in this outage, the
// copy makes no new session (a placement fails with EUnavailable, for the
// client to retry through the leader) until HoldNewSessions: a launch that began
// here before its broker handed its brokering over, and placed after the
// handover was read, would make a session the leader never learns of,
// and the user's next launch, at the leader, a second one.
func (s *Store) Handover(ctx context.Context) (Handover, error) {
	s.gate.Lock()
	defer s.gate.Unlock()
	h := Handover{Sessions: s.recent.sessions()}
	if s.served() == nil {
		return h, nil
	}
	s.handed.Store(true)
	err := s.local.View(ctx, func(tx site.Tx) error {
		ids, err := tx.(site.LocalCopy).Journaled(ctx)
		if err != nil {
			return err
		}
		for _, id := range ids {
			sess, err := tx.Sessions().Get(ctx, id)
			if err == nil {
				h.Sessions = append(h.Sessions, sess)
			} else if site.ErrorCode(err) != site.ENotFound {
				return err
			}
		}
		all, err := tx.MachineStatuses(ctx)
		if err != nil {
			return err
		}
		for name, st := range all {
			if st.Registration == site.Registered {
				h.Machines = append(h.Machines, HandedMachine{Name: name, Status: st, ControlToken: st.ControlToken, Credential: st.Credential})
			}
		}
		return nil
	})
	return h, err
}

// Learn writes into the copy sessions that another broker of the zone
// wrote (its Handover), when it hands its brokering to this one, and
// takes over the machines registered with it: a session the copy holds
// ended stays ended, and one written here in outage mode (journaled)
// keeps this broker's state.
// Outside outage mode it does nothing: the site DB holds them. It fails
// with EUnavailable while the site DB does not answer and the Store has
// not entered outage mode yet, for the caller to try again.
func (s *Store) Learn(ctx context.Context, h Handover) error {
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.served() == nil {
		if _, err := s.db(); err != nil {
			return err
		}
		return nil
	}
	err := s.local.Update(ctx, func(tx site.Tx) error {
		journaled, err := tx.(site.LocalCopy).Journaled(ctx)
		if err != nil {
			return err
		}
		for _, m := range h.Machines {
			st := m.Status
			st.ControlToken, st.Credential = m.ControlToken, m.Credential
			if err := tx.SetMachineStatus(ctx, m.Name, st); err != nil && site.ErrorCode(err) != site.ENotFound {
				return err
			}
		}
		for _, sess := range h.Sessions {
			if _, ok := slices.BinarySearch(journaled, sess.ID); ok {
				continue
			}
			switch err := upsertSession(ctx, tx, sess); site.ErrorCode(err) {
			case "", site.EInvalid, site.EConflict:
			default:
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if b := s.attached(); b != nil && len(h.Machines) > 0 {
		// The broker places on the machines taken over at once.
		go func() {
			if err := b.SyncStatuses(context.WithoutCancel(ctx)); err != nil {
				s.log.Warn("read the copy's machine statuses", "err", err)
			}
		}()
	}
	s.log.Info("took over another broker's sessions and machines", "sessions", len(h.Sessions), "machines", len(h.Machines))
	return nil
}

// HandedOver records that the zone's leader took h: the machines handed
// over are no longer this broker's, so that it does not write their
// statuses back when the outage ends.
func (s *Store) HandedOver(ctx context.Context, h Handover) error {
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.served() == nil || len(h.Machines) == 0 {
		return nil
	}
	return s.local.Update(ctx, func(tx site.Tx) error {
		for _, m := range h.Machines {
			st, err := tx.MachineStatus(ctx, m.Name)
			if err != nil {
				continue
			}
			st.Registration = site.Unregistered
			if err := tx.SetMachineStatus(ctx, m.Name, st); err != nil {
				return err
			}
		}
		return nil
	})
}

// Journaled counts the sessions journaled in the copy, waiting to be
// written back: 0 outside outage mode, where the journal is empty.
func (s *Store) Journaled(ctx context.Context) (int, error) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.served() == nil {
		return 0, nil
	}
	var n int
	err := s.local.View(ctx, func(tx site.Tx) error {
		ids, err := tx.(site.LocalCopy).Journaled(ctx)
		n = len(ids)
		return err
	})
	return n, err
}
