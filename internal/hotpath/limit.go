package hotpath

import (
	"cmp"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a Limiter.
const (
	// DefaultMaxConnsPerClient is how many connections one client address
	// may hold: far more than a browser (6) or a StoreFront server's
	// pool needs, and few enough that one host cannot hold the broker's
	// descriptors (a finding: 4,300 idle keep-alive connections from one
	// host, and nobody could log on).
	DefaultMaxConnsPerClient = 256
	// DefaultReserve is how many file descriptors the default total
	// leaves for everything else: the site DB's pool and files, VDAs',
	// peers' and the directory's connections, the blobs' memory files.
	// A tenth of the limit is left when that is more.
	DefaultReserve = 512
	// minDefaultMaxConns is the least total the default gives, however
	// low the descriptor limit.
	minDefaultMaxConns = 64
)

// LimitConfig configures a Limiter.
type LimitConfig struct {
	// MaxConns bounds the connections held in total: 0 means
	// DefaultMaxConns(), negative no bound.
	MaxConns int
	// MaxConnsPerClient bounds the connections of one client address: 0
	// means DefaultMaxConnsPerClient, negative no bound. Connections
	// without an IP address (a Unix socket's) are bounded in total only.
	MaxConnsPerClient int
	Logger            *slog.Logger
}

// A Limiter bounds the connections of one or more Servers (a site's
// listeners share one, as they share the process's descriptors), per
// client address and in total. A Server takes a slot for each connection
// it accepts, before it does anything else with it, and gives it back
// once the connection is closed, on every path: closed by the client, by
// a timeout, at Shutdown, or by the fallback server after a hand-over.
//
// A client address at its bound is refused: its new connection gets a
// minimal 503 if the socket takes it at once (plain TCP only; a TLS one is
// closed without a word, as an answer would cost a handshake), and is
// closed. At the total bound, the connection idle the longest (waiting
// for its next request, on a loop or in the fallback server) is closed
// and its slot goes to the new connection; with none idle, the new one
// is refused. Until the closed connection's owner has closed its
// descriptor, which is at once for a goroutine's and within one turn for
// a loop's, the process holds one more than the bound.
//
// Finding the idle connection scans the connections held, under the
// Limiter's lock: it costs a few microseconds per thousand connections,
// once per connection accepted at the bound, and nothing below it. A
// connection marks itself idle and busy with one atomic operation.
type Limiter struct {
	max, perClient int
	log            *slog.Logger
	epoch          time.Time

	mu      sync.Mutex
	slots   []*slot // held, each at its index i
	clients map[netip.Addr]int
	peak    int
	// notify, when a watcher waits (watched), is closed at every change.
	notify  chan struct{}
	watched atomic.Bool

	refusedClient, refusedTotal, evicted atomic.Int64
	lastWarn                             atomic.Int64
}

// NewLimiter returns a Limiter. It first raises the process's soft limit
// on open files to the hard limit (RaiseFileLimit), so that a default
// total has the descriptors it counts on.
func NewLimiter(cfg LimitConfig) *Limiter {
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	if before, after, hard, err := RaiseFileLimit(); err != nil {
		log.Warn("raising the open files limit failed", "err", err, "soft", before, "hard", hard)
	} else {
		log.Debug("open files limit", "soft", after, "was", before, "hard", hard)
	}
	l := &Limiter{max: cfg.MaxConns, perClient: cfg.MaxConnsPerClient, log: log, epoch: time.Now(), clients: map[netip.Addr]int{}}
	if l.max == 0 {
		l.max = DefaultMaxConns()
	}
	if l.perClient == 0 {
		l.perClient = DefaultMaxConnsPerClient
	}
	log.Debug("connection limits", "max", l.max, "per_client", l.perClient)
	return l
}

// DefaultMaxConns is the default total: the open files limit less
// DefaultReserve or a tenth of it, whichever is more, and at least 64.
// Without a limit to read (not Unix), it is 10,000.
func DefaultMaxConns() int {
	n, ok := fileLimit()
	if !ok {
		return 10000
	}
	reserve := max(DefaultReserve, n/10)
	return max(n-reserve, minDefaultMaxConns)
}

// Limits returns the bounds in force; a non-positive one is no bound.
func (l *Limiter) Limits() (total, perClient int) { return l.max, l.perClient }

// LimitStats are a Limiter's counts.
type LimitStats struct {
	// Conns is how many connections hold a slot; Peak the most that
	// ever did at once.
	Conns, Peak int
	// RefusedPerClient and RefusedTotal count connections refused
	// because their client address, or every slot, was taken; Evicted
	// counts idle connections closed to make room for a new one.
	RefusedPerClient, RefusedTotal, Evicted int64
}

// Stats returns the counts.
func (l *Limiter) Stats() LimitStats {
	l.mu.Lock()
	n, peak := len(l.slots), l.peak
	l.mu.Unlock()
	return LimitStats{Conns: n, Peak: peak, RefusedPerClient: l.refusedClient.Load(), RefusedTotal: l.refusedTotal.Load(), Evicted: l.evicted.Load()}
}

// Why a connection was refused.
const (
	admitted = iota
	refusedClient
	refusedTotal
)

// slot states, besides idle, which is the time (since the Limiter's
// epoch, positive) the connection went idle.
const (
	slotBusy     = 0
	slotEvicted  = -1
	slotReleased = -2
)

// A slot is one connection's place in a Limiter. Its owner (the goroutine
// or loop serving the connection) marks it idle and busy; the Limiter may
// take an idle slot (evict), and then calls evict, which must make the
// owner close the connection soon, from any goroutine.
type slot struct {
	l    *Limiter
	addr netip.Addr
	i    int // index in l.slots, under l.mu
	// state is the time the connection went idle, or one of slotBusy,
	// slotEvicted, slotReleased.
	state atomic.Int64
	evict func()
}

// reserve takes a slot for a connection from addr (an invalid addr has no
// bound of its own), or says why not. The slot is busy; its owner sets
// evict before marking it idle.
func (l *Limiter) reserve(addr netip.Addr) (*slot, int) {
	addr = addr.Unmap()
	l.mu.Lock()
	if l.perClient > 0 && addr.IsValid() && l.clients[addr] >= l.perClient {
		l.mu.Unlock()
		l.refusedClient.Add(1)
		l.warn("connection refused: its client address holds too many", addr, refusedClient)
		return nil, refusedClient
	}
	var victim *slot
	if l.max > 0 && len(l.slots) >= l.max {
		if victim = l.idlestLocked(); victim == nil {
			l.mu.Unlock()
			l.refusedTotal.Add(1)
			l.warn("connection refused: every connection is taken and none is idle", addr, refusedTotal)
			return nil, refusedTotal
		}
		l.removeLocked(victim)
	}
	s := &slot{l: l, addr: addr, i: len(l.slots)}
	l.slots = append(l.slots, s)
	if addr.IsValid() {
		l.clients[addr]++
	}
	l.peak = max(l.peak, len(l.slots))
	l.changedLocked()
	l.mu.Unlock()
	if victim != nil {
		l.evicted.Add(1)
		victim.evict()
	}
	return s, admitted
}

// idlestLocked takes the slot idle the longest, marked evicted, or
// returns nil when none is idle.
func (l *Limiter) idlestLocked() *slot {
	for {
		var best *slot
		var since int64
		for _, s := range l.slots {
			if v := s.state.Load(); v > 0 && (best == nil || v < since) {
				best, since = s, v
			}
		}
		if best == nil {
			return nil
		}
		// Its owner may have taken it back meanwhile: then look again.
		if best.state.CompareAndSwap(since, slotEvicted) {
			return best
		}
	}
}

// removeLocked takes s out of the slots held.
func (l *Limiter) removeLocked(s *slot) {
	last := len(l.slots) - 1
	l.slots[s.i] = l.slots[last]
	l.slots[s.i].i = s.i
	l.slots[last] = nil
	l.slots = l.slots[:last]
	if s.addr.IsValid() {
		if l.clients[s.addr]--; l.clients[s.addr] <= 0 {
			delete(l.clients, s.addr)
		}
	}
}

// idle marks the connection waiting for a request. A nil slot (no
// Limiter) ignores it, and busy and release too.
func (s *slot) idle() {
	if s == nil {
		return
	}
	for {
		v := s.state.Load()
		if v != slotBusy {
			return // idle already, or evicted or released: it stays so
		}
		if s.state.CompareAndSwap(v, int64(time.Since(s.l.epoch))+1) {
			break
		}
	}
	if s.l.watched.Load() {
		s.l.mu.Lock()
		s.l.changedLocked()
		s.l.mu.Unlock()
	}
}

// busy marks the connection serving a request. It returns false when
// the slot was taken for another connection: its owner must close it.
func (s *slot) busy() bool {
	if s == nil {
		return true
	}
	for {
		v := s.state.Load()
		if v <= 0 {
			return v == slotBusy
		}
		if s.state.CompareAndSwap(v, slotBusy) {
			return true
		}
	}
}

// release gives the slot back once the connection is closed. Only the
// first call counts.
func (s *slot) release() {
	if s == nil {
		return
	}
	if v := s.state.Swap(slotReleased); v == slotEvicted || v == slotReleased {
		return // the slot went to another connection, or back already
	}
	l := s.l
	l.mu.Lock()
	l.removeLocked(s)
	l.changedLocked()
	l.mu.Unlock()
}

// changedLocked wakes those waiting for a change.
func (l *Limiter) changedLocked() {
	if l.notify != nil {
		close(l.notify)
		l.notify = nil
		l.watched.Store(false)
	}
}

// changed returns a channel closed at the next change: a slot taken,
// given back, or marked idle.
func (l *Limiter) changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.notify == nil {
		l.notify = make(chan struct{})
		l.watched.Store(true)
	}
	return l.notify
}

// idleCount counts the idle slots.
func (l *Limiter) idleCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.slots {
		if s.state.Load() > 0 {
			n++
		}
	}
	return n
}

// warnEvery spaces the refusals' warnings: under a flood of
// connections, one line in a while, the metrics count them all.
const warnEvery = 10 * time.Second

func (l *Limiter) warn(msg string, addr netip.Addr, why int) {
	now := int64(time.Since(l.epoch))
	last := l.lastWarn.Load()
	if last != 0 && now-last < int64(warnEvery) || !l.lastWarn.CompareAndSwap(last, now) {
		return
	}
	l.log.Warn(msg, "remote", addr, "max", l.max, "per_client", l.perClient,
		"refused_per_client", l.refusedClient.Load(), "refused_total", l.refusedTotal.Load())
}

// refusal is what a refused connection is sent, when its socket takes
// it at once.
var refusal = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n" +
	"Content-Length: 21\r\nRetry-After: 1\r\nConnection: close\r\n\r\ntoo many connections\n")

// addrOf is a net.Addr's IP address; invalid for one without.
func addrOf(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap()
	case nil:
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}
