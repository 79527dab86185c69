package broker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/site"
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

// VDAControl reaches VDAs at the Control they registered. Implementations
// must honour ctx and return an error when the VDA did not accept the
// request (or could not be reached); the broker then treats the machine
// as unable to serve the session.
type VDAControl interface {
	// Prepare tells a VDA that a session is coming.
	Prepare(ctx context.Context, c Control, p Prepare) error
	// Logoff asks a VDA to log a session off.
	Logoff(ctx context.Context, c Control, sessionID string) error
	// Disconnect asks a VDA to disconnect a session.
	Disconnect(ctx context.Context, c Control, sessionID string) error
}

// Prepare tells a VDA that a session is coming: a new one, or a
// reconnection to an existing one.
type Prepare struct {
	SessionID, User, Resource string
	CommandLine               string
	Reconnect                 bool
	// Ticket is what the user's client will present to the VDA, until
	// ExpiresAt. A VDAControl must not hand the ticket itself to the VDA,
	// only what lets the VDA check a presented ticket (its hash).
	Ticket    string
	ExpiresAt time.Time
}

// Config configures a Broker.
type Config struct {
	Store   site.Store
	Control VDAControl
	Logger  *slog.Logger
	// Observer is told about transactions, for metrics; nil observes
	// nothing.
	Observer Observer
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
	// SourceFree failed logons from one client address within the
	// lock-out window cost nothing; after them the address must wait a
	// delay growing with each failure (auth.GuardConfig). Negative turns
	// per-source throttling off.
	SourceFree int
	// Guard, when set, reserves password checks instead of a guard made
	// from the fields above; a server shares one between users and
	// admins.
	Guard *auth.Guard
	// PasswordParams are the costs of the site's password hashes, which an
	// unknown user's logon spends too (default auth.DefaultParams).
	PasswordParams auth.Params
	// MaxConcurrent bounds the brokering transactions in flight (Citrix's
	// ThrottledRequestAddressMaxConcurrentTransactions); over it, Admit
	// refuses at once. 0 means DefaultMaxConcurrent; negative, no bound.
	MaxConcurrent int

	// AllowAddressChange lets a VDA register a display-protocol address
	// whose host differs from its machine's configured address. Off, such
	// a registration is refused.
	AllowAddressChange bool
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
	refreshMu sync.Mutex // one Refresh at a time, so that an older snapshot never replaces a newer one
	machines  *table
	obs       Observer
	guard     *auth.Guard
	admission *admission
	// dummyHash is verified against (as a decoy) for unknown users.
	dummyHash string
}

