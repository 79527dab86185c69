package broker

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// Defaults for Config.
const (
	DefaultHeartbeatInterval = 3 * time.Second
	DefaultHeartbeatTimeout  = 10 * time.Second
	DefaultTicketTTL         = 90 * time.Second
	DefaultRefreshInterval   = time.Second
	DefaultPrepareTimeout    = 5 * time.Second
	// maxAttempts bounds the machines a launch tries before giving up.
	maxAttempts = 8
	// refusalCoolDown keeps a machine whose VDA refused a session out of
	// selection, so that one broken VDA does not fail launch after launch.
	refusalCoolDown = 30 * time.Second
)

// VDAControl reaches VDAs. Implementations must honour ctx and return an
// error when the VDA did not accept the request.
type VDAControl interface {
	Prepare(ctx context.Context, c Control, req vdaproto.PrepareRequest) error
	Logoff(ctx context.Context, c Control, sessionID string) error
	Disconnect(ctx context.Context, c Control, sessionID string) error
}

// Config configures a Broker.
type Config struct {
	Store   site.Store
	Control VDAControl
	Logger  *slog.Logger
	Metrics *Metrics
	// Verified caches verified user passwords; nil makes one.
	Verified          *auth.VerifiedCache
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	TicketTTL         time.Duration
	RefreshInterval   time.Duration
	PrepareTimeout    time.Duration
	Now               func() time.Time

	// LockoutThreshold failed logons within LockoutWindow lock a user out
	// for LockoutDuration; a negative threshold turns lock-out off.
	LockoutThreshold int
	LockoutWindow    time.Duration
	LockoutDuration  time.Duration
	// MaxConcurrent bounds the brokering transactions in flight (Citrix's
	// ThrottledRequestAddressMaxConcurrentTransactions); over it, Admit
	// refuses at once. 0 means DefaultMaxConcurrent; negative, no bound.
	MaxConcurrent int
}

// DefaultMaxConcurrent is the default bound on brokering transactions in
// flight per broker.
const DefaultMaxConcurrent = 256

// Broker enumerates and launches resources for users and keeps track of
// VDAs and sessions. Enumeration is served from an in-memory snapshot of
// the configuration; a launch costs one site DB transaction that claims one
// machine's status.
type Broker struct {
	cfg       Config
	log       *slog.Logger
	store     site.Store
	snap      atomic.Pointer[Snapshot]
	machines  *table
	metrics   *Metrics
	lockout   *lockout
	admission *admission
}

// Admit takes one of the broker's transaction slots, or returns
// ErrOverloaded at once when all are taken. Transports call it around each
// request they broker and call the returned function when done.
func (b *Broker) Admit() (func(), error) {
	release, err := b.admission.admit()
	if err != nil {
		b.metrics.refused.Inc()
	}
	return release, err
}

