package broker

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// ENotRegistered is the error code of ErrNotRegistered.
const ENotRegistered = "not_registered"

// ErrNotRegistered is returned for a heartbeat or a session event of a
// machine the broker does not know as registered: its VDA must register
// again.
var ErrNotRegistered = site.Errorf(ENotRegistered, "machine is not registered")

// Registration announces a VDA ready for sessions.
type Registration struct {
	Machine string
	// Address is where clients reach the display protocol, host:port; ""
	// means the machine's configured address.
	Address string
	// Protocol is the display protocol; "" means "rdp".
	Protocol string
	// Control is where and how the broker reaches the VDA.
	Control      Control
	AgentVersion string
	// Simulated marks a simulated VDA: its registration is logged at
	// debug level, so that a simulator's hundreds do not flood the log.
	Simulated bool
	// Sessions are the sessions already on the host, after a VDA or
	// broker restart, or when the broker asked the VDA to register again
	// (Reregister).
	Sessions []ReportedSession
	// Credential is the ID of the machine credential the VDA presented:
	// the registration belongs to it, and heartbeats and events with
	// another are not the registered VDA's.
	Credential string
}

// ReportedSession is a session as its VDA reports it when it registers.
type ReportedSession struct {
	ID, User, Resource string
	// State is pending, active or disconnected.
	State site.SessionState
}

// Heartbeat is a VDA's load report.
type Heartbeat struct {
	Machine string
	// Usage is the load the VDA reports. The broker takes CPU and memory
	// from it; its own session counts stand.
	Usage site.Usage
	// Credential is the ID of the machine credential the VDA presented.
	Credential string
}

// SessionChange is what happened to a session on its VDA.
type SessionChange string

// Session changes a VDA reports.
const (
	ChangeLogon      SessionChange = "logon"
	ChangeDisconnect SessionChange = "disconnect"
	ChangeReconnect  SessionChange = "reconnect"
	ChangeLogoff     SessionChange = "logoff"
)

// SessionEvent is a VDA's report of a change of one of its sessions.
type SessionEvent struct {
	Machine, SessionID string
	Change             SessionChange
	// ClientName is the client that connected, for a logon or a
	// reconnection; "" keeps the session's.
	ClientName string
	// Credential is the ID of the machine credential the VDA presented.
	Credential string
}

// ConflictObserver is an Observer that also counts registrations refused
// because another VDA holds the machine's live registration.
type ConflictObserver interface {
	RegistrationConflict()
}

// sameHost reports whether two host[:port] addresses name one host: host
// names compare without case and trailing dot, IP addresses by value. It
// does not resolve names.
func sameHost(a, b string) bool {
	return normHost(a) == normHost(b)
}

func normHost(addr string) string {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().WithZone("").String()
	}
	return strings.ToLower(host)
}

// KnowsMachine reports whether a machine is configured, for enrolment.
func (b *Broker) KnowsMachine(name string) bool {
	_, _, ok := b.Snapshot().Machine(name)
	return ok
}

