package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"hash"
	"io"
	"runtime"
	"sync"
	"time"
)

// VerifiedCache remembers credentials that verified, so that a repeated
// (name, password) pair skips the argon2id computation. Entries are keyed
// by an HMAC under a per-process random key over the name, the password and
// the stored hash: no password is kept, and a password change (a new stored
// hash) misses the cache by construction. Callers must still check that the
// account is enabled and not locked out, and call Forget on disable.
type VerifiedCache struct {
	key []byte
	// macs pools HMAC states keyed with key: a hit then costs a few
	// hundred nanoseconds.
	macs sync.Pool
	ttl  time.Duration
	max  int
	now  func() time.Time

	// hashing bounds the argon2id computations running at once to one per
	// CPU: each takes ~19 MiB and a core for tens of milliseconds, and more
	// at once only makes every logon slower.
	hashing chan struct{}

	mu      sync.Mutex
	entries map[[32]byte]time.Time // key -> expiry
	byName  map[string][][32]byte
}

// NewVerifiedCache returns a cache whose entries live for ttl, holding at
// most max entries: when full, expired entries go, and all of them if that
// is not enough.
func NewVerifiedCache(ttl time.Duration, max int) *VerifiedCache {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic("auth: crypto/rand failed: " + err.Error())
	}
	c := &VerifiedCache{key: key, ttl: ttl, max: max, now: time.Now, hashing: make(chan struct{}, runtime.GOMAXPROCS(0)),
		entries: map[[32]byte]time.Time{}, byName: map[string][][32]byte{}}
	c.macs.New = func() any { return hmac.New(sha256.New, c.key) }
	return c
}

func (c *VerifiedCache) id(name, password, storedHash string) [32]byte {
	m := c.macs.Get().(hash.Hash)
	defer c.macs.Put(m)
	m.Reset()
	var k [32]byte
	for _, s := range [...]string{name, password, storedHash} {
		io.WriteString(m, s)
		m.Write(k[:1]) // a zero byte ends each field
	}
	m.Sum(k[:0])
	return k
}

// Verify reports whether password matches storedHash, from the cache when
// it can, and remembers a match.
func (c *VerifiedCache) Verify(name, password, storedHash string) (bool, error) {
	k := c.id(name, password, storedHash)
	now := c.now()
	c.mu.Lock()
	exp, ok := c.entries[k]
	c.mu.Unlock()
	if ok && now.Before(exp) {
		return true, nil
	}
	c.hashing <- struct{}{}
	match, err := VerifyPassword(storedHash, password)
	<-c.hashing
	if err != nil || !match {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.max {
		c.evictLocked(now)
	}
	c.entries[k] = now.Add(c.ttl)
	c.byName[name] = append(c.byName[name], k)
	return true, nil
}

// Forget drops every entry of name, for a disabled or locked-out account.
func (c *VerifiedCache) Forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.byName[name] {
		delete(c.entries, k)
	}
	delete(c.byName, name)
}

// Len returns the number of entries.
func (c *VerifiedCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// evictLocked drops expired entries, and if that is not enough, every entry.
func (c *VerifiedCache) evictLocked(now time.Time) {
	for k, exp := range c.entries {
		if !now.Before(exp) {
			delete(c.entries, k)
		}
	}
	if len(c.entries) >= c.max {
		clear(c.entries)
	}
	for name, ks := range c.byName {
		kept := ks[:0]
		for _, k := range ks {
			if _, ok := c.entries[k]; ok {
				kept = append(kept, k)
			}
		}
		if len(kept) == 0 {
			delete(c.byName, name)
		} else {
			c.byName[name] = kept
		}
	}
}
