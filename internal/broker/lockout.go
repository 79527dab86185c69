package broker

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/site"
)

// Account kinds of the lock-out: the guard keys an account as
// kind + "\x00" + name, the site DB as site.AccountKey(kind, name).
const (
	AccountUser  = "user"
	AccountAdmin = "admin"
)

func guardKey(kind, name string) string { return kind + "\x00" + name }

// CheckPassword runs verify, the check of an account's password, under
// reservations that hold however many checks run at once: the account's
// lock-out and the source's throttling. On a site whose brokers share
// their lock-out (Config.SiteLockout) the account is reserved in the site
// DB, so that the threshold holds across every broker (failed checks and
// checks under way anywhere count; a lock or an admin's unlock through
// one broker holds on all), and the broker's guard throttles the source
// only; when the site DB cannot be reached, or without SiteLockout, the
// guard reserves the account as well, and the broker says so in its log.
//
// It returns verify's verdict, or the refusal: a *auth.ThrottledError
// before verify ran, or a *auth.LockedError (before verify ran, or after
// a right password whose account was locked out meanwhile), which
// callers answer as a wrong password (after a decoy hash when verify did
// not run).
func (b *Broker) CheckPassword(ctx context.Context, kind, name, source string, verify func() bool) (bool, error) {
	return b.checkPassword(ctx, kind, name, guardKey(kind, name), source, verify)
}

// checkPassword is CheckPassword with the account's guard key made.
func (b *Broker) checkPassword(ctx context.Context, kind, name, key, source string, verify func() bool) (bool, error) {
	if b.siteWide() {
		ok, err, decided := b.checkSiteWide(ctx, kind, name, source, verify)
		if decided {
			return ok, err
		}
	}
	at, err := b.guard.Reserve(key, source)
	if err != nil {
		return false, err
	}
	if !verify() {
		if at.Fail() {
			b.cfg.Verified.Forget(key)
			b.log.Warn("account locked out after failed logons", "account", name, "kind", kind, "for", b.guard.Config().Duration, "remote", source)
		}
		return false, nil
	}
	if err := at.Succeed(); err != nil {
		b.cfg.Verified.Forget(key)
		return false, err
	}
	return true, nil
}

// siteWide reports whether password checks reserve the account in the
// site DB.
func (b *Broker) siteWide() bool { return b.cfg.SiteLockout && b.guard.Config().Threshold > 0 }

// checkSiteWide is CheckPassword with the account reserved in the site
// DB. It returns decided false, having run nothing, when the site DB
// cannot be reached.
func (b *Broker) checkSiteWide(ctx context.Context, kind, name, source string, verify func() bool) (ok bool, err error, decided bool) {
	at, err := b.guard.Reserve("", source) // the source only
	if err != nil {
		return false, err, true
	}
	acct := site.AccountKey(kind, name)
	left, err := b.siteLogon(ctx, func(ctx context.Context, tx site.Tx, now time.Time, p site.LockoutPolicy) (time.Duration, error) {
		return site.ReserveLogon(ctx, tx, acct, now, p)
	})
	switch {
	case err != nil:
		at.Succeed() // nothing was checked
		b.log.Warn("site-wide lock-out unavailable: this broker's own count decides", "account", name, "kind", kind, "err", err)
		return false, nil, false
	case left > 0:
		at.Fail() // a guess at a locked account costs its source, as a wrong password does
		return false, &auth.LockedError{Left: left}, true
	}
	ok = verify()
	var lockedNow bool
	left, err = b.siteLogon(ctx, func(ctx context.Context, tx site.Tx, now time.Time, p site.LockoutPolicy) (left time.Duration, err error) {
		left, lockedNow, err = site.EndLogon(ctx, tx, acct, now, p, !ok)
		return left, err
	})
	key := guardKey(kind, name)
	switch {
	case err != nil:
		b.log.Warn("site-wide lock-out unavailable: this check is not counted site-wide", "account", name, "kind", kind, "err", err)
	case lockedNow:
		b.cfg.Verified.Forget(key)
		b.siteClear.forget(key)
		b.log.Warn("account locked out site-wide after failed logons", "account", name, "kind", kind, "for", b.guard.Config().Duration, "remote", source)
	}
	if !ok {
		at.Fail()
		return false, nil, true
	}
	at.Succeed()
	if left > 0 {
		b.cfg.Verified.Forget(key)
		b.siteClear.forget(key)
		return false, &auth.LockedError{Left: left}, true
	}
	if err == nil && b.cfg.LockoutRecheck > 0 {
		b.siteClear.set(key, b.cfg.Now(), b.cfg.LockoutRecheck)
	}
	return true, nil, true
}

