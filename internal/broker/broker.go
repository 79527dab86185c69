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
	// DefaultStatusSyncInterval is how often a broker of a shared site
	// rereads every machine's status, to learn what the other brokers
	// changed: registrations, heartbeats, sessions started and ended.
	DefaultStatusSyncInterval = 2 * time.Second
	DefaultPrepareTimeout     = 5 * time.Second
	// maxAttempts bounds the machines a launch tries before giving up.
	maxAttempts = 8
	// refusalCoolDown keeps a machine whose VDA refused a session out of
	// selection, so that one broken VDA does not fail launch after launch.
	refusalCoolDown = 30 * time.Second
)

// VDAControl reaches VDAs at the Control they registered. Implementations
// must honour ctx and return an error when the VDA did not accept the
// request (or could not be reached); the broker then treats the machine
// as unable to serve the session. An error that wraps ErrNoSuchSession
// says the VDA answered that it holds no such session.
type VDAControl interface {
	// Prepare tells a VDA that a session is coming.
	Prepare(ctx context.Context, c Control, p Prepare) error
	// Logoff asks a VDA to log a session off.
	Logoff(ctx context.Context, c Control, sessionID string) error
	// Disconnect asks a VDA to disconnect a session.
	Disconnect(ctx context.Context, c Control, sessionID string) error
}

// ErrNoSuchSession is what a VDAControl's error wraps when the VDA
// answered that it holds no session of that ID: for a reconnection, the
// site's record of the session outlived it (its logoff's report was lost
// with a site DB, say), and the broker ends it.
var ErrNoSuchSession = errors.New("the VDA holds no such session")

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
	// IdleDisconnect is the delivery group's idle_disconnect timer: the
	// VDA disconnects a session whose viewer sent no input for so long;
	// 0: never.
	IdleDisconnect time.Duration
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
	// Zone is the zone of the broker: the user location of the launches it
	// takes. With OwnZoneVDAs, the broker serves only the VDAs of its zone
	// (and, in the primary zone, of zones that fall back to it); without,
	// every zone's, as the one broker of a small site does.
	Zone        string
	OwnZoneVDAs bool
	// StatusSyncInterval is how often the broker rereads every machine's
	// status from the site DB (default DefaultStatusSyncInterval);
	// negative: never, for a broker alone on its site DB, which then
	// knows every change as it makes it.
	StatusSyncInterval time.Duration
	PrepareTimeout     time.Duration
	Now                func() time.Time

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
	// SiteLockout keeps the lock-out counts of accounts in the site DB as
	// well, shared by every broker of the site (CheckPassword).
	SiteLockout bool
	// LockoutRecheck is, with SiteLockout, how long a user's password
	// that this broker verified and found not locked out site-wide is
	// taken again from the verified cache without asking the site DB
	// (Authenticate): a lock made through another broker, or by an
	// admin, holds here that much later at most. 0 means
	// DefaultLockoutRecheck; negative asks the site DB every time.
	LockoutRecheck time.Duration
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

	// OpenDirectory opens the site's directory (LDAP, Active Directory)
	// when its settings are enabled; nil: the site's own users only.
	OpenDirectory OpenDirectory

	// AllowAddressChange lets a VDA register a display-protocol address
	// whose host differs from its machine's configured address. Off, such
	// a registration is refused.
	AllowAddressChange bool
}

// DefaultMaxConcurrent is the default bound on brokering transactions in
// flight per broker.
const DefaultMaxConcurrent = 256

// DefaultLockoutRecheck is Config.LockoutRecheck's default.
const DefaultLockoutRecheck = 2 * time.Second

