package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"hash"
	"runtime"
	"sync"
	"sync/atomic"
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
	// checks and decoys count argon2id computations, for tests and
	// metrics.
	checks, decoys atomic.Int64
	// checkNanos is the time the checks took, waits for a slot left out.
	checkNanos atomic.Int64

	// verify checks a password against a stored hash: VerifyPassword,
	// or a test's stand-in.
	verify func(storedHash, password string) (bool, error)

	mu      sync.Mutex
	entries map[[32]byte]time.Time // key -> expiry
	byName  map[string][][32]byte
	flights map[[32]byte]*flight // checks under way, by key
	waiting int                  // callers waiting on another's check
}

// flight is a check under way that callers with the same key wait for.
type flight struct {
	done chan struct{}
	ok   bool
	err  error
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
		verify: VerifyPassword, entries: map[[32]byte]time.Time{}, byName: map[string][][32]byte{},
		flights: map[[32]byte]*flight{}}
	c.macs.New = func() any { return &keyedMAC{h: hmac.New(sha256.New, c.key), buf: make([]byte, 0, 512)} }
	return c
}

func (c *VerifiedCache) id(name, password, storedHash string) [32]byte {
	m := c.macs.Get().(*keyedMAC)
	defer c.macs.Put(m)
	m.h.Reset()
	// The fields, each ended by a zero byte, go in as one write: a hash
	// takes bytes, and each string written alone would be copied.
	b := m.buf[:0]
	for _, s := range [...]string{name, password, storedHash} {
		b = append(append(b, s...), 0)
	}
	m.h.Write(b)
	clear(b) // no password stays in the pool
	var k [32]byte
	copy(k[:], m.h.Sum(b[:0]))
	if cap(b) <= maxMACBuf {
		m.buf = b
	}
	return k
}

// keyedMAC is an HMAC state keyed with the cache's key and a buffer for
// its input.
type keyedMAC struct {
	h   hash.Hash
	buf []byte
}

// maxMACBuf bounds the input buffer a pooled state keeps.
const maxMACBuf = 4 << 10

// A Credential is one logon's name, password and stored hash with their
// key in a VerifiedCache, computed once: a logon that asks whether the
// cache knows them, shares a check of them and verifies them pays for one
// HMAC, not one per question. It is a value; the zero Credential is not
// usable.
type Credential struct {
	c                          *VerifiedCache
	name, password, storedHash string
	k                          [32]byte
}

// Credential returns the cache's key for name, password and storedHash.
func (c *VerifiedCache) Credential(name, password, storedHash string) Credential {
	return Credential{c: c, name: name, password: password, storedHash: storedHash, k: c.id(name, password, storedHash)}
}

// Verify reports whether password matches storedHash, from the cache when
// it can, and remembers a match.
func (c *VerifiedCache) Verify(name, password, storedHash string) (bool, error) {
	return c.Credential(name, password, storedHash).Verify()
}

// Verify reports whether the password matches the stored hash, from the
// cache when it can, and remembers a match.
func (cr Credential) Verify() (bool, error) {
	c := cr.c
	now := c.now()
	c.mu.Lock()
	exp, ok := c.entries[cr.k]
	c.mu.Unlock()
	if ok && now.Before(exp) {
		return true, nil
	}
	c.hashing <- struct{}{}
	c.checks.Add(1)
	start := time.Now()
	match, err := c.verify(cr.storedHash, cr.password)
	c.checkNanos.Add(int64(time.Since(start)))
	<-c.hashing
	if err != nil || !match {
		return false, err
	}
	c.remember(cr.name, cr.k, now)
	return true, nil
}

// Remember records that password is name's, checked by other means than
// a stored hash (a directory's bind): stamp stands for the hash, and
// must change when the password does (a directory's password-change
// time), so that a changed password misses the cache.
func (c *VerifiedCache) Remember(name, password, stamp string) {
	c.remember(name, c.id(name, password, stamp), c.now())
}