// New loads the configuration and machine statuses and returns a Broker.
// Call Run to keep it current.
func New(ctx context.Context, cfg Config) (*Broker, error) {
	if cfg.Store == nil || cfg.Control == nil {
		return nil, errors.New("broker: Store and Control are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Verified == nil {
		cfg.Verified = auth.NewVerifiedCache(15*time.Minute, 100000)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	cfg.HeartbeatInterval = cmpOr(cfg.HeartbeatInterval, DefaultHeartbeatInterval)
	cfg.HeartbeatTimeout = cmpOr(cfg.HeartbeatTimeout, DefaultHeartbeatTimeout)
	cfg.TicketTTL = cmpOr(cfg.TicketTTL, DefaultTicketTTL)
	cfg.RefreshInterval = cmpOr(cfg.RefreshInterval, DefaultRefreshInterval)
	cfg.PrepareTimeout = cmpOr(cfg.PrepareTimeout, DefaultPrepareTimeout)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LockoutThreshold == 0 {
		cfg.LockoutThreshold = DefaultLockoutThreshold
	}
	cfg.LockoutWindow = cmpOr(cfg.LockoutWindow, DefaultLockoutWindow)
	cfg.LockoutDuration = cmpOr(cfg.LockoutDuration, DefaultLockoutDuration)
	if cfg.MaxConcurrent == 0 {
		cfg.MaxConcurrent = DefaultMaxConcurrent
	}
	b := &Broker{cfg: cfg, log: cfg.Logger, store: cfg.Store, machines: newTable(cfg.Now), metrics: cfg.Metrics,
		lockout:   newLockout(cfg.LockoutThreshold, cfg.LockoutWindow, cfg.LockoutDuration, cfg.Now),
		admission: newAdmission(cfg.MaxConcurrent)}
	if err := b.Refresh(ctx); err != nil {
		return nil, err
	}
	if err := b.loadStatuses(ctx); err != nil {
		return nil, err
	}
	b.metrics.attach(b)
	return b, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// HeartbeatInterval and HeartbeatTimeout are told to VDAs at registration.
func (b *Broker) HeartbeatInterval() time.Duration { return b.cfg.HeartbeatInterval }
func (b *Broker) HeartbeatTimeout() time.Duration  { return b.cfg.HeartbeatTimeout }

// Snapshot returns the current configuration snapshot.
func (b *Broker) Snapshot() *Snapshot { return b.snap.Load() }

// Refresh reloads the snapshot when the configuration version moved.
func (b *Broker) Refresh(ctx context.Context) error {
	var version int64
	var cfg *site.Config
	cur := b.snap.Load()
	err := b.store.View(ctx, func(tx site.Tx) error {
		var err error
		if version, err = tx.ConfigVersion(ctx); err != nil || (cur != nil && cur.Version == version) {
			return err
		}
		cfg, err = site.LoadConfig(ctx, tx)
		return err
	})
	if err != nil {
		return fmt.Errorf("refresh configuration: %w", err)
	}
	if cfg == nil {
		return nil
	}
	s := NewSnapshot(version, cfg)
	b.machines.configure(s)
	b.snap.Store(s)
	b.log.Debug("configuration snapshot", "version", version)
	return nil
}

func (b *Broker) loadStatuses(ctx context.Context) error {
	return b.store.View(ctx, func(tx site.Tx) error {
		for name := range b.Snapshot().machines {
			st, err := tx.MachineStatus(ctx, name)
			if err != nil {
				return err
			}
			b.machines.sync(name, st)
		}
		return nil
	})
}

// Run keeps the broker current until ctx is done: it reloads the snapshot
// when the configuration changes, unregisters machines that stopped
// heartbeating and ends sessions whose user never arrived.
func (b *Broker) Run(ctx context.Context) error {
	refresh := time.NewTicker(b.cfg.RefreshInterval)
	defer refresh.Stop()
	sweep := time.NewTicker(max(b.cfg.HeartbeatInterval/3, 50*time.Millisecond))
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-refresh.C:
			if err := b.Refresh(ctx); err != nil && ctx.Err() == nil {
				b.log.Warn("configuration refresh failed", "err", err)
			}
		case <-sweep.C:
			b.expireMachines(ctx)
			b.expirePending(ctx)
		}
	}
}

// Authenticate verifies a user's password. It returns ErrBadCredentials
// for an unknown user, a wrong password or a user without a password;
// ErrAccountLocked for a user locked out by failed logons (checked before
// the password, so a locked account costs no hashing); and, only when the
// password is right, ErrAccountDisabled for a disabled user. Repeated
// verifications are served from a cache.
func (b *Broker) Authenticate(ctx context.Context, name, password string) (*site.User, error) {
	s := b.Snapshot()
	u, ok := s.User(name)
	if !ok || u.PasswordHash == "" {
		auth.VerifyPassword(dummyHash, password) // same cost as a wrong password
		return nil, ErrBadCredentials
	}
	if b.lockout.locked(u.Name) {
		return nil, ErrAccountLocked
	}
	ok, err := b.cfg.Verified.Verify("user\x00"+u.Name, password, u.PasswordHash)
	if err != nil {
		b.log.Error("stored password hash is malformed", "user", u.Name, "err", err)
		return nil, ErrBadCredentials
	}
	if !ok {
		if b.lockout.fail(u.Name) {
			b.cfg.Verified.Forget("user\x00" + u.Name)
			b.log.Warn("user locked out after failed logons", "user", u.Name, "for", b.cfg.LockoutDuration)
		}
		return nil, ErrBadCredentials
	}
	if u.Disabled {
		b.cfg.Verified.Forget("user\x00" + u.Name)
		return nil, ErrAccountDisabled
	}
	b.lockout.succeed(u.Name)
	return u, nil
}

// dummyHash is an argon2id hash of a random password with the default
// cost, verified for unknown users.
var dummyHash = func() string {
	h, err := auth.HashPassword(auth.RandomSecret(16), auth.DefaultParams)
	if err != nil {
		panic(err)
	}
	return h
}()

// Resources returns what the user may use, from the snapshot.
func (b *Broker) Resources(ctx context.Context, user string) *Entitlements {
	defer b.metrics.begin(OpEnumerate)(nil)
	return b.Snapshot().EntitlementsOf(user)
}

// LaunchRequest asks for a session.
type LaunchRequest struct {
	User, Resource            string
	ClientName, ClientAddress string
}

// Launch is a placed session and how to reach it.
type Launch struct {
	Session   site.Session
	Address   string // host:port of the display protocol
	Protocol  string
	Ticket    string
	ExpiresAt time.Time
	// Reconnected is set when the launch returned to an existing session.
	Reconnected bool
}

// ErrNotEntitled is returned for a resource the user may not use, and for
// one that does not exist: the answer must not tell the two apart.
var ErrNotEntitled = site.Errorf(site.EForbidden, "the resource is not available to you")

// Launch places a session for the user: back on the user's existing
// session of the resource's delivery group when the reconnection policy
// allows, else on the least-loaded eligible machine, claimed atomically.
// Errors: ErrNotEntitled; an ENoCapacity error when no machine can take
// it; EUnavailable when the site DB cannot be reached.
func (b *Broker) Launch(ctx context.Context, req LaunchRequest) (l *Launch, err error) {
	op := OpLaunch
	done := b.metrics.beginAs(OpLaunch, func() string { return op })
	defer func() { done(err) }()
	s := b.Snapshot()
	res, ok := s.Resource(req.Resource)
	groups := s.EntitlementsOf(req.User).Groups(req.Resource)
	if !ok || len(groups) == 0 {
		return nil, ErrNotEntitled
	}
	if l, err := b.reconnect(ctx, s, req, res, groups); l != nil || err != nil {
		if l != nil {
			op = OpReconnect
			b.metrics.reconnects.Inc()
		}
		return l, err
	}
	for _, g := range groups {
		dg, _ := s.DeliveryGroup(g)
		if l, err := b.place(ctx, s, req, res, dg); l != nil || err != nil {
			return l, err
		}
	}
	return nil, site.Errorf(site.ENoCapacity, "no available machine for %q", res.DisplayName)
}

// reconnect returns the user to an existing session of the resource's
// delivery groups, or nil when there is none to return to.
func (b *Broker) reconnect(ctx context.Context, s *Snapshot, req LaunchRequest, res *site.Resource, groups []string) (*Launch, error) {
	var sessions []site.Session
	err := b.store.View(ctx, func(tx site.Tx) error {
		p, err := tx.Sessions().List(ctx, site.SessionFilter{User: req.User, Live: true}, site.ListOptions{})
		sessions = p.Items
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	for _, sess := range sessions {
		if !slices.Contains(groups, sess.DeliveryGroup) || !sameSessionFor(s, sess, res) {
			continue
		}
		dg, _ := s.DeliveryGroup(sess.DeliveryGroup)
		if !mayReconnect(dg.Reconnect, sess, req.ClientName) {
			continue
		}
		ms, ok := b.machines.get(sess.Machine)
		if !ok || !ms.registered {
			continue
		}
		ticket, exp := b.newTicket()
		prep := vdaproto.PrepareRequest{SessionID: sess.ID, User: sess.User, Resource: res.Name, CommandLine: res.CommandLine,
			Reconnect: sess.State != site.SessionPending, TicketHash: vdaproto.TicketHash(ticket), ExpiresAt: exp}
		pctx, cancel := context.WithTimeout(ctx, b.cfg.PrepareTimeout)
		err := b.cfg.Control.Prepare(pctx, ms.control, prep)
		cancel()
		if err != nil {
			b.log.Warn("reconnect: VDA refused", "machine", ms.name, "session", sess.ID, "err", err)
			continue
		}
		return &Launch{Session: sess, Address: ms.address, Protocol: ms.protocol, Ticket: ticket, ExpiresAt: exp, Reconnected: true}, nil
	}
	return nil, nil
}

// sameSessionFor reports whether an existing session serves the resource:
// a desktop only its own desktop session; an application any application
// session of the same delivery group (session sharing).
func sameSessionFor(s *Snapshot, sess site.Session, res *site.Resource) bool {
	if sess.State == site.SessionLoggedOff {
		return false
	}
	if sess.Resource == res.Name {
		return true
	}
	other, ok := s.Resource(sess.Resource)
	return ok && res.Kind == site.Application && other.Kind == site.Application
}

func mayReconnect(p site.ReconnectPolicy, sess site.Session, client string) bool {
	switch sess.State {
	case site.SessionDisconnected, site.SessionPending:
		return true
	case site.SessionActive:
		return p == site.ReconnectAlways || (p == site.ReconnectSameEndpointOnly && client != "" && client == sess.ClientName)
	}
	return false
}

// place puts a new session on a machine of the delivery group.
func (b *Broker) place(ctx context.Context, s *Snapshot, req LaunchRequest, res *site.Resource, dg *site.DeliveryGroup) (*Launch, error) {
	skip := map[string]bool{}
	for range maxAttempts {
		ms, ok := b.pickFor(s, req.User, dg, skip)
		if !ok {
			return nil, nil
		}
		skip[ms.name] = true
		l, err := b.claim(ctx, s, req, res, dg, ms)
		if err != nil || l != nil {
			return l, err
		}
	}
	return nil, nil
}

// pickFor chooses a candidate: for assigned desktops the user's own
// machine when it has one, else the least-loaded free machine.
func (b *Broker) pickFor(s *Snapshot, user string, dg *site.DeliveryGroup, skip map[string]bool) (machineState, bool) {
	for _, m := range s.MachinesOf(dg.Name) {
		if m.AssignedUser == user && !skip[m.Name] {
			var ms machineState
			ok := b.machines.update(m.Name, func(x *machineState) {
				if x.eligible(true) {
					x.inflight++
					ms = *x
				}
			})
			return ms, ok && ms.name != ""
		}
	}
	return b.machines.pick(dg.Name, skip)
}

// claim takes a slot on the candidate in the site DB, records the session
// and asks the VDA to prepare it. It returns nil, nil when the machine
// turned out unable to take it, so the caller tries another.
func (b *Broker) claim(ctx context.Context, s *Snapshot, req LaunchRequest, res *site.Resource, dg *site.DeliveryGroup, ms machineState) (*Launch, error) {
	now := b.cfg.Now().UTC()
	sess := site.Session{ID: newID(), User: req.User, Resource: res.Name, DeliveryGroup: dg.Name, Machine: ms.name,
		State: site.SessionPending, ClientName: req.ClientName, ClientAddress: req.ClientAddress, CreatedAt: now, UpdatedAt: now}
	var st site.MachineStatus
	claimed := false
	err := b.store.Update(ctx, func(tx site.Tx) error {
		var err error
		if st, err = tx.MachineStatus(ctx, ms.name); err != nil {
			return err
		}
		if st.Registration != site.Registered || ms.maintenance || (ms.limit > 0 && st.Sessions >= ms.limit) {
			return nil // someone else took it, or it went away
		}
		st.Sessions++
		st.LogonsInProgress++
		st.LoadIndex = LoadOf(ms.rules, ms.limit, usageOf(st)).Index
		if err := tx.SetMachineStatus(ctx, ms.name, st); err != nil {
			return err
		}
		if err := tx.Sessions().Create(ctx, sess); err != nil {
			return err
		}
		if ms.kind == site.SingleSessionAssigned && ms.assigned == "" {
			m, err := tx.Machines().Get(ctx, ms.name)
			if err != nil {
				return err
			}
			m.AssignedUser = req.User
			if err := tx.Machines().Update(ctx, m); err != nil {
				return err
			}
		}
		claimed = true
		return nil
	})
	if err != nil {
		b.machines.settle(ms.name, false, nil)
		return nil, fmt.Errorf("claim machine %q: %w", ms.name, err)
	}
	b.machines.settle(ms.name, claimed, &st)
	if !claimed {
		return nil, nil
	}
	if ms.kind == site.SingleSessionAssigned && ms.assigned == "" {
		b.machines.update(ms.name, func(x *machineState) { x.assigned = req.User })
	}

	ticket, exp := b.newTicket()
	prep := vdaproto.PrepareRequest{SessionID: sess.ID, User: req.User, Resource: res.Name, CommandLine: res.CommandLine,
		TicketHash: vdaproto.TicketHash(ticket), ExpiresAt: exp}
	pctx, cancel := context.WithTimeout(ctx, b.cfg.PrepareTimeout)
	err = b.cfg.Control.Prepare(pctx, ms.control, prep)
	cancel()
	if err != nil {
		b.log.Warn("VDA refused a session; trying another machine", "machine", ms.name, "session", sess.ID, "err", err)
		b.machines.coolDown(ms.name, b.cfg.Now().Add(refusalCoolDown))
		if err := b.endSession(context.WithoutCancel(ctx), sess.ID, ms.name); err != nil {
			b.log.Error("release refused session", "session", sess.ID, "err", err)
		}
		return nil, nil
	}
	b.log.Debug("session placed", "session", sess.ID, "user", req.User, "machine", ms.name)
	return &Launch{Session: sess, Address: ms.address, Protocol: ms.protocol, Ticket: ticket, ExpiresAt: exp}, nil
}

func usageOf(st site.MachineStatus) Usage {
	return Usage{Sessions: st.Sessions, LogonsInProgress: st.LogonsInProgress, CPUPercent: st.CPUPercent,
		MemoryPercent: st.MemoryPercent, MemoryUsedMB: st.MemoryUsedMB, MemoryTotalMB: st.MemoryTotalMB}
}

func (b *Broker) newTicket() (string, time.Time) {
	return randomToken(32), b.cfg.Now().Add(b.cfg.TicketTTL).UTC()
}

func randomToken(n int) string {
	buf := make([]byte, n)
	rand.Read(buf)
	return base64.RawURLEncoding.EncodeToString(buf)
}

func newID() string { return strings.ToLower(randomToken(12)) }

// endSession marks a session on machine logged off and gives its slot
// back. It is a no-op for a session already ended, and EForbidden for a
// session on another machine.
func (b *Broker) endSession(ctx context.Context, id, machine string) error {
	var wasPending, changed bool
	err := b.store.Update(ctx, func(tx site.Tx) error {
		sess, err := tx.Sessions().Get(ctx, id)
		if err != nil {
			return err
		}
		if sess.Machine != machine {
			return site.Errorf(site.EForbidden, "session %q is not on machine %q", id, machine)
		}
		if sess.State == site.SessionLoggedOff {
			return nil
		}
		st, err := tx.MachineStatus(ctx, sess.Machine)
		if err != nil {
			return err
		}
		wasPending = sess.State == site.SessionPending
		st.Sessions = max(0, st.Sessions-1)
		if wasPending {
			st.LogonsInProgress = max(0, st.LogonsInProgress-1)
		}
		b.rescore(sess.Machine, &st)
		if err := tx.SetMachineStatus(ctx, sess.Machine, st); err != nil {
			return err
		}
		now := b.cfg.Now().UTC()
		sess.State, sess.UpdatedAt, sess.EndedAt = site.SessionLoggedOff, now, now
		changed = true
		return tx.Sessions().Update(ctx, sess)
	})
	if err == nil && changed {
		b.machines.ended(machine, wasPending)
	}
	return err
}

// rescore recomputes a stored status's load index under the machine's rules.
func (b *Broker) rescore(machine string, st *site.MachineStatus) {
	if ms, ok := b.machines.get(machine); ok {
		st.LoadIndex = LoadOf(ms.rules, ms.limit, usageOf(*st)).Index
	}
}

// Metrics returns the broker's metrics, for transports that measure their
// own transactions.
func (b *Broker) Metrics() *Metrics { return b.metrics }