// siteClear remembers, per account, until when this broker takes the
// site DB's last word that it is not locked out.
type siteClear struct {
	mu    sync.Mutex
	until map[string]time.Time
}

// maxSiteClear bounds siteClear: past it, expired entries go, and all
// of them if that is not enough.
const maxSiteClear = 100_000

func (c *siteClear) fresh(key string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return now.Before(c.until[key])
}

// set takes the site DB's word for key from now for ttl.
func (c *siteClear) set(key string, now time.Time, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.until == nil {
		c.until = map[string]time.Time{}
	}
	if len(c.until) >= maxSiteClear {
		maps.DeleteFunc(c.until, func(_ string, t time.Time) bool { return !now.Before(t) })
		if len(c.until) >= maxSiteClear {
			clear(c.until)
		}
	}
	c.until[key] = now.Add(ttl)
}

func (c *siteClear) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.until, key)
}

// siteLogon runs a lock-out step in a site DB transaction of its own,
// which the caller's cancellation does not cut short: a reservation is
// always decided.
func (b *Broker) siteLogon(ctx context.Context, step func(context.Context, site.Tx, time.Time, site.LockoutPolicy) (time.Duration, error)) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	gc := b.guard.Config()
	p := site.LockoutPolicy{Threshold: gc.Threshold, Window: gc.Window, Duration: gc.Duration}
	var left time.Duration
	err := b.store.Update(ctx, func(tx site.Tx) (err error) {
		left, err = step(ctx, tx, b.cfg.Now(), p)
		return err
	})
	return left, err
}

// Lockout is an account locked out after failed logons.
type Lockout struct {
	Kind, Name string
	Left       time.Duration
}

// Lockouts returns the accounts locked out now, by kind and name: this
// broker's, and with SiteLockout the site's.
func (b *Broker) Lockouts(ctx context.Context) ([]Lockout, error) {
	left := map[[2]string]time.Duration{}
	for _, l := range b.guard.Lockouts() {
		if kind, name, ok := strings.Cut(l.Account, "\x00"); ok {
			left[[2]string{kind, name}] = l.Left
		}
	}
	if b.cfg.SiteLockout {
		var all []site.AccountLock
		if err := b.store.View(ctx, func(tx site.Tx) (err error) {
			all, err = tx.AccountLocks(ctx)
			return err
		}); err != nil {
			return nil, err
		}
		now := b.cfg.Now()
		for _, l := range all {
			kind, name, ok := strings.Cut(l.Account, ":")
			if d := l.LockedUntil.Sub(now); ok && d > 0 {
				k := [2]string{kind, name}
				left[k] = max(left[k], d)
			}
		}
	}
	out := make([]Lockout, 0, len(left))
	for k, d := range left {
		out = append(out, Lockout{Kind: k[0], Name: k[1], Left: d})
	}
	slices.SortFunc(out, func(a, b Lockout) int { return strings.Compare(a.Kind+"\x00"+a.Name, b.Kind+"\x00"+b.Name) })
	return out, nil
}

// Unlock clears an account's lock and failed logons, in this broker and
// with SiteLockout in the site DB, and reports whether it was locked out.
// Other brokers count an account themselves only while the site DB
// cannot be reached (CheckPassword); those counts they keep.
//
// A user is named as a logon would name them: a site user by their name
// in any case, a directory user by any spelling of theirs (their lock-out
// is counted under the entry's key, auth.NameKey).
func (b *Broker) Unlock(ctx context.Context, kind, name string) (bool, error) {
	if kind == AccountUser {
		if u, ok := b.Snapshot().User(name); ok {
			name = u.Name
		} else if _, key, ok := b.directory(name); ok {
			name = key
		}
	}
	was := b.guard.Unlock(guardKey(kind, name))
	if !b.cfg.SiteLockout {
		return was, nil
	}
	err := b.store.Update(ctx, func(tx site.Tx) error {
		w, err := site.UnlockAccount(ctx, tx, site.AccountKey(kind, name), b.cfg.Now())
		was = was || w
		return err
	})
	if err != nil {
		return false, err
	}
	return was, nil
}