// Broker enumerates and launches resources for users and keeps track of
// VDAs and sessions. Enumeration is served from an in-memory snapshot of
// the configuration; a launch costs one site.Placer call (one round trip
// to the site DB on stores that implement it), which reconnects the user
// or claims one machine's status, locking nothing wider than that machine.
type Broker struct {
	cfg       Config
	log       *slog.Logger
	store     site.Store
	snap      atomic.Pointer[Snapshot]
	refreshMu sync.Mutex // one Refresh or Publish at a time, so that an older snapshot never replaces a newer one
	// resyncMu serializes the status reads of launches that found no
	// machine; resyncStart is when the last began.
	resyncMu    sync.Mutex
	resyncStart time.Time
	// sweepBlocked is set while expireMachines finds the site DB
	// unavailable (the sweeping goroutine's alone).
	sweepBlocked bool
	// timersDue is when the sweep next checks the session timers (the
	// sweeping goroutine's alone).
	timersDue time.Time
	// started is when New made the broker: a machine whose last heartbeat
	// is older was registered in an earlier run, and is unregistered
	// with the others in one log line, not warned of one by one.
	started    time.Time
	events     batcher[*pendingEvent]
	heartbeats batcher[*pendingHeartbeat]
	machines   *table
	obs        Observer
	guard      *auth.Guard
	siteClear  siteClear
	admission  *admission
	// delegate, when set, hands brokering to another broker (SetDelegate).
	delegate Delegate
	// refusing is set once a registration was refused because another
	// broker leads the zone, and cleared when one is taken again: the
	// first refusal is logged at info, the rest (one per VDA heartbeat)
	// at debug.
	refusing atomic.Bool
	// launches lets one launch of a user at a time through this broker.
	launches userGate
	// dummyHash is verified against (as a decoy) for unknown users.
	dummyHash string
	// dir is the site's directory and the users read from it.
	dir atomic.Pointer[directoryState]
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
	cfg.LockoutRecheck = cmp.Or(cfg.LockoutRecheck, DefaultLockoutRecheck)
	cfg.RefreshInterval = cmp.Or(max(cfg.RefreshInterval, 0), DefaultRefreshInterval)
	cfg.StatusSyncInterval = cmp.Or(cfg.StatusSyncInterval, DefaultStatusSyncInterval)
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
		guard: cfg.Guard, admission: newAdmission(cfg.MaxConcurrent), dummyHash: dummy, started: cfg.Now()}
	b.initBatchers()
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

// Refresh brings the snapshot up to the site's configuration version when
// it moved: when another process (another broker, usher apply) changed
// the configuration, or a change of this process was not published. It
// reads only the objects that changed since the snapshot's version when
// the store's change log reaches back that far (site.Refresh), the whole
// configuration otherwise. Run calls it when the store tells of a change
// (site.ConfigWatcher) and every RefreshInterval; the admin API calls it
// after each change, which then costs one read of the version, the change
// being published already. It is safe for concurrent use.
func (b *Broker) Refresh(ctx context.Context) error {
	b.refreshMu.Lock()
	defer b.refreshMu.Unlock()
	var base *site.Config
	var baseVersion int64
	if cur := b.snap.Load(); cur != nil {
		base, baseVersion = cur.Config(), cur.Version
	}
	var cfg *site.Config
	var version int64
	err := b.store.View(ctx, func(tx site.Tx) (err error) {
		cfg, version, err = site.Refresh(ctx, tx, base, baseVersion)
		return err
	})
	if err != nil {
		return fmt.Errorf("refresh configuration: %w", err)
	}
	if base != nil && version <= baseVersion {
		return nil
	}
	b.install(version, cfg)
	return nil
}

// Publish makes cfg, the site's whole configuration at version, the one
// the broker serves, without reading the site DB: the admin API calls it
// with the site.Mutation of a change once committed, so that the change
// is served at once, and the next change starts from cfg (see
// Snapshot.Config). A configuration no newer than the one served is
// ignored, so that changes published out of order, or after a Refresh
// read a newer one, never take the broker back; Publish reports whether
// it took cfg.
//
// cfg must be normalized and valid, and exactly what site.LoadConfig
// would read at version (a committed site.Mutation's Config is). The
// broker keeps it: no one may modify it afterwards.
func (b *Broker) Publish(version int64, cfg *site.Config) bool {
	b.refreshMu.Lock()
	defer b.refreshMu.Unlock()
	if cur := b.snap.Load(); cur != nil && cur.Version >= version {
		return false
	}
	b.install(version, cfg)
	return true
}

