package boothttp

import (
	"container/list"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// Defaults of the boot log's and the lookups' limits (Config).
const (
	DefaultRecordWindow = time.Minute
	DefaultRecordBurst  = 30
	DefaultRecordEvery  = 10 * time.Second
	DefaultMissBurst    = 16
	DefaultMissEvery    = 10 * time.Second
	DefaultSources      = 4096
)

// lru is a map bounded to max entries, forgetting the least recently
// used one to make room. The caller serialises its use.
type lru[K comparable, V any] struct {
	max   int
	order list.List // of *lruEntry[K, V], most recent first
	m     map[K]*list.Element
}

type lruEntry[K comparable, V any] struct {
	key K
	val V
}

func newLRU[K comparable, V any](max int) *lru[K, V] {
	return &lru[K, V]{max: max, m: make(map[K]*list.Element)}
}

// peek returns key's value without making it the most recent.
func (l *lru[K, V]) peek(key K) (V, bool) {
	if e, ok := l.m[key]; ok {
		return e.Value.(*lruEntry[K, V]).val, true
	}
	var zero V
	return zero, false
}

// remove forgets key.
func (l *lru[K, V]) remove(key K) {
	if e, ok := l.m[key]; ok {
		l.order.Remove(e)
		delete(l.m, key)
	}
}

// get returns key's value, made by fresh when there is none.
func (l *lru[K, V]) get(key K, fresh func() V) *V {
	if e, ok := l.m[key]; ok {
		l.order.MoveToFront(e)
		return &e.Value.(*lruEntry[K, V]).val
	}
	if l.order.Len() >= l.max {
		old := l.order.Back()
		l.order.Remove(old)
		delete(l.m, old.Value.(*lruEntry[K, V]).key)
	}
	en := &lruEntry[K, V]{key: key, val: fresh()}
	l.m[key] = l.order.PushFront(en)
	return &en.val
}

// bucket is a token bucket: burst tokens, one more every every.
type bucket struct {
	tokens float64
	last   time.Time
}

// limiter is a token bucket per source, for a bounded number of
// sources (a source forgotten starts again with a full bucket).
type limiter struct {
	burst float64
	every time.Duration

	mu      sync.Mutex
	sources *lru[string, bucket]
}

func newLimiter(burst int, every time.Duration, sources int) *limiter {
	return &limiter{burst: float64(burst), every: every, sources: newLRU[string, bucket](sources)}
}

// allow takes a token of source's bucket, reporting false when it has
// none.
func (l *limiter) allow(source string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.sources.get(source, func() bucket { return bucket{tokens: l.burst, last: now} })
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(l.burst, b.tokens+float64(d)/float64(l.every))
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// empty reports whether source's bucket has no token left, without
// taking one.
func (l *limiter) empty(source string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.sources.get(source, func() bucket { return bucket{tokens: l.burst, last: now} })
	return b.tokens+float64(now.Sub(b.last))/float64(l.every) < 1
}

// recordKey is what makes two boot records the same: one source asking
// the same of the same target with the same outcome.
type recordKey struct {
	source, target, image, err string
	step                       site.BootStep
	version                    int
}

// sighting is a record written, and the repeats of it not written since.
type sighting struct {
	until   time.Time
	repeats int
}

// coalescer remembers the records written in the last window, for a
// bounded number of them.
type coalescer struct {
	window time.Duration

	mu   sync.Mutex
	seen *lru[recordKey, sighting]
}

func newCoalescer(window time.Duration, max int) *coalescer {
	return &coalescer{window: window, seen: newLRU[recordKey, sighting](max)}
}

// repeat reports whether a record of key was written less than a window
// ago, counting the repeat; otherwise it starts a window and returns the
// repeats of the window before (to report), false.
func (c *coalescer) repeat(key recordKey, now time.Time) (repeat bool, before int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.seen.get(key, func() sighting { return sighting{} })
	if now.Before(s.until) {
		s.repeats++
		return true, 0
	}
	before = s.repeats
	*s = sighting{until: now.Add(c.window)}
	return false, before
}

// ended tells the coalescer that key, a served initrd, ends a boot: if
// the same source's script and kernel of that boot were seen within the
// window, the boot went through whole, and the source's next requests
// for the target are a new boot (a reboot), recorded again, not
// repeats. A flood of one step, or of refusals, goes on being one record.
func (c *coalescer) ended(key recordKey, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	steps := []site.BootStep{site.BootScript, site.BootKernel, site.BootInitrd}
	for _, st := range steps[:2] {
		k := key
		k.step = st
		if s, ok := c.seen.peek(k); !ok || !now.Before(s.until) {
			return
		}
	}
	for _, st := range steps {
		k := key
		k.step = st
		c.seen.remove(k)
	}
}

// source is the address a request came from, without its port: one
// machine, whatever connection it opens.
func source(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return truncate(r.RemoteAddr, 300)
	}
	return host
}
