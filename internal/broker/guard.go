package broker

import (
	"errors"
	"fmt"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/site"
)

// Authentication outcomes. Transports map them onto their own errors (an
// NFuse ErrorId, an HTTP status). ErrAccountDisabled is only told to a
// caller who gave the right password. A locked-out account is answered
// exactly as a wrong password or an unknown name (a *LockedError unwraps
// to ErrBadCredentials), so that lock-out tells no one which names exist;
// its message, for logs and admins, says the truth.
var (
	ErrBadCredentials  = site.Errorf(site.EUnauthorized, "wrong user name or password")
	ErrAccountDisabled = site.Errorf(site.EForbidden, "account disabled")
	// ErrAccountLocked matches a *LockedError with errors.Is.
	ErrAccountLocked = errors.New("account locked out after too many failed logons")
	// ErrThrottled matches a *ThrottledError with errors.Is.
	ErrThrottled = errors.New("too many failed logons from this address")
	// ErrOverloaded is returned when the broker has as many transactions
	// in flight as it admits: the client should retry shortly.
	ErrOverloaded = site.Errorf(site.EOverloaded, "the broker is busy; retry shortly")
)

// LockedError is the error of a logon refused because the account is
// locked out, or has as many password checks failed and under way as its
// window allows: errors.Is(err, ErrAccountLocked) and errors.Is(err,
// ErrBadCredentials) both hold, and what a client is told is
// ErrBadCredentials.
type LockedError struct {
	Duration time.Duration // the lock-out duration
	Left     time.Duration // how long until this lock ends
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("account locked out for %s after too many failed logons; try again in %s",
		humanDuration(e.Duration), humanDuration(e.Left))
}

// Is matches ErrAccountLocked.
func (e *LockedError) Is(target error) bool { return target == ErrAccountLocked }

// Unwrap returns ErrBadCredentials, what clients are told.
func (e *LockedError) Unwrap() error { return ErrBadCredentials }

// ThrottledError is the error of a logon refused, before any password was
// checked, because its source address failed too many logons lately:
// errors.Is(err, ErrThrottled) holds, and clients are told to retry later
// (an EOverloaded error).
type ThrottledError struct {
	RetryAfter time.Duration
}

func (e *ThrottledError) Error() string { return e.siteError().Error() }

// Is matches ErrThrottled.
func (e *ThrottledError) Is(target error) bool { return target == ErrThrottled }

// Unwrap returns the application error, with the message clients see.
func (e *ThrottledError) Unwrap() error { return e.siteError() }

func (e *ThrottledError) siteError() *site.Error {
	return site.Errorf(site.EOverloaded, "too many failed logons from your address; retry in %s", humanDuration(e.RetryAfter))
}

// humanDuration writes d rounded up to the second: "10 minutes", "1
// minute", "9m12s", "42s".
func humanDuration(d time.Duration) string {
	d = (d + time.Second - 1).Truncate(time.Second)
	switch {
	case d == time.Minute:
		return "1 minute"
	case d > time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%d minutes", d/time.Minute)
	}
	return d.String()
}

// Lock-out defaults.
const (
	DefaultLockoutThreshold = auth.DefaultLockoutThreshold
	DefaultLockoutWindow    = auth.DefaultLockoutWindow
	DefaultLockoutDuration  = auth.DefaultLockoutDuration
)

// admission bounds the brokering transactions in flight. It never queues:
// a transaction over the bound is refused at once, so that an overloaded
// broker answers "retry" in microseconds instead of timing out.
type admission struct {
	slots chan struct{}
	// release gives a slot back: one function for all, so that a
	// request's admission allocates nothing.
	release func()
}

func newAdmission(n int) *admission {
	if n <= 0 {
		return &admission{release: func() {}}
	}
	a := &admission{slots: make(chan struct{}, n)}
	a.release = func() { <-a.slots }
	return a
}

// admit takes a slot, or returns ErrOverloaded when none is free. The
// returned function gives the slot back.
func (a *admission) admit() (func(), error) {
	if a.slots == nil {
		return a.release, nil
	}
	select {
	case a.slots <- struct{}{}:
		return a.release, nil
	default:
		return nil, ErrOverloaded
	}
}