// install serves cfg at version. The caller holds refreshMu.
func (b *Broker) install(version int64, cfg *site.Config) {
	s, same := buildSnapshot(b.snap.Load(), version, cfg)
	if !same {
		b.machines.configure(s) // machines, catalogs or load rules changed
	}
	b.setDirectory(cfg)
	b.snap.Store(s)
	b.log.Debug("configuration snapshot", "version", version)
}

// loadStatuses reads every machine's status from the site DB, in one read,
// into the broker's table: at start, and every StatusSyncInterval on a
// shared site, where other brokers register machines, take their
// heartbeats and start and end sessions.
func (b *Broker) loadStatuses(ctx context.Context) error {
	var all map[string]site.MachineStatus
	err := b.store.View(ctx, func(tx site.Tx) (err error) {
		all, err = tx.MachineStatuses(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("machine statuses: %w", err)
	}
	for name, st := range all {
		b.machines.sync(name, st)
	}
	return nil
}

// resyncStatuses reads every machine's status again unless a read that
// began after since has done so already: concurrent launches that found
// no machine share one read (one in flight, one waiting at most), so that
// none is refused on a view older than its own start.
func (b *Broker) resyncStatuses(ctx context.Context, since time.Time) {
	b.resyncMu.Lock()
	defer b.resyncMu.Unlock()
	if b.resyncStart.After(since) {
		return
	}
	b.resyncStart = time.Now()
	if err := b.loadStatuses(ctx); err != nil && ctx.Err() == nil {
		b.log.Warn("machine status sync failed", "err", err)
	}
}

// Run keeps the broker current until ctx is done: it refreshes the
// snapshot when the configuration changes (at once when the store tells
// of changes, and every RefreshInterval in any case), unregisters machines
// that stopped heartbeating, ends sessions whose user never arrived and
// logs off sessions past their delivery group's session timers.
func (b *Broker) Run(ctx context.Context) error {
	changed := make(chan struct{}, 1)
	if w, ok := b.store.(site.ConfigWatcher); ok {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			b.watch(ctx, w, changed)
		}()
	}
	refresh := time.NewTicker(b.cfg.RefreshInterval)
	defer refresh.Stop()
	sweep := time.NewTicker(max(b.cfg.HeartbeatInterval/3, 50*time.Millisecond))
	defer sweep.Stop()
	var statuses <-chan time.Time
	if b.cfg.StatusSyncInterval > 0 {
		t := time.NewTicker(b.cfg.StatusSyncInterval)
		defer t.Stop()
		statuses = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			b.refresh(ctx)
		case <-refresh.C:
			b.refresh(ctx)
		case <-statuses:
			if err := b.loadStatuses(ctx); err != nil && ctx.Err() == nil {
				b.log.Warn("machine status sync failed", "err", err)
			}
		case <-sweep.C:
			b.expireMachines(ctx)
			b.expirePending(ctx)
			b.expireTimers(ctx)
		}
	}
}

func (b *Broker) refresh(ctx context.Context) {
	if err := b.Refresh(ctx); err != nil && ctx.Err() == nil {
		b.log.Warn("configuration refresh failed", "err", err)
	}
}

