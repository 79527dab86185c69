package auth

import (
	"cmp"
	"errors"
	"net/netip"
	"sync"
	"time"
)

// Guard defaults.
const (
	// DefaultLockoutThreshold password checks that fail within
	// DefaultLockoutWindow lock an account out for DefaultLockoutDuration.
	DefaultLockoutThreshold = 10
	DefaultLockoutWindow    = 10 * time.Minute
	DefaultLockoutDuration  = 10 * time.Minute
	// DefaultSourceFree failed logons from one source within the lock-out
	// window cost nothing; after them each attempt from the source must
	// wait DefaultSourceDelay after the previous one, doubling with every
	// further failure up to DefaultSourceMaxDelay.
	DefaultSourceFree     = 10
	DefaultSourceDelay    = time.Second
	DefaultSourceMaxDelay = 30 * time.Second
	// DefaultSourceInFlight checks under way from one source are not
	// counted as failed: legitimate logons through one address (a NAT, a
	// StoreFront) run concurrently, and only the checks beyond these count
	// against the source's free failures while they run.
	DefaultSourceInFlight = 32
	// DefaultMaxSources bounds the sources a Guard remembers.
	DefaultMaxSources = 65536
	// maxAccounts bounds the accounts a Guard remembers.
	maxAccounts = 100000
)

// Guard errors. Transports must answer ErrLocked exactly as they answer a
// wrong password, so that a locked account cannot be told from an unknown
// one; the error carries the truth for logs and admins.
var (
	ErrLocked    = errors.New("account locked out after too many failed logons")
	ErrThrottled = errors.New("too many failed logons from this source")
)

// LockedError is the error of a logon refused because the account is
// locked out, or has as many password checks under way and failed as its
// window allows. errors.Is(err, ErrLocked) holds.
type LockedError struct {
	Left time.Duration // how long until the lock ends (the window, when not locked yet)
}

func (e *LockedError) Error() string        { return ErrLocked.Error() }
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// ThrottledError is the error of a logon refused, before any password
// check, because its source failed too often lately. errors.Is(err,
// ErrThrottled) holds.
type ThrottledError struct {
	RetryAfter time.Duration
}

func (e *ThrottledError) Error() string        { return ErrThrottled.Error() }
func (e *ThrottledError) Is(target error) bool { return target == ErrThrottled }

// GuardConfig configures a Guard. The zero value of a field means its
// default; a negative Threshold turns account lock-out off, a negative
// SourceFree per-source throttling.
type GuardConfig struct {
	Threshold        int
	Window, Duration time.Duration
	SourceFree       int
	SourceDelay      time.Duration
	SourceMaxDelay   time.Duration
	SourceInFlight   int
	MaxSources       int
	Now              func() time.Time
}

