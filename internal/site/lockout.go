package site

import (
	"context"
	"fmt"
	"time"
)

// AccountLock is the site-wide lock-out state of one account (a user or an
// admin), shared by every broker of the site: failed password checks
// within the current window, checks under way (reserved, not yet
// decided), and the lock. The zero value (but the name) is an account
// with nothing against it; a store keeps no row for it.
type AccountLock struct {
	// Account is the account's key (AccountKey): its kind and name.
	Account     string
	WindowStart time.Time
	Failures    int
	Pending     int
	// PendingSince is when the oldest reservation still counted in
	// Pending was made: reservations of a broker that died go stale.
	PendingSince time.Time
	LockedUntil  time.Time
}

// AccountKey is the key of an account's lock-out state: its kind ("user",
// "admin"; no colon) and its name, "user:alice".
func AccountKey(kind, name string) string { return kind + ":" + name }

// Clear reports whether the state holds nothing.
func (l AccountLock) Clear() bool {
	return l.Failures == 0 && l.Pending == 0 && l.LockedUntil.IsZero()
}

// LockoutPolicy is how many failed checks (Threshold) within Window lock
// an account out, and for how long (Duration).
type LockoutPolicy struct {
	Threshold        int
	Window, Duration time.Duration
}

// stalePending is how long a reservation counts without being decided: a
// password check takes well under a second, so one older than this was
// made by a broker that died before deciding it.
const stalePending = time.Minute

// age brings a lock state to now: the window and the lock run out,
// stale reservations are dropped.
func (l *AccountLock) age(now time.Time, p LockoutPolicy) {
	if !l.LockedUntil.IsZero() && !now.Before(l.LockedUntil) {
		l.LockedUntil = time.Time{}
	}
	if !l.WindowStart.IsZero() && now.Sub(l.WindowStart) >= p.Window {
		l.Failures, l.WindowStart = 0, time.Time{}
	}
	if l.Pending > 0 && now.Sub(l.PendingSince) >= stalePending {
		l.Pending, l.PendingSince = 0, time.Time{}
	}
}

// ReserveLogon reserves a password check of account site-wide: it fails
// with the time left when the account is locked out, or when its failures
// and the checks under way already reach the threshold (a check under
// way counts as failed until decided, so that concurrent guesses through
// any number of brokers get no more checks than the policy allows). A
// reservation must be decided with EndLogon. Call it in an Update.
func ReserveLogon(ctx context.Context, tx Tx, account string, now time.Time, p LockoutPolicy) (locked time.Duration, err error) {
	l, err := tx.AccountLock(ctx, account)
	if err != nil {
		return 0, fmt.Errorf("lock-out of %q: %w", account, err)
	}
	l.age(now, p)
	switch {
	case !l.LockedUntil.IsZero():
		return l.LockedUntil.Sub(now), tx.SetAccountLock(ctx, l)
	case l.Failures+l.Pending >= p.Threshold:
		return p.Window, tx.SetAccountLock(ctx, l)
	}
	if l.Pending == 0 {
		l.PendingSince = now
	}
	l.Pending++
	return 0, tx.SetAccountLock(ctx, l)
}

// EndLogon decides a reservation of ReserveLogon: a failed check counts
// against the account and may lock it out (lockedNow). It returns the time
// left on the account's lock, if any: a right password whose account was
// locked out meanwhile (through any broker) must be refused. Call it in
// an Update.
func EndLogon(ctx context.Context, tx Tx, account string, now time.Time, p LockoutPolicy, failed bool) (locked time.Duration, lockedNow bool, err error) {
	l, err := tx.AccountLock(ctx, account)
	if err != nil {
		return 0, false, fmt.Errorf("lock-out of %q: %w", account, err)
	}
	l.age(now, p)
	if l.Pending > 0 {
		l.Pending--
	}
	if l.Pending == 0 {
		l.PendingSince = time.Time{}
	}
	if failed {
		if l.WindowStart.IsZero() {
			l.WindowStart = now
		}
		l.Failures++
		if l.Failures >= p.Threshold && l.LockedUntil.IsZero() {
			l.LockedUntil, l.Failures, l.WindowStart = now.Add(p.Duration), 0, time.Time{}
			lockedNow = true
		}
	}
	if !l.LockedUntil.IsZero() {
		locked = l.LockedUntil.Sub(now)
	}
	return locked, lockedNow, tx.SetAccountLock(ctx, l)
}

// UnlockAccount clears an account's failures and lock site-wide, keeping
// the checks under way, and reports whether it was locked out. Call it in
// an Update.
func UnlockAccount(ctx context.Context, tx Tx, account string, now time.Time) (bool, error) {
	l, err := tx.AccountLock(ctx, account)
	if err != nil {
		return false, fmt.Errorf("lock-out of %q: %w", account, err)
	}
	was := now.Before(l.LockedUntil)
	l.Failures, l.WindowStart, l.LockedUntil = 0, time.Time{}, time.Time{}
	return was, tx.SetAccountLock(ctx, l)
}
