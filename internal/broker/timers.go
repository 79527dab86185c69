package broker

import (
	"context"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// The session timers the brokers enforce, as site files name them.
const (
	TimerDisconnectedLogoff = "disconnected_logoff"
	TimerMaxSession         = "max_session"
)

// TimerSweepInterval is how often Run checks sessions against their
// delivery groups' session timers: a timer fires up to this late.
const TimerSweepInterval = 15 * time.Second

// timedOut is a session due for logoff, and the timer that says so.
type timedOut struct {
	sess  site.Session
	timer string
}

// dueTimer returns the timer under which sess is due for logoff at now,
// "" for none: max_session counts from the session's brokering,
// disconnected_logoff from its disconnection (its last state change).
// Pending sessions are expirePending's.
func dueTimer(t site.SessionTimers, sess site.Session, now time.Time) string {
	switch {
	case sess.State != site.SessionActive && sess.State != site.SessionDisconnected:
		return ""
	case t.MaxSession > 0 && now.Sub(sess.CreatedAt) > t.MaxSession.Std():
		return TimerMaxSession
	case sess.State == site.SessionDisconnected && t.DisconnectedLogoff > 0 && now.Sub(sess.UpdatedAt) > t.DisconnectedLogoff.Std():
		return TimerDisconnectedLogoff
	}
	return ""
}

// expireTimers logs off, every TimerSweepInterval, the live sessions past
// their delivery group's disconnected_logoff or max_session timer, on the
// machines registered with this broker. The session ends in the site DB
// first, in a transaction that checks it is still due, and only the
// broker whose transaction ended it asks the VDA to log it off: several
// brokers sweeping one site log a session off once, and a session that
// reconnected meanwhile is left alone.
func (b *Broker) expireTimers(ctx context.Context) {
	now := b.cfg.Now()
	if now.Before(b.timersDue) {
		return
	}
	b.timersDue = now.Add(TimerSweepInterval)
	snap := b.Snapshot()
	if snap == nil {
		return
	}
	timers := map[string]site.SessionTimers{}
	for _, g := range snap.Config().DeliveryGroups {
		if t := g.SessionTimers; t.DisconnectedLogoff > 0 || t.MaxSession > 0 {
			timers[g.Name] = t
		}
	}
	if len(timers) == 0 {
		return
	}
	var due []timedOut
	err := b.store.View(ctx, func(tx site.Tx) error {
		p, err := tx.Sessions().List(ctx, site.SessionFilter{Live: true}, site.ListOptions{})
		for _, s := range p.Items {
			t, ok := timers[s.DeliveryGroup]
			if !ok {
				continue
			}
			if ms, ok := b.machines.get(s.Machine); !ok || !ms.registered {
				continue
			}
			if timer := dueTimer(t, s, now); timer != "" {
				due = append(due, timedOut{s, timer})
			}
		}
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			b.log.Warn("list sessions for their timers", "err", err)
		}
		return
	}
	for _, d := range due {
		t := timers[d.sess.DeliveryGroup]
		ended, err := b.endSessionIf(ctx, d.sess.ID, d.sess.Machine, nil, func(s site.Session) bool {
			return dueTimer(t, s, b.cfg.Now()) == d.timer
		})
		if err != nil {
			b.log.Warn("end session past its timer", "session", d.sess.ID, "timer", d.timer, "err", err)
			continue
		}
		if !ended {
			continue // another broker ended it, or it reconnected
		}
		b.obs.TimerLogoff(d.timer)
		limit := t.MaxSession
		if d.timer == TimerDisconnectedLogoff {
			limit = t.DisconnectedLogoff
		}
		b.log.Info("session logged off by its delivery group's timer", "session", d.sess.ID, "user", d.sess.User,
			"machine", d.sess.Machine, "delivery_group", d.sess.DeliveryGroup, "timer", d.timer, "limit", limit.String(), "state", d.sess.State)
		if ms, ok := b.machines.get(d.sess.Machine); ok && ms.registered {
			cctx, cancel := context.WithTimeout(ctx, b.cfg.PrepareTimeout)
			if err := b.cfg.Control.Logoff(cctx, ms.control, d.sess.ID); err != nil {
				b.log.Warn("VDA logoff of a session past its timer failed; it is ended in the site DB", "machine", d.sess.Machine, "session", d.sess.ID, "err", err)
			}
			cancel()
		}
	}
}