// withDefaults fills unset fields. Threshold and SourceFree are unset only
// at zero (negative turns them off); the rest at zero or below.
func (c GuardConfig) withDefaults() GuardConfig {
	c.Threshold = cmp.Or(c.Threshold, DefaultLockoutThreshold)
	c.SourceFree = cmp.Or(c.SourceFree, DefaultSourceFree)
	c.Window = cmp.Or(max(c.Window, 0), DefaultLockoutWindow)
	c.Duration = cmp.Or(max(c.Duration, 0), DefaultLockoutDuration)
	c.SourceDelay = cmp.Or(max(c.SourceDelay, 0), DefaultSourceDelay)
	c.SourceMaxDelay = cmp.Or(max(c.SourceMaxDelay, 0), DefaultSourceMaxDelay)
	c.SourceInFlight = cmp.Or(max(c.SourceInFlight, 0), DefaultSourceInFlight)
	c.MaxSources = cmp.Or(max(c.MaxSources, 0), DefaultMaxSources)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Guard reserves password checks, so that no concurrency gets more of them
// than the policy allows: at most Threshold failed checks per account per
// Window (a check under way counts as failed until it succeeds, and a
// success forgets no failure), and, per source address, a delay growing
// with each failure past SourceFree (checks under way beyond SourceInFlight
// count as failed). A burst from one source thus gets at most
// SourceFree+SourceInFlight failures checked before the delays start. Its
// tables are bounded; it is safe for concurrent use.
type Guard struct {
	cfg GuardConfig

	mu       sync.Mutex
	accounts map[string]*account
	sources  map[string]*source
}

type account struct {
	failed      []time.Time // failures within the window, oldest first
	pending     int         // reserved checks under way
	lockedUntil time.Time
}

type source struct {
	failed  []time.Time // failures within the window, oldest first
	pending int
	last    time.Time // the last reservation
}

// NewGuard returns a Guard.
func NewGuard(cfg GuardConfig) *Guard {
	return &Guard{cfg: cfg.withDefaults(), accounts: map[string]*account{}, sources: map[string]*source{}}
}

// Config returns the guard's configuration, defaults filled in.
func (g *Guard) Config() GuardConfig { return g.cfg }

// Attempt is a reserved password check. Exactly one of Fail or Succeed
// must be called once the password has been checked.
type Attempt struct {
	g               *Guard
	account, source string
	done            bool
}

// SourceKey returns the key a client address is throttled under: the
// address itself for IPv4, its /64 for IPv6 (one host commonly has a whole
// /64), the string as given when it is no address.
func SourceKey(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	if a.Is4() {
		return addr // ParseAddr takes only the canonical dotted quad
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.WithZone("").Prefix(64)
		return p.String()
	}
	return a.String()
}

// Reserve reserves a password check of account (which may be "" for a
// name that names no account: only the source is charged) from source (a
// client address; "" is not throttled). It returns a *ThrottledError when
// the source must wait, before charging anything; a *LockedError when the
// account is locked or has no check left in its window, and then the
// source is charged a failure.
func (g *Guard) Reserve(acct, src string) (*Attempt, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.cfg.Now()
	var s *source
	if src != "" && g.cfg.SourceFree >= 0 {
		src = SourceKey(src)
		s = g.sources[src]
		if s != nil {
			s.failed = g.prune(s.failed, now)
			if n := len(s.failed) + max(s.pending-g.cfg.SourceInFlight, 0); n >= g.cfg.SourceFree {
				if wait := s.last.Add(g.sourceDelay(n)).Sub(now); wait > 0 {
					return nil, &ThrottledError{RetryAfter: wait}
				}
			}
		} else {
			if len(g.sources) >= g.cfg.MaxSources {
				g.pruneSources(now)
			}
			s = &source{}
			g.sources[src] = s
		}
		s.last = now
	} else {
		src = ""
	}
	if acct != "" && g.cfg.Threshold > 0 {
		a := g.accounts[acct]
		if a == nil {
			if len(g.accounts) >= maxAccounts {
				g.pruneAccounts(now)
			}
			a = &account{}
			g.accounts[acct] = a
		}
		a.failed = g.prune(a.failed, now)
		if left := a.lockedUntil.Sub(now); left > 0 || len(a.failed)+a.pending >= g.cfg.Threshold {
			if s != nil {
				s.failed = append(s.failed, now)
			}
			if left <= 0 {
				left = g.cfg.Window
			}
			return nil, &LockedError{Left: left}
		}
		a.pending++
	} else {
		acct = ""
	}
	if s != nil {
		s.pending++
	}
	return &Attempt{g: g, account: acct, source: src}, nil
}

// sourceDelay is how long a source with n failures (and reservations)
// must wait after its last attempt.
func (g *Guard) sourceDelay(n int) time.Duration {
	k := n - g.cfg.SourceFree
	if k > 30 {
		return g.cfg.SourceMaxDelay
	}
	return min(g.cfg.SourceDelay<<k, g.cfg.SourceMaxDelay)
}

// Fail records that the reserved check failed, and reports whether it
// locked the account out.
func (a *Attempt) Fail() (locked bool) {
	g := a.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if a.done {
		return false
	}
	a.done = true
	now := g.cfg.Now()
	if s := g.sources[a.source]; a.source != "" && s != nil {
		s.pending--
		s.failed = append(s.failed, now)
	}
	acct := g.accounts[a.account]
	if a.account == "" || acct == nil {
		return false
	}
	acct.pending--
	acct.failed = append(acct.failed, now)
	if len(acct.failed) >= g.cfg.Threshold && !now.Before(acct.lockedUntil) {
		acct.failed = nil
		acct.lockedUntil = now.Add(g.cfg.Duration)
		return true
	}
	return false
}

// Succeed records that the reserved check succeeded. It re-checks the
// lock: when the account was locked out while the check ran, it returns a
// *LockedError and the caller must refuse the logon. A success forgets no
// failure, of the account or of the source: failures leave only by aging
// out of the window, so that at most Threshold wrong passwords are checked
// per account per window whatever succeeds in between (a right password
// sent among a burst of guesses buys the guesser nothing).
func (a *Attempt) Succeed() error {
	g := a.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if a.done {
		return nil
	}
	a.done = true
	now := g.cfg.Now()
	if s := g.sources[a.source]; a.source != "" && s != nil {
		s.pending--
	}
	acct := g.accounts[a.account]
	if a.account == "" || acct == nil {
		return nil
	}
	acct.pending--
	if left := acct.lockedUntil.Sub(now); left > 0 {
		return &LockedError{Left: left}
	}
	if acct.pending == 0 && len(g.prune(acct.failed, now)) == 0 {
		delete(g.accounts, a.account)
	}
	return nil
}

// Locked returns how long account stays locked out, 0 when it is not.
func (g *Guard) Locked(acct string) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if a := g.accounts[acct]; a != nil {
		return max(a.lockedUntil.Sub(g.cfg.Now()), 0)
	}
	return 0
}