// watch signals changed whenever w tells of a configuration version newer
// than the snapshot's, and once it starts watching, so that nothing
// committed before is missed; it watches again, after a growing delay,
// whenever it loses the database.
func (b *Broker) watch(ctx context.Context, w site.ConfigWatcher, changed chan<- struct{}) {
	signal := func() {
		select {
		case changed <- struct{}{}:
		default: // a refresh is due already
		}
	}
	delay := b.cfg.RefreshInterval
	for ctx.Err() == nil {
		started := time.Now()
		err := w.WatchConfig(ctx, signal, func(version int64) {
			if s := b.snap.Load(); s == nil || version > s.Version {
				signal()
			}
		})
		if err == nil || ctx.Err() != nil {
			return
		}
		if time.Since(started) > time.Minute {
			delay = b.cfg.RefreshInterval
		}
		b.log.Warn("not told of configuration changes; checking every refresh interval meanwhile", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Minute)
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
//
// A name that is none of the site's users is the site directory's to
// check, when the site has one (Config.OpenDirectory, site.Directory),
// under the same reservations; name may then be DOMAIN\user or
// user@suffix too. Beside the errors above, a directory user may get
// ErrDirectoryLocked or ErrPasswordExpired (after a right password), and
// ErrDirectoryUnavailable when the directory cannot be reached. The user
// returned for a directory user is made from the directory's entry (its
// Directory field is set).
func (b *Broker) Authenticate(ctx context.Context, name, password, source string) (*site.User, error) {
	s := b.Snapshot()
	u, ok := s.User(name)
	if !ok {
		if st, key, ok := b.directory(name); ok {
			return b.authenticateDirectory(ctx, st, key, name, password, source)
		}
	}
	if !ok || u.PasswordHash == "" {
		if mustNotWait(ctx) {
			return nil, ErrWouldWait // the decoy costs a hash
		}
		at, err := b.guard.Reserve("", source)
		if err != nil {
			return nil, b.refused(name, source, err)
		}
		b.cfg.Verified.Decoy(b.dummyHash, password) // same cost as a wrong password
		at.Fail()
		return nil, ErrBadCredentials
	}
	key := guardKey(AccountUser, u.Name)
	cred := b.cfg.Verified.Credential(key, password, u.PasswordHash)
	if b.cfg.SiteLockout && cred.Known() && b.siteClear.fresh(key, b.cfg.Now()) {
		// A right password this broker checked moments ago against a
		// site DB that found the account not locked out: no guess to
		// count, and the site DB need not be asked again yet. The source
		// is still throttled.
		at, err := b.guard.Reserve("", source)
		if err != nil {
			return nil, b.refused(u.Name, source, err)
		}
		at.Succeed()
		if u.Disabled {
			return nil, ErrAccountDisabled
		}
		return u, nil
	}
	if mustNotWait(ctx) {
		// Only a password checked moments ago, and no site DB to ask.
		if b.siteWide() || !cred.Known() {
			return nil, ErrWouldWait
		}
		ok, err := b.check(ctx, u, key, cred, source)
		switch {
		case err != nil:
			return nil, b.refused(u.Name, source, err)
		case !ok:
			return nil, ErrBadCredentials
		case u.Disabled:
			b.cfg.Verified.Forget(key)
			return nil, ErrAccountDisabled
		}
		return u, nil
	}
	// Concurrent logons with one password share one check and one
	// reservation: their sources are not charged, as they add no guess.
	ok, err, shared := cred.Share(func() (bool, error) {
		return b.check(ctx, u, key, cred, source)
	})
	if shared && errors.Is(err, auth.ErrThrottled) {
		// The first caller's source was throttled, not necessarily ours.
		ok, err = b.check(ctx, u, key, cred, source)
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

// check verifies cred, u's password, from source under CheckPassword's
// reservations. It returns a refusal as an error (after a decoy hash for a
// locked account), and a wrong password as false.
func (b *Broker) check(ctx context.Context, u *site.User, key string, cred auth.Credential, source string) (bool, error) {
	verified := false
	ok, err := b.checkPassword(ctx, AccountUser, u.Name, key, source, func() bool {
		verified = true
		ok, err := cred.Verify()
		if err != nil {
			b.log.Error("stored password hash is malformed", "user", u.Name, "err", err)
		}
		return ok
	})
	if errors.Is(err, auth.ErrLocked) && !verified {
		cred.Decoy() // a refusal costs what a check does
	}
	return ok, err
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
	return b.EntitlementsOf(b.Snapshot(), user)
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
// A session still pending (placed, its user not yet logged on) is always
// gone back to, whatever the policy: concurrent launches of one resource
// by one user (a double click, two tabs, two brokers) give one session,
// each with its own ticket. Errors: ErrNotEntitled; an ENoCapacity error
// when no machine can take it; EUnavailable when the site DB cannot be
// reached.
func (b *Broker) Launch(ctx context.Context, req LaunchRequest) (*Launch, error) {
	if d := b.delegated(ctx); d != nil {
		return d.Launch(ctx, req)
	}
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
	groups := b.EntitlementsOf(s, req.User).Groups(req.Resource)
	if !ok || len(groups) == 0 {
		return nil, ErrNotEntitled
	}
	leave, err := b.launches.enter(ctx, req.User)
	if err != nil {
		return nil, err
	}
	defer leave()
	// Every placement carries the rule, so that the site DB, which seats
	// one user's placements one at a time, never creates a session while
	// one the launch may go back to is live: one that another launch of
	// the user (through another broker, say) placed since this launch's
	// previous placement found none.
	ln := &launching{s: s, req: req, res: res, rule: reconnectRule(s, req, res, groups)}
	for _, g := range groups {
		dg, _ := s.DeliveryGroup(g)
		l, err := b.place(ctx, ln, dg)
		if l != nil && l.Reconnected {
			op = OpReconnect
			b.obs.Reconnected()
		}
		if l != nil || err != nil {
			return l, err
		}
	}
	return nil, site.Errorf(site.ENoCapacity, "no available machine for %q", res.DisplayName)
}

// reconnectRule is what a launch of res may go back to: the user's
// sessions of the groups serving res (a desktop its own sessions, an
// application any application's: session sharing), as each group's
// reconnection policy allows.
func reconnectRule(s *Snapshot, req LaunchRequest, res *site.Resource, groups []string) *site.ReconnectRule {
	r := &site.ReconnectRule{Groups: groups, ClientName: req.ClientName}
	for _, g := range groups {
		dg, _ := s.DeliveryGroup(g)
		r.Policies = append(r.Policies, dg.Reconnect)
		if res.Kind == site.Application {
			r.Resources = append(r.Resources, s.appsOf[g]...)
		}
	}
	if res.Kind != site.Application {
		r.Resources = []string{res.Name}
	} else {
		slices.Sort(r.Resources)
		r.Resources = slices.Compact(r.Resources)
	}
	return r
}

// launching is a launch being placed.
type launching struct {
	s   *Snapshot
	req LaunchRequest
	res *site.Resource
	// rule selects the sessions the launch may go back to; every
	// placement carries it.
	rule *site.ReconnectRule
	// looked is set when the launch's latest placement offered no
	// candidate and found no session to go back to: until the launch has
	// a candidate to offer, asking again would tell nothing new.
	looked bool
}

// maxCandidates bounds the machines one placement offers the site DB: the
// broker's choice and the next best, in case its view is stale.
const maxCandidates = 4

// place seats the launch in the delivery group: each attempt is one
// site-DB round trip (site.Placer) that goes back to a session ln.rule
// allows, or claims the first of a few candidates that still has room.
// Every attempt that may claim carries ln.rule, so that it goes back to
// a session placed since an earlier attempt found none, rather than make
// a second. It returns nil, nil when the group has no machine for it.
func (b *Broker) place(ctx context.Context, ln *launching, dg *site.DeliveryGroup) (*Launch, error) {
	req, res := ln.req, ln.res
	skip := map[string]bool{}
	resynced := false
	for range maxAttempts {
		cands, picked, preferred := b.candidates(ln.s, req.User, dg, skip)
		if (len(cands) == 0 || !preferred) && !resynced && b.cfg.StatusSyncInterval > 0 {
			// The broker holds every machine full or unregistered, or
			// every machine of the zone the launch prefers, but other
			// brokers share the site and register machines there: read
			// the statuses as they are before refusing the launch or
			// seating it in a zone it likes less. Concurrent launches
			// share the read (resyncStatuses).
			resynced = true
			if picked != "" {
				b.machines.settle(picked, site.Placed{}, false) // the pick's in-flight count
			}
			b.resyncStatuses(ctx, time.Now())
			cands, picked, _ = b.candidates(ln.s, req.User, dg, skip)
		}
		if len(cands) == 0 && ln.looked {
			return nil, nil
		}
		now := b.cfg.Now().UTC()
		sess := site.Session{ID: newID(), User: req.User, Resource: res.Name, DeliveryGroup: dg.Name,
			State: site.SessionPending, ClientName: req.ClientName, ClientAddress: req.ClientAddress, CreatedAt: now, UpdatedAt: now}
		placed, err := b.store.Place(ctx, site.Placement{Session: sess, Reconnect: ln.rule, Candidates: cands})
		b.machines.settle(picked, placed, err == nil)
		if err != nil {
			return nil, fmt.Errorf("place session: %w", err)
		}
		// Candidates tried and passed over (refused, or gone from the
		// site DB) are not offered again.
		for _, c := range cands {
			if c.Machine == placed.Session.Machine {
				break
			}
			skip[c.Machine] = true
		}
		switch {
		case placed.Reconnect != nil:
			if l := b.prepare(ctx, res, *placed.Reconnect, placed.Status, true); l != nil {
				return l, nil
			}
			ln.rule.Skip = append(ln.rule.Skip, placed.Reconnect.ID)
		case placed.Session.ID != "":
			if cand(cands, placed.Session.Machine).Assign {
				b.machines.update(placed.Session.Machine, func(x *machineState) { x.assigned = req.User })
			}
			if l := b.prepare(ctx, res, placed.Session, placed.Status, false); l != nil {
				return l, nil
			}
			skip[placed.Session.Machine] = true
		default:
			// A placement whose candidates were all refused found no
			// session before it tried them; one may have been made
			// since, so that a launch left with no candidate asks once
			// more before it says there is no room.
			ln.looked = len(cands) == 0
			if len(cands) == 0 {
				return nil, nil
			}
			if !resynced && b.cfg.StatusSyncInterval > 0 {
				// Every candidate was full in the site DB: other
				// brokers filled them. Read the statuses as they are
				// rather than try the next few stale ones.
				resynced = true
				b.resyncStatuses(ctx, time.Now())
			}
		}
	}
	return nil, nil
}

func cand(cands []site.Candidate, machine string) site.Candidate {
	for _, c := range cands {
		if c.Machine == machine {
			return c
		}
	}
	return site.Candidate{}
}

// candidates chooses where a new session of the group may go, best first:
// for an assigned desktop the user's own machine when it has one, else the
// least-loaded free machines of the first zone in the group's preference
// (zoneOrder) that has any. The first, picked, counts the session at
// once (so that concurrent launches spread) until settle; the others are
// fallbacks in case the broker's view is stale. preferred says that the
// candidates are the launch's first choice: the user's own machine, the
// first zone of the preference, or any machine when the group has no
// zone preference; it is false when there are none.
func (b *Broker) candidates(s *Snapshot, user string, dg *site.DeliveryGroup, skip map[string]bool) (cands []site.Candidate, picked string, preferred bool) {
	for _, m := range s.MachinesOf(dg.Name) {
		if m.AssignedUser == user && !skip[m.Name] {
			var ms machineState
			b.machines.update(m.Name, func(x *machineState) {
				if x.eligible(true) {
					x.inflight++
					ms = *x
				}
			})
			if ms.name == "" {
				return nil, "", false
			}
			return []site.Candidate{ms.candidate(true)}, ms.name, true
		}
	}
	order, only := zoneOrder(s, dg, user, b.cfg.Zone)
	var best []machineState
	preferred = true
	for i, z := range order {
		if best = b.machines.pickN(dg.Name, z, skip, maxCandidates); len(best) > 0 {
			preferred = i == 0
			break
		}
	}
	if len(best) == 0 && !only {
		best = b.machines.pickN(dg.Name, "", skip, maxCandidates)
		preferred = len(order) == 0
	}
	if len(best) == 0 {
		return nil, "", false
	}
	for i, ms := range best {
		cands = append(cands, ms.candidate(i == 0))
	}
	return cands, best[0].name, preferred
}

// prepare tells the VDA of a placed session that it is coming. It
// returns nil when the VDA refused: a new session is then ended and its
// machine cooled down, so that the caller tries another.
func (b *Broker) prepare(ctx context.Context, res *site.Resource, sess site.Session, st site.MachineStatus, reconnect bool) *Launch {
	ticket, exp := b.newTicket()
	prep := Prepare{SessionID: sess.ID, User: sess.User, Resource: res.Name, CommandLine: res.CommandLine,
		Reconnect: reconnect && sess.State != site.SessionPending, Ticket: ticket, ExpiresAt: exp}
	if g, ok := b.Snapshot().DeliveryGroup(sess.DeliveryGroup); ok {
		prep.IdleDisconnect = g.SessionTimers.IdleDisconnect.Std()
	}
	pctx, cancel := context.WithTimeout(ctx, b.cfg.PrepareTimeout)
	err := b.cfg.Control.Prepare(pctx, Control{Machine: sess.Machine, URL: st.ControlURL, Token: st.ControlToken, Pin: st.ControlPin}, prep)
	cancel()
	if err == nil {
		b.log.Debug("session placed", "session", sess.ID, "user", sess.User, "machine", sess.Machine, "reconnect", reconnect)
		return &Launch{Session: sess, Address: st.RegisteredAddress, Protocol: st.Protocol, Ticket: ticket, ExpiresAt: exp, Reconnected: reconnect}
	}
	if reconnect {
		b.log.Warn("reconnect: VDA refused", "machine", sess.Machine, "session", sess.ID, "err", err)
		if errors.Is(err, ErrNoSuchSession) {
			// The record outlived the session: end it, so that the user,
			// given a new session instead, does not hold two.
			if err := b.endSession(context.WithoutCancel(ctx), sess.ID, sess.Machine, nil); err != nil {
				b.log.Error("end a session its VDA does not hold", "session", sess.ID, "err", err)
			}
		}
		return nil
	}
	b.log.Warn("VDA refused a session; trying another machine", "machine", sess.Machine, "session", sess.ID, "err", err)
	b.machines.coolDown(sess.Machine, b.cfg.Now().Add(refusalCoolDown))
	if err := b.endSession(context.WithoutCancel(ctx), sess.ID, sess.Machine, nil); err != nil {
		b.log.Error("release refused session", "session", sess.ID, "err", err)
	}
	return nil
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
// session on another machine. vdaCred, when set, is the credential of the
// VDA reporting the logoff, checked in the same transaction
// (ErrNotRegistered unless it holds the machine's registration).
func (b *Broker) endSession(ctx context.Context, id, machine string, vdaCred *string) error {
	_, err := b.endSessionIf(ctx, id, machine, vdaCred, nil)
	return err
}

// endSessionIf is endSession for a live session that still satisfies
// cond (when set) in the transaction that ends it. ended reports whether
// this call ended it, false when it had ended already or cond refused.
func (b *Broker) endSessionIf(ctx context.Context, id, machine string, vdaCred *string, cond func(site.Session) bool) (ended bool, err error) {
	var wasPending, changed bool
	err = b.store.Update(ctx, func(tx site.Tx) error {
		st, sess, err := site.MachineSession(ctx, tx, machine, id)
		if err != nil {
			return err
		}
		if vdaCred != nil && (st.Registration != site.Registered || st.Credential != *vdaCred) {
			return ErrNotRegistered
		}
		if sess.Machine != machine {
			return site.Errorf(site.EForbidden, "session %q is not on machine %q", id, machine)
		}
		if sess.State == site.SessionLoggedOff || cond != nil && !cond(sess) {
			return nil
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
	return err == nil && changed, err
}

// rescore recomputes a stored status's load index under the machine's rules.
func (b *Broker) rescore(machine string, st *site.MachineStatus) {
	if ms, ok := b.machines.get(machine); ok {
		st.LoadIndex = LoadOf(ms.rules, ms.limit, st.Usage).Index
	}
}
