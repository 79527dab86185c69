package hostcache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usher-vdi/usher/internal/block"
)

// ErrUpstreamDown is returned for a read that needs upstream while the
// connection to it is lost; a cached block is still served.
var ErrUpstreamDown = errors.New("hostcache: upstream unreachable")

// Conn is a connection to upstream: a device whose Done channel is
// closed once the connection is dead (nbd.Client is one).
type Conn interface {
	block.Device
	Done() <-chan struct{}
}

// UpstreamOptions tune an Upstream; zero values take the defaults.
type UpstreamOptions struct {
	// Timeout bounds each read (default 30 s); a read past it gives the
	// connection up, and it is dialled again.
	Timeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between dials (defaults
	// 100 ms and 10 s), doubled after each failure, with jitter.
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
	// Name names the upstream in logs.
	Name string
	// Wait, when positive, makes a read (or block status) that needs
	// upstream while the connection is down wait up to Wait for it to
	// come back, and retries one that failed because its connection
	// died, instead of failing at once with ErrUpstreamDown: a device
	// that boots from upstream (usher target) sees a pause, not an I/O
	// error, while the stream restarts. Past Wait it gets
	// ErrUpstreamDown.
	Wait time.Duration
}

// Upstream is a read-only device over a connection that it dials again,
// with backoff, when the connection fails. While it is down, reads fail
// at once with ErrUpstreamDown instead of waiting (unless
// UpstreamOptions.Wait says how long to wait). Reads are not cut off
// by their caller's cancellation (a VM that goes away must not give up
// the connection every other VM shares); Timeout bounds them instead.
type Upstream struct {
	dial func(context.Context) (Conn, error)
	size int64
	opt  UpstreamOptions

	mu      sync.Mutex
	conn    Conn          // nil while down
	lastErr error         // why it is down
	back    chan struct{} // closed when the connection is back (made when it goes down)
	since   time.Time
	closed  bool
	stop    chan struct{}
	wg      sync.WaitGroup

	reconnects, failures atomic.Int64
}

// NewUpstream returns an Upstream over first, dialling again with dial
// (which must reach the same content) when it fails.
func NewUpstream(first Conn, dial func(context.Context) (Conn, error), opt UpstreamOptions) *Upstream {
	u := newUpstream(first.Size(), dial, opt)
	u.conn = first
	u.watch(first)
	return u
}

// NewUpstreamDown returns an Upstream of size bytes that is not
// connected yet: reads fail with ErrUpstreamDown until dial succeeds.
// A host that starts while upstream is unreachable serves its cache so.
func NewUpstreamDown(size int64, dial func(context.Context) (Conn, error), opt UpstreamOptions, why error) *Upstream {
	u := newUpstream(size, dial, opt)
	u.lastErr, u.since, u.back = why, time.Now(), make(chan struct{})
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		u.redial()
	}()
	return u
}

func newUpstream(size int64, dial func(context.Context) (Conn, error), opt UpstreamOptions) *Upstream {
	if opt.Timeout <= 0 {
		opt.Timeout = 30 * time.Second
	}
	if opt.MinBackoff <= 0 {
		opt.MinBackoff = 100 * time.Millisecond
	}
	if opt.MaxBackoff < opt.MinBackoff {
		opt.MaxBackoff = max(opt.MinBackoff, 10*time.Second)
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	return &Upstream{dial: dial, size: size, opt: opt, stop: make(chan struct{})}
}

// watch redials when c dies.
func (u *Upstream) watch(c Conn) {
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		select {
		case <-c.Done():
		case <-u.stop:
			return
		}
		u.mu.Lock()
		if u.closed || u.conn != c {
			u.mu.Unlock()
			return
		}
		u.conn, u.since, u.back = nil, time.Now(), make(chan struct{})
		if u.lastErr == nil {
			u.lastErr = errors.New("connection lost")
		}
		// Counted under the lock, so that whoever sees the connection
		// gone also sees the failure counted.
		u.failures.Add(1)
		u.mu.Unlock()
		c.Close()
		u.opt.Logger.Warn("host cache: upstream connection lost; cached blocks are still served, misses fail until it is back",
			"upstream", u.opt.Name)
		u.redial()
	}()
}