// Unlock clears an account's failures and lock, for an admin, and
// reports whether the account was locked out.
func (g *Guard) Unlock(acct string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	a := g.accounts[acct]
	if a == nil {
		return false
	}
	locked := g.cfg.Now().Before(a.lockedUntil)
	a.failed, a.lockedUntil = nil, time.Time{}
	if a.pending == 0 {
		delete(g.accounts, acct)
	}
	return locked
}

// Lockout is an account locked out, and how long it stays so.
type Lockout struct {
	Account string
	Left    time.Duration
}

// Lockouts returns the accounts locked out now, in no order.
func (g *Guard) Lockouts() []Lockout {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.cfg.Now()
	var ls []Lockout
	for k, a := range g.accounts {
		if left := a.lockedUntil.Sub(now); left > 0 {
			ls = append(ls, Lockout{Account: k, Left: left})
		}
	}
	return ls
}

// Sources returns how many sources the guard remembers.
func (g *Guard) Sources() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sources)
}

func (g *Guard) prune(ts []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(ts) && now.Sub(ts[i]) >= g.cfg.Window {
		i++
	}
	if i == 0 {
		return ts
	}
	return append(ts[:0], ts[i:]...)
}

// pruneSources drops sources with nothing under way whose failures left
// the window; when that frees less than an eighth of the table, it drops
// idle sources at random (map order) until it does. An attacker with
// enough addresses to churn the table gains what those addresses gave
// anyway.
func (g *Guard) pruneSources(now time.Time) {
	for k, s := range g.sources {
		if s.pending == 0 && len(g.prune(s.failed, now)) == 0 {
			delete(g.sources, k)
		}
	}
	target := g.cfg.MaxSources - g.cfg.MaxSources/8 - 1
	for k, s := range g.sources {
		if len(g.sources) <= target {
			break
		}
		if s.pending == 0 {
			delete(g.sources, k)
		}
	}
}

func (g *Guard) pruneAccounts(now time.Time) {
	for k, a := range g.accounts {
		if a.pending == 0 && !now.Before(a.lockedUntil) && len(g.prune(a.failed, now)) == 0 {
			delete(g.accounts, k)
		}
	}
}
