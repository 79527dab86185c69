package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// testLockout checks the site-wide lock-out state and the domain's
// reservations on it: failures lock an account out, checks under way
// count, concurrent reservations get no more than the threshold, stale
// reservations and the window run out, and none of it moves the
// configuration version.
func testLockout(t *testing.T, open func(*testing.T) site.Store) {
	p := site.LockoutPolicy{Threshold: 3, Window: 10 * time.Minute, Duration: 5 * time.Minute}
	t0 := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	alice := site.AccountKey("user", "alice")

	reserve := func(t *testing.T, s site.Store, acct string, now time.Time) (left time.Duration) {
		t.Helper()
		update(t, s, func(ctx context.Context, tx site.Tx) (err error) {
			left, err = site.ReserveLogon(ctx, tx, acct, now, p)
			return err
		})
		return left
	}
	end := func(t *testing.T, s site.Store, acct string, now time.Time, failed bool) (left time.Duration, lockedNow bool) {
		t.Helper()
		update(t, s, func(ctx context.Context, tx site.Tx) (err error) {
			left, lockedNow, err = site.EndLogon(ctx, tx, acct, now, p, failed)
			return err
		})
		return left, lockedNow
	}
	locks := func(t *testing.T, s site.Store) (all []site.AccountLock) {
		t.Helper()
		view(t, s, func(ctx context.Context, tx site.Tx) (err error) {
			all, err = tx.AccountLocks(ctx)
			return err
		})
		return all
	}

	t.Run("FailuresLockOut", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		v := version(t, s)
		for i := range p.Threshold {
			now := t0.Add(time.Duration(i) * time.Second)
			if left := reserve(t, s, alice, now); left != 0 {
				t.Fatalf("check %d refused (%s left) before the threshold", i+1, left)
			}
			left, lockedNow := end(t, s, alice, now, true)
			if last := i == p.Threshold-1; lockedNow != last || (left > 0) != last {
				t.Fatalf("failure %d: locked now %v, %s left", i+1, lockedNow, left)
			}
		}
		at := t0.Add(time.Minute)
		if left := reserve(t, s, alice, at); left != p.Duration-time.Minute+2*time.Second {
			t.Fatalf("locked account: %s left, want %s", left, p.Duration-time.Minute+2*time.Second)
		}
		if all := locks(t, s); len(all) != 1 || all[0].Account != alice || all[0].LockedUntil.IsZero() {
			t.Fatalf("lock-outs %+v, want alice's", all)
		}
		if left := reserve(t, s, site.AccountKey("user", "bob"), at); left != 0 {
			t.Fatalf("bob refused (%s) for alice's failures", left)
		}
		end(t, s, site.AccountKey("user", "bob"), at, false)
		// The lock runs out by itself; a right password then gets in.
		after := t0.Add(p.Duration + 3*time.Second)
		if left := reserve(t, s, alice, after); left != 0 {
			t.Fatalf("after the lock: %s left", left)
		}
		if left, _ := end(t, s, alice, after, false); left != 0 {
			t.Fatalf("a right password after the lock: %s left", left)
		}
		if all := locks(t, s); len(all) != 0 {
			t.Fatalf("lock-outs %+v after a right password, want none", all)
		}
		if got := version(t, s); got != v {
			t.Fatalf("configuration version moved from %d to %d", v, got)
		}
	})

	t.Run("UnlockClears", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		for range p.Threshold {
			reserve(t, s, alice, t0)
			end(t, s, alice, t0, true)
		}
		var was bool
		update(t, s, func(ctx context.Context, tx site.Tx) (err error) {
			was, err = site.UnlockAccount(ctx, tx, alice, t0)
			return err
		})
		if !was || reserve(t, s, alice, t0) != 0 {
			t.Fatalf("unlock: was locked %v, and a check after it is refused", was)
		}
	})

	t.Run("ChecksUnderWayCount", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		// Concurrent reservations, none decided: exactly the threshold
		// get one, through however many transactions.
		var wg sync.WaitGroup
		var mu sync.Mutex
		granted := 0
		for range 12 {
			wg.Go(func() {
				err := s.Update(context.Background(), func(tx site.Tx) error {
					left, err := site.ReserveLogon(context.Background(), tx, alice, t0, p)
					if err == nil && left == 0 {
						mu.Lock()
						granted++
						mu.Unlock()
					}
					return err
				})
				if err != nil && site.ErrorCode(err) != site.EUnavailable { // a store may refuse a conflicting transaction
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if granted != p.Threshold {
			t.Fatalf("%d concurrent reservations granted, want the threshold (%d)", granted, p.Threshold)
		}
		// A broker that died holding them: they go stale.
		if left := reserve(t, s, alice, t0.Add(30*time.Second)); left == 0 {
			t.Fatal("a fourth check granted while three are under way")
		}
		if left := reserve(t, s, alice, t0.Add(2*time.Minute)); left != 0 {
			t.Fatalf("stale reservations still count: %s", left)
		}
	})

	t.Run("WindowRunsOut", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		for i := range p.Threshold - 1 {
			now := t0.Add(time.Duration(i) * time.Minute)
			reserve(t, s, alice, now)
			end(t, s, alice, now, true)
		}
		later := t0.Add(p.Window + time.Minute)
		reserve(t, s, alice, later)
		if left, lockedNow := end(t, s, alice, later, true); lockedNow || left != 0 {
			t.Fatalf("a failure after the window locked the account (%s)", left)
		}
		all := locks(t, s)
		if len(all) != 1 || all[0].Failures != 1 {
			t.Fatalf("state %s, want one failure in a new window", fmt.Sprint(all))
		}
	})
}