// Admit takes one of the broker's transaction slots, or returns
// ErrOverloaded at once when all are taken. Transports call it around each
// request they broker and call the returned function when done.
func (b *Broker) Admit() (func(), error) {
	release, err := b.admission.admit()
	if err != nil {
		b.obs.Refused()
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
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	// A zero or negative duration means the default.
	cfg.HeartbeatInterval = cmp.Or(max(cfg.HeartbeatInterval, 0), DefaultHeartbeatInterval)
	cfg.HeartbeatTimeout = cmp.Or(max(cfg.HeartbeatTimeout, 0), DefaultHeartbeatTimeout)
	cfg.TicketTTL = cmp.Or(max(cfg.TicketTTL, 0), DefaultTicketTTL)
	cfg.RefreshInterval = cmp.Or(max(cfg.RefreshInterval, 0), DefaultRefreshInterval)
	cfg.PrepareTimeout = cmp.Or(max(cfg.PrepareTimeout, 0), DefaultPrepareTimeout)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Guard == nil {
		cfg.Guard = auth.NewGuard(auth.GuardConfig{Threshold: cfg.LockoutThreshold, Window: cfg.LockoutWindow,
			Duration: cfg.LockoutDuration, SourceFree: cfg.SourceFree, Now: cfg.Now})
	}
	if cfg.PasswordParams == (auth.Params{}) {
		cfg.PasswordParams = auth.DefaultParams
	}
	dummy, err := auth.HashPassword(auth.RandomSecret(16), cfg.PasswordParams)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	if cfg.MaxConcurrent == 0 {
		cfg.MaxConcurrent = DefaultMaxConcurrent
	}
	b := &Broker{cfg: cfg, log: cfg.Logger, store: cfg.Store, machines: newTable(cfg.Now), obs: cfg.Observer,
		guard: cfg.Guard, admission: newAdmission(cfg.MaxConcurrent), dummyHash: dummy}
	if err := b.Refresh(ctx); err != nil {
		return nil, err
	}
	if err := b.loadStatuses(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// HeartbeatInterval and HeartbeatTimeout are told to VDAs at registration.
func (b *Broker) HeartbeatInterval() time.Duration { return b.cfg.HeartbeatInterval }
func (b *Broker) HeartbeatTimeout() time.Duration  { return b.cfg.HeartbeatTimeout }

// Snapshot returns the current configuration snapshot.
func (b *Broker) Snapshot() *Snapshot { return b.snap.Load() }

// Refresh reloads the snapshot when the configuration version moved.
// Run calls it every RefreshInterval; the admin API calls it after each
// change, so that a change (a new password) takes effect at once on the
// broker that made it. It is safe for concurrent use.
func (b *Broker) Refresh(ctx context.Context) error {
	b.refreshMu.Lock()
	defer b.refreshMu.Unlock()
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

// Authenticate verifies a user's password, given from the client address
// source ("" for none: not throttled). Every check of a password is
// reserved with the guard before any hashing, so that no concurrency gets
// more checks than the lock-out allows, and a right password is re-checked
// against the lock before it is accepted. Errors:
//   - a *ThrottledError (EOverloaded) when the source must wait, before
//     anything is checked;
//   - ErrBadCredentials for an unknown user, a wrong password or a user
//     without a password, and a *LockedError (errors.Is both
//     ErrAccountLocked and ErrBadCredentials) for a locked-out user: both
//     cost one hash, so that neither answer nor time tells them apart;
//   - only when the password is right, ErrAccountDisabled for a disabled
//     user.
//
// Repeated verifications are served from a cache.
func (b *Broker) Authenticate(ctx context.Context, name, password, source string) (*site.User, error) {
	s := b.Snapshot()
	u, ok := s.User(name)
	if !ok || u.PasswordHash == "" {
		at, err := b.guard.Reserve("", source)
		if err != nil {
			return nil, b.refused(name, source, err)
		}
		b.cfg.Verified.Decoy(b.dummyHash, password) // same cost as a wrong password
		at.Fail()
		return nil, ErrBadCredentials
	}
	key := "user\x00" + u.Name
	// Concurrent logons with one password share one check and one
	// reservation: their sources are not charged, as they add no guess.
	ok, err, shared := b.cfg.Verified.Share(key, password, u.PasswordHash, func() (bool, error) {
		return b.check(u, key, password, source)
	})
	if shared && errors.Is(err, auth.ErrThrottled) {
		// The first caller's source was throttled, not necessarily ours.
		ok, err = b.check(u, key, password, source)
	}
	if err != nil {
		return nil, b.refused(u.Name, source, err)
	}
	if !ok {
		return nil, ErrBadCredentials
	}
	if u.Disabled {
		b.cfg.Verified.Forget(key)
		return nil, ErrAccountDisabled
	}
	return u, nil
}

// check reserves a password check of u from source, verifies the
// password and reports the verdict to the guard. It returns the guard's
// refusal, if any, as an error, and a wrong password as false.
func (b *Broker) check(u *site.User, key, password, source string) (bool, error) {
	at, err := b.guard.Reserve(key, source)
	if err != nil {
		if errors.Is(err, auth.ErrLocked) {
			b.cfg.Verified.Decoy(u.PasswordHash, password)
		}
		return false, err
	}
	ok, err := b.cfg.Verified.Verify(key, password, u.PasswordHash)
	if err != nil {
		b.log.Error("stored password hash is malformed", "user", u.Name, "err", err)
	}
	if !ok {
		if at.Fail() {
			b.cfg.Verified.Forget(key)
			b.log.Warn("user locked out after failed logons", "user", u.Name, "for", b.guard.Config().Duration, "remote", source)
		}
		return false, nil
	}
	if err := at.Succeed(); err != nil {
		b.cfg.Verified.Forget(key)
		return false, err
	}
	return true, nil
}

// refused turns a guard's refusal into the broker's error, and logs it.
func (b *Broker) refused(user, source string, err error) error {
	var locked *auth.LockedError
	var throttled *auth.ThrottledError
	switch {
	case errors.As(err, &locked):
		b.log.Info("logon refused: account locked out", "user", user, "remote", source, "left", locked.Left)
		return &LockedError{Duration: b.guard.Config().Duration, Left: locked.Left}
	case errors.As(err, &throttled):
		b.log.Info("logon refused: source throttled", "user", user, "remote", source, "retry_after", throttled.RetryAfter)
		return &ThrottledError{RetryAfter: throttled.RetryAfter}
	}
	return err
}

// Guard returns the guard that reserves the broker's password checks.
func (b *Broker) Guard() *auth.Guard { return b.guard }

// Verified returns the broker's cache of verified passwords.
func (b *Broker) Verified() *auth.VerifiedCache { return b.cfg.Verified }

// Resources returns what the user may use, from the snapshot.
func (b *Broker) Resources(ctx context.Context, user string) *Entitlements {
	defer b.begin(OpEnumerate)(nil)
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
func (b *Broker) Launch(ctx context.Context, req LaunchRequest) (*Launch, error) {
	return b.launch(ctx, req, OpLaunch)
}

// launch is Launch, counted in flight as started (OpLaunch, or
// OpReconnect for a reconnection the user asked for).
func (b *Broker) launch(ctx context.Context, req LaunchRequest, started string) (l *Launch, err error) {
	op := OpLaunch
	done := b.beginAs(started, func() string { return op })
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
			b.obs.Reconnected()
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
		prep := Prepare{SessionID: sess.ID, User: sess.User, Resource: res.Name, CommandLine: res.CommandLine,
			Reconnect: sess.State != site.SessionPending, Ticket: ticket, ExpiresAt: exp}
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
		st.LoadIndex = LoadOf(ms.rules, ms.limit, st.Usage).Index
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
	prep := Prepare{SessionID: sess.ID, User: req.User, Resource: res.Name, CommandLine: res.CommandLine,
		Ticket: ticket, ExpiresAt: exp}
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
		st.LoadIndex = LoadOf(ms.rules, ms.limit, st.Usage).Index
	}
}