// Register records a VDA as ready for sessions and reconciles the broker's
// sessions on the machine with the ones the VDA reports: a live session
// the VDA does not know has ended.
//
// Lock order: every transaction of the broker that writes a machine's
// status and its sessions reads (in an update: locks) the status first,
// then the sessions, as a placement does (it claims the status, then
// creates the session), so that registrations, session events and logoffs
// of one machine wait for each other instead of deadlocking on a store
// that locks rows (pgstore).
func (b *Broker) Register(ctx context.Context, req Registration) (err error) {
	done := b.begin(OpRegister)
	defer func() { done(err) }()
	s := b.Snapshot()
	m, group, ok := s.Machine(req.Machine)
	if !ok {
		return site.NotFound(site.KindMachine, req.Machine)
	}
	if err := b.admitVDA(s, req.Machine); err != nil {
		b.log.WarnContext(ctx, "registration refused: another zone's machine", "machine", req.Machine, "err", err)
		return err
	}
	if err := b.notLeader(); err != nil {
		level := slog.LevelDebug
		if b.refusing.CompareAndSwap(false, true) {
			level = slog.LevelInfo
		}
		b.log.Log(ctx, level, "registration refused: another broker leads the zone (further refusals logged at debug until registrations are taken again)",
			"machine", req.Machine, "err", err)
		return err
	}
	if b.refusing.Load() {
		b.refusing.Store(false)
	}
	addr := req.Address
	if addr == "" {
		addr = m.Address
	}
	if !b.cfg.AllowAddressChange && !sameHost(addr, m.Address) {
		b.log.WarnContext(ctx, "registration refused: address is not the machine's", "machine", req.Machine,
			"address", addr, "configured", m.Address)
		return site.Errorf(site.EForbidden, "machine %q registers address %q, but its configured address is %q: "+
			"register from the machine's host, change the machine's address, or start usher serve with --allow-vda-address-change",
			req.Machine, addr, m.Address)
	}
	proto := req.Protocol
	if proto == "" {
		proto = "rdp"
	}
	known := map[string]bool{}
	for _, rs := range req.Sessions {
		known[rs.ID] = true
	}
	now := b.cfg.Now().UTC()
	var st site.MachineStatus
	var conflict error
	err = b.store.Update(ctx, func(tx site.Tx) error {
		var err error
		if st, err = tx.MachineStatus(ctx, req.Machine); err != nil {
			return err
		}
		if b.heldByAnother(st, req, now) {
			// Recorded, and refused once the record commits.
			since := now.Sub(st.LastHeartbeat).Round(time.Millisecond)
			conflict = site.Errorf(site.EConflict, "machine %q is registered by another VDA (control URL %s, last heartbeat %s ago); "+
				"a second VDA cannot take it over while the first heartbeats", req.Machine, st.ControlURL, since)
			st.Conflict = fmt.Sprintf("a VDA with control URL %s and address %s tried to register while the VDA with control URL %s held the registration",
				req.Control.URL, addr, st.ControlURL)
			st.ConflictAt = now
			return tx.SetMachineStatus(ctx, req.Machine, st)
		}
		p, err := tx.Sessions().List(ctx, site.SessionFilter{Machine: req.Machine, Live: true}, site.ListOptions{})
		if err != nil {
			return err
		}
		live, pending := 0, 0
		held := map[string]bool{}
		for _, sess := range p.Items {
			held[sess.ID] = true
			switch {
			case sess.State == site.SessionLoggedOff:
				continue
			case known[sess.ID] || sess.State == site.SessionPending || now.Sub(sess.UpdatedAt) < b.reportGrace():
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
		added, err := b.keepReported(ctx, tx, s, m.Name, group, req.Sessions, held, now)
		if err != nil {
			return err
		}
		live += added
		st.Registration = site.Registered
		st.LastHeartbeat = now
		st.Sessions, st.LogonsInProgress = live, pending
		st.RegisteredAddress, st.Protocol = addr, proto
		st.ControlURL, st.ControlToken, st.ControlPin, st.AgentVersion = req.Control.URL, req.Control.Token, req.Control.Pin, req.AgentVersion
		st.Credential = req.Credential
		b.rescore(req.Machine, &st)
		return tx.SetMachineStatus(ctx, req.Machine, st)
	})
	if err == nil && conflict != nil {
		if o, ok := b.obs.(ConflictObserver); ok {
			o.RegistrationConflict()
		}
		b.log.WarnContext(ctx, "registration refused: another VDA holds the machine", "machine", req.Machine,
			"control_url", req.Control.URL, "address", addr, "registered_control_url", st.ControlURL)
		return conflict
	}
	if err != nil {
		return fmt.Errorf("register %q: %w", req.Machine, err)
	}
	b.machines.sync(req.Machine, st)
	b.machines.update(req.Machine, func(ms *machineState) { ms.here, ms.reregister = now, false })
	level := slog.LevelInfo
	if req.Simulated {
		level = slog.LevelDebug
	}
	b.log.Log(ctx, level, "machine registered", "machine", req.Machine, "address", addr, "sessions", st.Sessions)
	return nil
}

// reportGrace is how recent a change of a session must be for a
// registration that does not report the session to leave it be: the VDA
// may have taken its list before the change (a logon racing the
// registration). A session the VDA has really ended is reported ended
// by the VDA's logoff event, or by its next registration.
func (b *Broker) reportGrace() time.Duration { return max(3*b.cfg.HeartbeatInterval, 5*time.Second) }

// keepReported records the live sessions a registering VDA reports that
// the site DB does not hold on the machine (held): sessions brokered while
// the site DB was down, or by a broker that lost its records. It returns
// how many it recorded. A session whose ID the site DB holds elsewhere, or
// whose user or resource the configuration does not know, is logged and
// left out.
func (b *Broker) keepReported(ctx context.Context, tx site.Tx, s *Snapshot, machine, group string, reported []ReportedSession,
	held map[string]bool, now time.Time) (int, error) {
	added := 0
	for _, rs := range reported {
		if held[rs.ID] || rs.ID == "" {
			continue
		}
		switch rs.State {
		case site.SessionPending, site.SessionActive, site.SessionDisconnected:
		default:
			continue
		}
		_, userOK := s.User(rs.User)
		if !userOK {
			_, _, userOK = b.directory(rs.User) // a name the site's directory may hold
		}
		_, resOK := s.Resource(rs.Resource)
		if !userOK || !resOK {
			b.log.WarnContext(ctx, "a VDA reports a session of an unknown user or resource; not recorded", "machine", machine,
				"session", rs.ID, "user", rs.User, "resource", rs.Resource)
			continue
		}
		sess := site.Session{ID: rs.ID, User: rs.User, Resource: rs.Resource, DeliveryGroup: group,
			Machine: machine, State: rs.State, CreatedAt: now, UpdatedAt: now}
		err := tx.Sessions().Create(ctx, sess)
		switch site.ErrorCode(err) {
		case "":
			added++
			b.log.InfoContext(ctx, "a VDA reports a session the site DB did not hold; recorded", "machine", machine,
				"session", rs.ID, "user", rs.User)
		case site.EConflict, site.EInvalid:
			b.log.WarnContext(ctx, "a VDA reports a session that cannot be recorded", "machine", machine, "session", rs.ID, "err", err)
		default:
			return 0, err
		}
	}
	return added, nil
}

// heldByAnother reports whether another VDA holds the machine's live
// registration: registered from another control URL, and heartbeating.
// The same control URL is the same VDA (restarted, or enrolled again).
func (b *Broker) heldByAnother(st site.MachineStatus, req Registration, now time.Time) bool {
	return st.Registration == site.Registered && st.ControlURL != "" && st.ControlURL != req.Control.URL &&
		now.Sub(st.LastHeartbeat) < b.cfg.HeartbeatTimeout
}

// Heartbeat records a VDA's load report and returns the machine's load
// index. The broker's own session counts stand; the report updates CPU and
// memory. A machine not registered gets ErrNotRegistered.
func (b *Broker) Heartbeat(ctx context.Context, hb Heartbeat) (int, error) {
	ms, ok := b.machines.get(hb.Machine)
	if !ok {
		return 0, site.NotFound(site.KindMachine, hb.Machine)
	}
	if err := b.notLeader(); err != nil {
		return 0, err
	}
	if !ms.registered || ms.reregister {
		return 0, ErrNotRegistered
	}
	if err := b.admitVDA(b.Snapshot(), hb.Machine); err != nil {
		return 0, err
	}
	// The load index with the new usage, from the broker's view of the
	// machine's sessions (as a placement's); brokers compute their own
	// from the usage they read, so the one recorded is what admins see.
	u := ms.usage
	u.CPUPercent, u.MemoryPercent = clampPercent(hb.Usage.CPUPercent), clampPercent(hb.Usage.MemoryPercent)
	u.MemoryUsedMB, u.MemoryTotalMB = max(0, hb.Usage.MemoryUsedMB), max(0, hb.Usage.MemoryTotalMB)
	p := &pendingHeartbeat{hb: site.Heartbeat{Machine: hb.Machine, Credential: hb.Credential, At: b.cfg.Now().UTC(), Usage: u,
		LoadIndex: LoadOf(ms.rules, ms.limit, u).Index}}
	err := b.heartbeats.do(ctx, p)
	if err == nil {
		err = p.err
	}
	if site.ErrorCode(err) == site.EUnavailable {
		// The VDA is alive; the site DB is what failed. Its machine is
		// not timed out for it, so that it stays eligible when the broker
		// brokers from its local copy (which it seeds from this table).
		b.machines.update(hb.Machine, func(x *machineState) { x.lastHeartbeat, x.here = p.hb.At, p.hb.At })
	}
	if err != nil {
		return 0, err
	}
	var index int
	b.machines.update(hb.Machine, func(x *machineState) {
		x.lastHeartbeat, x.here = p.hb.At, p.hb.At
		x.usage.CPUPercent, x.usage.MemoryPercent = u.CPUPercent, u.MemoryPercent
		x.usage.MemoryUsedMB, x.usage.MemoryTotalMB = u.MemoryUsedMB, u.MemoryTotalMB
		x.registered = true
	})
	if x, ok := b.machines.get(hb.Machine); ok {
		index = x.load.Index
	}
	return index, nil
}

// pendingHeartbeat is a heartbeat in a batch (Broker.heartbeats, keyed by
// machine), with its outcome.
type pendingHeartbeat struct {
	hb  site.Heartbeat
	err error
}

// initBatchers sets up the batches of session reports and heartbeats.
func (b *Broker) initBatchers() {
	b.events.key = func(p *pendingEvent) string { return p.ev.SessionID }
	b.events.apply = b.applyBatch
	b.heartbeats.key = func(p *pendingHeartbeat) string { return p.hb.Machine }
	b.heartbeats.apply = b.recordHeartbeats
}

// recordHeartbeats records a batch of heartbeats with one
// RecordHeartbeats; a batch that fails fails them all.
func (b *Broker) recordHeartbeats(batch []*pendingHeartbeat) {
	ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
	defer cancel()
	hbs := make([]site.Heartbeat, len(batch))
	for i, p := range batch {
		hbs[i] = p.hb
	}
	verdicts, err := b.store.RecordHeartbeats(ctx, hbs)
	for i, p := range batch {
		switch {
		case err != nil:
			p.err = err
		case verdicts[i] == site.HeartbeatRecorded:
		case verdicts[i] == site.HeartbeatNoMachine:
			p.err = site.NotFound(site.KindMachine, p.hb.Machine)
		case verdicts[i] == site.HeartbeatNotRegistered:
			p.err = ErrNotRegistered
		default:
			p.err = fmt.Errorf("heartbeat of %q: the site DB's verdict %q", p.hb.Machine, verdicts[i])
		}
	}
}

func clampPercent(v float64) float64 { return min(max(v, 0), 100) }

// SessionEvent applies a VDA's report of a session's change. Events for a
// session on another machine are refused; repeated events are harmless.
func (b *Broker) SessionEvent(ctx context.Context, ev SessionEvent) error {
	if err := b.notLeader(); err != nil {
		return err
	}
	if ms, ok := b.machines.get(ev.Machine); !ok {
		return site.NotFound(site.KindMachine, ev.Machine)
	} else if !ms.registered {
		return ErrNotRegistered
	}
	return b.sessionEvent(ctx, ev, true)
}

// sessionEvent applies a session's change, reported by its VDA (byVDA:
// its credential, ev.Credential, is checked in the same transaction) or
// made by the broker.
func (b *Broker) sessionEvent(ctx context.Context, ev SessionEvent, byVDA bool) error {
	if ev.Change == ChangeLogoff {
		var cred *string
		if byVDA {
			cred = &ev.Credential
		}
		return b.endSession(ctx, ev.SessionID, ev.Machine, cred)
	}
	var next site.SessionState
	switch ev.Change {
	case ChangeLogon, ChangeReconnect:
		next = site.SessionActive
	case ChangeDisconnect:
		next = site.SessionDisconnected
	default:
		return site.Errorf(site.EInvalid, "unknown session event %q", ev.Change)
	}
	return b.applyEvent(ctx, ev, next, byVDA)
}

// expireMachines unregisters machines whose heartbeats stopped.
// While the site DB is unavailable a sweep stops at the first machine and
// says so once, not once per machine and sweep. Machines last heard of
// before this broker started (registered in the site DB by an earlier
// run, as every machine of a restarted demo is) are counted in one line:
// their silence says the broker restarted, not that they failed.
func (b *Broker) expireMachines(ctx context.Context) {
	deadline := b.cfg.Now().Add(-b.cfg.HeartbeatTimeout)
	stale := b.machines.stale(deadline)
	earlier := 0
	defer func() {
		if earlier > 0 {
			b.log.Info("machines registered before this broker started are unregistered until they heartbeat to it", "machines", earlier)
		}
	}()
	for i, name := range stale {
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
		if site.ErrorCode(err) == site.EUnavailable {
			if !b.sweepBlocked {
				b.log.Warn("silent machines stay registered until the site DB answers", "waiting", len(stale)-i, "err", err)
				b.sweepBlocked = true
			}
			return
		}
		if b.sweepBlocked {
			b.log.Info("silent machines are unregistered again", "waiting", len(stale)-i)
			b.sweepBlocked = false
		}
		switch {
		case err != nil:
			b.log.Warn("unregister silent machine", "machine", name, "err", err)
		case expired && st.LastHeartbeat.Before(b.started):
			b.machines.sync(name, st)
			earlier++
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
		if err := b.endSession(ctx, s.ID, s.Machine, nil); err != nil {
			b.log.Warn("end abandoned session", "session", s.ID, "err", err)
			continue
		}
		b.log.Info("session abandoned: the user never arrived", "session", s.ID, "user", s.User, "machine", s.Machine)
	}
}

// UserSessions returns a user's live sessions.
func (b *Broker) UserSessions(ctx context.Context, user string) ([]site.Session, error) {
	if d := b.delegated(ctx); d != nil {
		return d.UserSessions(ctx, user)
	}
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
	if d := b.delegated(ctx); d != nil {
		return d.Logoff(ctx, user, id)
	}
	s, err := b.ownSession(ctx, user, id)
	if err != nil {
		return err
	}
	// A pending session too: its VDA holds it prepared, and its user
	// may have arrived before the site DB heard of it.
	if ms, ok := b.machines.get(s.Machine); ok && ms.registered {
		cctx, cancel := context.WithTimeout(ctx, b.cfg.PrepareTimeout)
		if err := b.cfg.Control.Logoff(cctx, ms.control, id); err != nil {
			b.log.Warn("VDA logoff failed; ending the session anyway", "machine", s.Machine, "session", id, "err", err)
		}
		cancel()
	}
	return b.endSession(ctx, id, s.Machine, nil)
}

// Disconnect disconnects one of the user's active sessions through its VDA.
func (b *Broker) Disconnect(ctx context.Context, user, id string) error {
	if d := b.delegated(ctx); d != nil {
		return d.Disconnect(ctx, user, id)
	}
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
	return b.sessionEvent(ctx, SessionEvent{Machine: s.Machine, SessionID: id, Change: ChangeDisconnect}, false)
}

// Reconnect launches the resource of one of the user's sessions again,
// which returns to that session when the policy allows.
func (b *Broker) Reconnect(ctx context.Context, user, id, clientName string) (*Launch, error) {
	if d := b.delegated(ctx); d != nil {
		return d.Reconnect(ctx, user, id, clientName)
	}
	s, err := b.ownSession(ctx, user, id)
	if err != nil {
		return nil, err
	}
	return b.launch(ctx, LaunchRequest{User: user, Resource: s.Resource, ClientName: clientName}, OpReconnect)
}

// DeleteMachine deletes a machine from the configuration. A machine with
// live sessions is refused with EConflict, which counts them, unless force:
// then its VDA is asked to log each off (whatever it answers) and they end
// in the site DB in the delete's transaction. The delete is recorded in
// the site's change history as actor's (site.ChangeRecord.Actor).
// ENotFound for an unknown machine.
func (b *Broker) DeleteMachine(ctx context.Context, name string, force bool, actor string) error {
	if force {
		b.logoffAll(ctx, name)
	}
	now := b.cfg.Now().UTC()
	ended := 0
	snap := b.Snapshot()
	var m *site.Mutation
	err := b.store.Update(ctx, func(tx site.Tx) error {
		// The configuration is read (its version) before the sessions
		// change: MutateFrom wants no change of this transaction before it.
		if _, err := tx.ConfigVersion(ctx); err != nil {
			return err
		}
		if force {
			p, err := tx.Sessions().List(ctx, site.SessionFilter{Machine: name, Live: true}, site.ListOptions{})
			if err != nil {
				return err
			}
			for _, sess := range p.Items {
				sess.State, sess.UpdatedAt, sess.EndedAt = site.SessionLoggedOff, now, now
				if err := tx.Sessions().Update(ctx, sess); err != nil {
					return err
				}
			}
			ended = len(p.Items)
		}
		var err error
		m, err = site.MutateFrom(ctx, tx, snap.Config(), snap.Version, func(c *site.Config) error {
			n := len(c.Machines)
			c.Machines = slices.DeleteFunc(c.Machines, func(m site.Machine) bool { return m.Name == name })
			if len(c.Machines) == n {
				return site.NotFound(site.KindMachine, name)
			}
			return nil
		})
		if err != nil {
			return err
		}
		return site.RecordPlan(ctx, tx, actor, m.Plan)
	})
	if err != nil {
		return err
	}
	if ended > 0 {
		b.log.WarnContext(ctx, "machine deleted with live sessions; they were ended", "machine", name, "sessions", ended)
	}
	b.Publish(m.Version, m.Config)
	return nil
}

// logoffAll asks a registered machine's VDA to log off its live sessions.
func (b *Broker) logoffAll(ctx context.Context, name string) {
	ms, ok := b.machines.get(name)
	if !ok || !ms.registered {
		return
	}
	var live []site.Session
	err := b.store.View(ctx, func(tx site.Tx) error {
		p, err := tx.Sessions().List(ctx, site.SessionFilter{Machine: name, Live: true}, site.ListOptions{})
		live = p.Items
		return err
	})
	if err != nil {
		return
	}
	for _, s := range live {
		if s.State == site.SessionPending {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, b.cfg.PrepareTimeout)
		if err := b.cfg.Control.Logoff(cctx, ms.control, s.ID); err != nil {
			b.log.WarnContext(ctx, "VDA logoff failed; ending the session anyway", "machine", name, "session", s.ID, "err", err)
		}
		cancel()
	}
}