// redial dials until it succeeds or the Upstream is closed.
func (u *Upstream) redial() {
	wait := u.opt.MinBackoff
	for attempt := 1; ; attempt++ {
		jitter := time.Duration(rand.Int64N(int64(wait)/2 + 1))
		select {
		case <-time.After(wait/2 + jitter):
		case <-u.stop:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), u.opt.Timeout)
		c, err := u.dial(ctx)
		cancel()
		if err == nil && c.Size() != u.size {
			c.Close()
			err = fmt.Errorf("the export now has %d bytes, not %d: it is not the same image", c.Size(), u.size)
		}
		if err != nil {
			u.mu.Lock()
			u.lastErr = err
			u.mu.Unlock()
			if attempt == 1 || attempt%10 == 0 {
				u.opt.Logger.Warn("host cache: upstream still unreachable", "upstream", u.opt.Name, "attempt", attempt, "err", err)
			}
			wait = min(2*wait, u.opt.MaxBackoff)
			continue
		}
		u.mu.Lock()
		if u.closed {
			u.mu.Unlock()
			c.Close()
			return
		}
		u.conn, u.lastErr = c, nil
		// Counted before a waiting read can go on, so that a read served
		// on the new connection sees the reconnect counted.
		u.reconnects.Add(1)
		close(u.back)
		down := time.Since(u.since)
		u.mu.Unlock()
		u.opt.Logger.Info("host cache: upstream reconnected", "upstream", u.opt.Name, "down", down.Round(time.Millisecond), "attempts", attempt)
		u.watch(c)
		return
	}
}

// current returns the live connection, or why there is none.
func (u *Upstream) current() (Conn, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.closed:
		return nil, block.ErrClosed
	case u.conn == nil:
		return nil, fmt.Errorf("%w %s for %s (%v); reconnecting", ErrUpstreamDown, u.opt.Name,
			time.Since(u.since).Round(time.Millisecond), u.lastErr)
	}
	return u.conn, nil
}

// Up reports whether the connection is live.
func (u *Upstream) Up() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.conn != nil
}

// Reconnects and Failures count the connection's returns and losses.
func (u *Upstream) Reconnects() int64 { return u.reconnects.Load() }
func (u *Upstream) Failures() int64   { return u.failures.Load() }

func (u *Upstream) Size() int64    { return u.size }
func (u *Upstream) ReadOnly() bool { return true }

// ReadAt implements block.Device.
func (u *Upstream) ReadAt(ctx context.Context, p []byte, off int64) error {
	return u.retry(ctx, func(c Conn, ctx context.Context) error { return c.ReadAt(ctx, p, off) })
}

// Extents implements block.Extenter with the connection's block status
// (one allocated extent when it has none).
func (u *Upstream) Extents(ctx context.Context, off, n int64, dst []block.Extent) ([]block.Extent, error) {
	var out []block.Extent
	err := u.retry(ctx, func(c Conn, ctx context.Context) (err error) {
		out, err = block.Extents(ctx, c, off, n, dst)
		return err
	})
	return out, err
}

// retry runs op on the live connection, bounded by Timeout, and, with
// Wait, waits for a lost connection to come back and runs op again.
func (u *Upstream) retry(ctx context.Context, op func(Conn, context.Context) error) error {
	var deadline time.Time
	for {
		err := u.once(ctx, op)
		if err == nil || u.opt.Wait <= 0 || !errors.Is(err, ErrUpstreamDown) {
			return err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(u.opt.Wait)
		}
		if !u.waitBack(ctx, deadline) {
			return err
		}
	}
}

// once runs op on the live connection; its error wraps ErrUpstreamDown
// when there is none or it died under op.
func (u *Upstream) once(ctx context.Context, op func(Conn, context.Context) error) error {
	c, err := u.current()
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), u.opt.Timeout)
	err = op(c, rctx)
	cancel()
	if err != nil {
		select {
		case <-c.Done():
			u.mu.Lock()
			if u.conn == c {
				u.lastErr = err
			}
			u.mu.Unlock()
			return fmt.Errorf("%w %s: %v", ErrUpstreamDown, u.opt.Name, err)
		default:
		}
	}
	return err
}

// waitBack waits until the connection is back (true), or deadline
// passes, ctx ends or the Upstream is closed (false). A connection that
// died but is not yet seen to be down counts as back: op runs again and
// finds out.
func (u *Upstream) waitBack(ctx context.Context, deadline time.Time) bool {
	u.mu.Lock()
	back, closed := u.back, u.closed
	down := u.conn == nil
	u.mu.Unlock()
	if closed || time.Now().After(deadline) {
		return false
	}
	if !down {
		// The watcher has not seen the death yet: give it a moment.
		back = nil
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	pause := time.After(10 * time.Millisecond)
	if back != nil {
		pause = nil
	}
	select {
	case <-back:
		return true
	case <-pause:
		return true
	case <-ctx.Done():
		return false
	case <-u.stop:
		return false
	case <-t.C:
		return false
	}
}

func (u *Upstream) WriteAt(context.Context, []byte, int64, block.Flags) error {
	return block.ErrReadOnly
}
func (u *Upstream) Zero(context.Context, int64, int64, block.Flags) error { return block.ErrReadOnly }
func (u *Upstream) Trim(context.Context, int64, int64, block.Flags) error { return block.ErrReadOnly }
func (u *Upstream) Flush(context.Context) error                           { return nil }

// Close closes the connection and stops dialling.
func (u *Upstream) Close() error {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil
	}
	u.closed = true
	c := u.conn
	u.conn = nil
	close(u.stop)
	u.mu.Unlock()
	var err error
	if c != nil {
		err = c.Close()
	}
	u.wg.Wait()
	return err
}
