package auth

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// gatedCache returns a cache whose password checks wait for release
// (closed), and the number of checks started so far.
func gatedCache(release <-chan struct{}) (*VerifiedCache, func() int) {
	c := NewVerifiedCache(time.Hour, 100)
	var mu sync.Mutex
	started := 0
	c.SetVerifier(func(hash, pw string) (bool, error) {
		mu.Lock()
		started++
		mu.Unlock()
		<-release
		return VerifyPassword(hash, pw)
	})
	return c, func() int { mu.Lock(); defer mu.Unlock(); return started }
}

// waitFor polls cond, yielding, until it holds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		runtime.Gosched()
	}
}

func TestShareOneCheckForConcurrentMisses(t *testing.T) {
	hash, _ := HashPassword("right", cheap)
	release := make(chan struct{})
	c, started := gatedCache(release)
	const n = 16
	var wg sync.WaitGroup
	results := make(chan bool, n)
	var sharedN int
	var mu sync.Mutex
	for range n {
		wg.Go(func() {
			ok, err, shared := c.Share("alice", "right", hash, func() (bool, error) { return c.Verify("alice", "right", hash) })
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			if shared {
				sharedN++
			}
			mu.Unlock()
			results <- ok
		})
	}
	waitFor(t, func() bool { return c.Waiting() == n-1 && started() == 1 })
	close(release)
	wg.Wait()
	close(results)
	for ok := range results {
		if !ok {
			t.Fatal("a caller was refused the right password")
		}
	}
	if checks, _ := c.Hashes(); checks != 1 {
		t.Errorf("%d checks for %d concurrent misses, want 1", checks, n)
	}
	if sharedN != n-1 {
		t.Errorf("%d callers shared the check, want %d", sharedN, n-1)
	}
	// Other users are not held up by a flight.
	if ok, _, shared := c.Share("bob", "right", hash, func() (bool, error) { return c.Verify("bob", "right", hash) }); !ok || shared {
		t.Errorf("bob: ok %v shared %v", ok, shared)
	}
}

func TestShareFailureNotCached(t *testing.T) {
	hash, _ := HashPassword("right", cheap)
	c := NewVerifiedCache(time.Hour, 100)
	for i := range 2 {
		ok, err, _ := c.Share("alice", "wrong", hash, func() (bool, error) { return c.Verify("alice", "wrong", hash) })
		if ok || err != nil {
			t.Fatalf("wrong password: %v %v", ok, err)
		}
		if checks, _ := c.Hashes(); checks != int64(i+1) {
			t.Fatalf("after %d wrong passwords: %d checks; a failure was cached", i+1, checks)
		}
	}
	if c.Len() != 0 {
		t.Errorf("%d entries after failures only", c.Len())
	}
}

func TestSharePasswordChangeMidFlight(t *testing.T) {
	oldHash, _ := HashPassword("old", cheap)
	newHash, _ := HashPassword("new", cheap)
	release := make(chan struct{})
	c, started := gatedCache(release)
	done := make(chan bool)
	go func() {
		ok, _, _ := c.Share("alice", "old", oldHash, func() (bool, error) { return c.Verify("alice", "old", oldHash) })
		done <- ok
	}()
	waitFor(t, func() bool { return started() == 1 })
	// The password changes: a logon with the old password against the
	// new hash must not join the flight under way.
	other := make(chan bool)
	go func() {
		ok, _, shared := c.Share("alice", "old", newHash, func() (bool, error) { return c.Verify("alice", "old", newHash) })
		if shared {
			t.Error("a check against the new hash joined the old hash's flight")
		}
		other <- ok
	}()
	waitFor(t, func() bool { return started() == 2 })
	close(release)
	if !<-done {
		t.Error("the check against the old hash failed")
	}
	if <-other {
		t.Fatal("the old password passed against the new hash")
	}
	if ok, _ := c.Verify("alice", "old", newHash); ok {
		t.Fatal("the old password passed against the new hash from the cache")
	}
}
