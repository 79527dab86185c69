package broker

import (
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// Authentication outcomes. Transports map them onto their own errors (an
// NFuse ErrorId, an HTTP status). ErrAccountDisabled is only told to a
// caller who gave the right password; ErrAccountLocked is told to anyone,
// as directory services do, since the account takes no logons either way.
var (
	ErrBadCredentials  = site.Errorf(site.EUnauthorized, "wrong user name or password")
	ErrAccountDisabled = site.Errorf(site.EForbidden, "account disabled")
	ErrAccountLocked   = site.Errorf(site.EForbidden, "account locked out after too many failed logons")
	// ErrOverloaded is returned when the broker has as many transactions
	// in flight as it admits: the client should retry shortly.
	ErrOverloaded = site.Errorf(site.EOverloaded, "the broker is busy; retry shortly")
)

// Lock-out defaults.
const (
	DefaultLockoutThreshold = 10
	DefaultLockoutWindow    = 10 * time.Minute
	DefaultLockoutDuration  = 10 * time.Minute
)

// lockout counts failed logons per user and locks a user out for a while
// after Threshold failures within Window. Counts are kept per broker.
type lockout struct {
	threshold        int
	window, duration time.Duration
	now              func() time.Time

	mu    sync.Mutex
	users map[string]*failures
}

type failures struct {
	times       []time.Time // failures within the window, oldest first
	lockedUntil time.Time
}

func newLockout(threshold int, window, duration time.Duration, now func() time.Time) *lockout {
	return &lockout{threshold: threshold, window: window, duration: duration, now: now, users: map[string]*failures{}}
}

// locked reports whether the user is locked out now.
func (l *lockout) locked(user string) bool {
	if l.threshold <= 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.users[user]
	return f != nil && l.now().Before(f.lockedUntil)
}

// fail records a failed logon and reports whether it locked the user out.
func (l *lockout) fail(user string) bool {
	if l.threshold <= 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	f := l.users[user]
	if f == nil {
		if len(l.users) >= 100000 {
			l.pruneLocked(now)
		}
		f = &failures{}
		l.users[user] = f
	}
	keep := f.times[:0]
	for _, t := range f.times {
		if now.Sub(t) < l.window {
			keep = append(keep, t)
		}
	}
	f.times = append(keep, now)
	if len(f.times) >= l.threshold {
		f.times = nil
		f.lockedUntil = now.Add(l.duration)
		return true
	}
	return false
}

// succeed clears a user's failures.
func (l *lockout) succeed(user string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f := l.users[user]; f != nil && !l.now().Before(f.lockedUntil) {
		delete(l.users, user)
	}
}

func (l *lockout) pruneLocked(now time.Time) {
	for u, f := range l.users {
		if !now.Before(f.lockedUntil) && (len(f.times) == 0 || now.Sub(f.times[len(f.times)-1]) >= l.window) {
			delete(l.users, u)
		}
	}
}

// admission bounds the brokering transactions in flight. It never queues:
// a transaction over the bound is refused at once, so that an overloaded
// broker answers "retry" in microseconds instead of timing out.
type admission struct {
	slots chan struct{}
}

func newAdmission(n int) *admission {
	if n <= 0 {
		return &admission{}
	}
	return &admission{slots: make(chan struct{}, n)}
}

// admit takes a slot, or returns ErrOverloaded when none is free. The
// returned function gives the slot back.
func (a *admission) admit() (func(), error) {
	if a.slots == nil {
		return func() {}, nil
	}
	select {
	case a.slots <- struct{}{}:
		return func() { <-a.slots }, nil
	default:
		return nil, ErrOverloaded
	}
}