func (c *VerifiedCache) remember(name string, k [32]byte, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.max {
		c.evictLocked(now)
	}
	if _, ok := c.entries[k]; !ok {
		c.byName[name] = append(c.byName[name], k)
	}
	c.entries[k] = now.Add(c.ttl)
}

// Known reports whether the cache holds a live match of password and
// storedHash for name, without computing anything: a caller may then
// skip the reservations that bound guesses, since this is none.
func (c *VerifiedCache) Known(name, password, storedHash string) bool {
	return c.Credential(name, password, storedHash).Known()
}

// Known reports whether the cache holds a live match of the credential,
// without computing anything.
func (cr Credential) Known() bool {
	c := cr.c
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	exp, ok := c.entries[cr.k]
	return ok && now.Before(exp)
}

// Share runs check once for concurrent callers with the same name,
// password and stored hash: the first caller runs it, and the others wait
// for its answer, which they get with shared true. check is the caller's
// whole password check (a reservation with a lock-out guard, Verify, the
// guard's verdict), so that concurrent logons of one user with one
// password cost one argon2id computation and one reservation. Nothing is
// remembered past the flight: a failed check is not cached (only Verify
// caches, and only a match), and a changed password (a new stored hash)
// never joins an older flight. Different keys run in parallel, up to the
// hashing bound.
func (c *VerifiedCache) Share(name, password, storedHash string, check func() (bool, error)) (ok bool, err error, shared bool) {
	return c.Credential(name, password, storedHash).Share(check)
}

// Share is VerifiedCache.Share for the credential.
func (cr Credential) Share(check func() (bool, error)) (ok bool, err error, shared bool) {
	c, k := cr.c, cr.k
	c.mu.Lock()
	if f := c.flights[k]; f != nil {
		c.waiting++
		c.mu.Unlock()
		<-f.done
		c.mu.Lock()
		c.waiting--
		c.mu.Unlock()
		return f.ok, f.err, true
	}
	f := &flight{done: make(chan struct{})}
	c.flights[k] = f
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.flights, k)
		c.mu.Unlock()
		close(f.done)
	}()
	f.ok, f.err = check()
	return f.ok, f.err, false
}

// Waiting returns how many callers of Share are waiting for another's
// check.
func (c *VerifiedCache) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiting
}

// SetVerifier replaces the password check that Verify runs on a miss
// (VerifyPassword), for tests that must hold a check under way. Call it
// before the cache is used.
func (c *VerifiedCache) SetVerifier(verify func(storedHash, password string) (bool, error)) {
	c.verify = verify
}

// Decoy spends what verifying password against storedHash would (the
// same argon2id costs, in the same queue) without checking anything, for
// an unknown or locked-out account: its answer then takes as long as a
// wrong password's. A malformed storedHash costs DefaultParams.
func (c *VerifiedCache) Decoy(storedHash, password string) {
	p, _, key, err := parseHash(storedHash)
	if err != nil {
		p, key = DefaultParams, make([]byte, DefaultParams.KeyLen)
	}
	c.hashing <- struct{}{}
	c.decoys.Add(1)
	argon2IDKey([]byte(password), decoySalt[:], p.Iterations, p.MemoryKiB, p.Parallelism, uint32(len(key)))
	<-c.hashing
}

// Decoy is VerifiedCache.Decoy for the credential's password and hash.
func (cr Credential) Decoy() { cr.c.Decoy(cr.storedHash, cr.password) }

var decoySalt = [16]byte{'u', 's', 'h', 'e', 'r', ' ', 'd', 'e', 'c', 'o', 'y'}

// Hashes returns how many password checks (argon2id computations against
// an account's hash) and decoy computations the cache has made: cache hits
// make none.
func (c *VerifiedCache) Hashes() (checks, decoys int64) {
	return c.checks.Load(), c.decoys.Load()
}

// CheckTime returns the time the password checks took in all, each from
// when it had a hashing slot: divided by Hashes' checks, what one check
// costs on this broker now (a check on memory the process has not touched
// yet, as after a start, costs several times a warm one).
func (c *VerifiedCache) CheckTime() time.Duration { return time.Duration(c.checkNanos.Load()) }

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
