package broker_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitetest"
)

var cheap = sitetest.Cheap

func TestAuthenticateLockoutAndDisabled(t *testing.T) {
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	h := newHarness(t, 3, 250, func(c *broker.Config) {
		c.Now = func() time.Time { return now }
		c.LockoutThreshold = 3
		c.LockoutWindow = time.Minute
		c.LockoutDuration = 5 * time.Minute
	})
	ctx := context.Background()
	hash, _ := auth.HashPassword("right password", cheap)
	err := h.store.Update(ctx, func(tx site.Tx) error {
		_, err := site.Mutate(ctx, tx, func(c *site.Config) error {
			for i := range c.Users {
				c.Users[i].PasswordHash = hash
			}
			c.Users[2].Disabled = true // u0003
			return nil
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	auth := func(user, pw string) error { _, err := h.b.Authenticate(ctx, user, pw, ""); return err }

	if err := auth("u0001", "right password"); err != nil {
		t.Fatalf("right password: %v", err)
	}
	for _, tc := range []struct{ user, pw string }{{"u0001", "wrong"}, {"ghost", "right password"}, {"u0003", "wrong"}} {
		if err := auth(tc.user, tc.pw); err != broker.ErrBadCredentials {
			t.Errorf("%s/%s: %v, want ErrBadCredentials", tc.user, tc.pw, err)
		}
	}
	if err := auth("u0003", "right password"); err != broker.ErrAccountDisabled {
		t.Errorf("disabled user with the right password: %v", err)
	}

	t.Run("lock-out", func(t *testing.T) {
		auth("u0002", "wrong")
		now = now.Add(2 * time.Minute) // the first failure leaves the window
		auth("u0002", "wrong")
		auth("u0002", "wrong")
		if err := auth("u0002", "right password"); err != nil {
			t.Fatalf("two failures within the window locked the user: %v", err)
		}
		for range 3 {
			auth("u0002", "wrong")
		}
		if err := auth("u0002", "right password"); !errors.Is(err, broker.ErrAccountLocked) {
			t.Fatalf("after 3 failures: %v, want ErrAccountLocked", err)
		}
		if got, want := auth("u0002", "right password").Error(), "account locked out for 5 minutes after too many failed logons; try again in 5 minutes"; got != want {
			t.Errorf("message %q, want %q", got, want)
		}
		// Clients are told what a wrong password gets.
		if err := auth("u0002", "right password"); !errors.Is(err, broker.ErrBadCredentials) || site.ErrorMessage(err) != site.ErrorMessage(broker.ErrBadCredentials) {
			t.Errorf("locked answer %q (%v), want the bad-credentials answer", site.ErrorMessage(err), err)
		}
		now = now.Add(time.Minute + 30*time.Second)
		if got, want := auth("u0002", "right password").Error(), "try again in 3m30s"; !strings.HasSuffix(got, want) {
			t.Errorf("message %q, want it to end with %q", got, want)
		}
		now = now.Add(-time.Minute - 30*time.Second)
		now = now.Add(5 * time.Minute)
		if err := auth("u0002", "right password"); err != nil {
			t.Fatalf("after the lock-out ended: %v", err)
		}
	})
}

func TestAdmission(t *testing.T) {
	h := newHarness(t, 1, 250, func(c *broker.Config) { c.MaxConcurrent = 2 })
	r1, err1 := h.b.Admit()
	r2, err2 := h.b.Admit()
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if _, err := h.b.Admit(); err != broker.ErrOverloaded {
		t.Fatalf("third transaction: %v, want ErrOverloaded", err)
	}
	r1()
	r3, err := h.b.Admit()
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	r2()
	r3()
}

// Concurrent logons of one user with one password share one check and one
// lock-out reservation: more of them than the threshold must not lock
// the user out, and a shared wrong password counts once.
func TestAuthenticateSharesOneReservation(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	started := 0
	cache := auth.NewVerifiedCache(time.Hour, 100)
	cache.SetVerifier(func(hash, pw string) (bool, error) {
		mu.Lock()
		started++
		mu.Unlock()
		<-release
		return auth.VerifyPassword(hash, pw)
	})
	h := newHarness(t, 1, 250, func(c *broker.Config) {
		c.Verified = cache
		c.LockoutThreshold = 2
		c.SourceFree = -1
	})
	ctx := context.Background()
	hash, _ := auth.HashPassword("right password", cheap)
	err := h.store.Update(ctx, func(tx site.Tx) error {
		_, err := site.Mutate(ctx, tx, func(c *site.Config) error { c.Users[0].PasswordHash = hash; return nil })
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	burst := func(pw string, n int) []error {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { _, errs[i] = h.b.Authenticate(ctx, "u0001", pw, "192.0.2.1") })
		}
		deadline := time.Now().Add(10 * time.Second)
		for cache.Waiting() != n-1 {
			if time.Now().After(deadline) {
				t.Fatal("the logons never met in one flight")
			}
			runtime.Gosched()
		}
		release <- struct{}{}
		wg.Wait()
		return errs
	}
	const n = 8
	for i, err := range burst("wrong", n) {
		if err != broker.ErrBadCredentials {
			t.Fatalf("wrong password %d: %v", i, err)
		}
	}
	if h.b.Guard().Locked("user\x00u0001") != 0 {
		t.Fatal("one shared wrong password locked the user out")
	}
	for i, err := range burst("right password", n) {
		if err != nil {
			t.Fatalf("right password %d: %v", i, err)
		}
	}
	if checks, _ := cache.Hashes(); checks != 2 {
		t.Errorf("%d password checks for two bursts, want 2", checks)
	}
}

// TestNoWaitSiteUser: under NoWait a password the cache has not seen,
// right or wrong, and an unknown user (whose decoy costs a hash) return
// ErrWouldWait with nothing counted; a verified one answers, and a
// disabled user is still refused.
func TestNoWaitSiteUser(t *testing.T) {
	h := newHarness(t, 3, 250, func(c *broker.Config) {
		c.LockoutThreshold = 2
		c.LockoutWindow = time.Minute
		c.LockoutDuration = 5 * time.Minute
	})
	ctx := context.Background()
	hash, _ := auth.HashPassword("right password", cheap)
	err := h.store.Update(ctx, func(tx site.Tx) error {
		_, err := site.Mutate(ctx, tx, func(c *site.Config) error {
			for i := range c.Users {
				c.Users[i].PasswordHash = hash
			}
			return nil
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	nw := broker.NoWait(ctx)
	for _, tc := range []struct{ user, pw string }{{"u0001", "right password"}, {"u0001", "wrong"}, {"u0001", "wrong"}, {"u0001", "wrong"}, {"ghost", "x"}} {
		if _, err := h.b.Authenticate(nw, tc.user, tc.pw, ""); !errors.Is(err, broker.ErrWouldWait) {
			t.Errorf("%s/%s under NoWait: %v, want ErrWouldWait", tc.user, tc.pw, err)
		}
	}
	if _, err := h.b.Authenticate(ctx, "u0001", "right password", ""); err != nil {
		t.Fatalf("logon after refusals under NoWait: %v (they must count nothing)", err)
	}
	if u, err := h.b.Authenticate(nw, "u0001", "right password", ""); err != nil || u.Name != "u0001" {
		t.Fatalf("verified password under NoWait: %v, %v", u, err)
	}
	if _, err := h.b.Authenticate(nw, "U0001", "wrong", ""); !errors.Is(err, broker.ErrWouldWait) {
		t.Errorf("wrong password of a verified user under NoWait: %v, want ErrWouldWait", err)
	}
}
