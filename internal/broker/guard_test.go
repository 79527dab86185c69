package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
)

var cheap = auth.Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1, SaltLen: 16, KeyLen: 32}

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
	auth := func(user, pw string) error { _, err := h.b.Authenticate(ctx, user, pw); return err }

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
		if err := auth("u0002", "right password"); err != broker.ErrAccountLocked {
			t.Fatalf("after 3 failures: %v, want ErrAccountLocked", err)
		}
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
