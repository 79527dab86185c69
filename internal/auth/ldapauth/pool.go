package ldapauth

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-ldap/ldap/v3"
)

// server is one directory server and its pool of connections: at most
// PoolSize open at once, idle or in use. An idle connection is either
// bound as the service account or not (it last checked a user's
// password); callers say which they want, and a connection is rebound
// only when no idle one of that kind is left and the pool is full.
type server struct {
	endpoint
	d *Directory

	slots chan struct{} // one token per open connection allowed

	mu      sync.Mutex
	idle    []*conn
	inUse   int
	closed  bool
	downTil time.Time     // not tried before this, after a failure
	downCh  chan struct{} // closed (and replaced) when the server is marked down: its waiters give up
	backoff time.Duration
	lastErr error

	inChain atomic.Int32 // 0 unknown, 1 AD's in-chain rule works, 2 it does not
}

// conn is one connection to a server.
type conn struct {
	s       *server
	l       *ldap.Conn
	service bool // bound as the service account
	reused  bool // came from the idle list
	dead    bool // failed or closed: not to be used again
}

func newServer(d *Directory, ep endpoint) *server {
	return &server{endpoint: ep, d: d, slots: make(chan struct{}, d.cfg.PoolSize), downCh: make(chan struct{})}
}

// acquire returns a connection, bound as the service account when service
// is true, waiting for a free slot when the pool is full. It dials a new
// one when no idle one is left.
func (s *server) acquire(ctx context.Context, service bool) (*conn, error) {
	s.mu.Lock()
	down := s.downCh
	s.mu.Unlock()
	wait := time.NewTimer(s.d.cfg.OpTimeout)
	defer wait.Stop()
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-down:
		return nil, s.down("marked down while waiting for a pooled connection", nil)
	case <-wait.C:
		return nil, s.down(fmt.Sprintf("no pooled connection free within %v", s.d.cfg.OpTimeout), nil)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.slots
		return nil, s.down("the directory is closed", nil)
	}
	// An idle connection of the kind asked for, the most recently used;
	// else a new one while the pool has room; else an idle one of the
	// other kind, to be rebound.
	s.inUse++
	pick := -1
	for i := len(s.idle) - 1; i >= 0; i-- {
		if s.idle[i].service == service {
			pick = i
			break
		}
	}
	if pick < 0 && len(s.idle) > 0 && s.inUse+len(s.idle) > cap(s.slots) {
		pick = len(s.idle) - 1
	}
	var c *conn
	if pick >= 0 {
		c = s.idle[pick]
		s.idle = append(s.idle[:pick], s.idle[pick+1:]...)
	}
	s.reportLocked()
	s.mu.Unlock()

	if c != nil && service && !c.service {
		if err := c.bindService(ctx); err != nil {
			c.l.Close()
			if !unavailable(err) || ctx.Err() != nil {
				s.release(nil)
				return nil, err
			}
			s.dropIdle() // c was dead, the others likely are: start afresh
			c = nil
		}
	}
	if c != nil {
		c.reused = true
		return c, nil
	}
	c, err := s.dial(ctx)
	if err == nil && service {
		if err = c.bindService(ctx); err != nil {
			c.l.Close()
		}
	}
	if err != nil {
		s.release(nil)
		return nil, err
	}
	return c, nil
}

// release returns c to the idle list; nil or a dead connection gives back
// its slot only.
func (s *server) release(c *conn) {
	s.mu.Lock()
	s.inUse--
	if c != nil && !c.dead && !s.closed {
		c.reused = false
		s.idle = append(s.idle, c)
		c = nil
	}
	s.reportLocked()
	s.mu.Unlock()
	if c != nil {
		c.l.Close()
	}
	<-s.slots
}

func (s *server) reportLocked() {
	s.d.metrics.Pool(s.url, s.inUse, s.inUse+len(s.idle))
}

// dropIdle closes every idle connection: after one of them turned out
// dead, the others (from before a server restart) likely are too.
func (s *server) dropIdle() {
	s.mu.Lock()
	idle := s.idle
	s.idle = nil
	s.reportLocked()
	s.mu.Unlock()
	for _, c := range idle {
		c.l.Close()
	}
}

// dial opens a connection: TCP, then TLS (ldaps) or StartTLS (ldap:// unless
// plain is allowed), all within DialTimeout. It does not bind.
func (s *server) dial(ctx context.Context) (c *conn, err error) {
	start := time.Now()
	defer func() { s.d.metrics.Operation(s.url, OpDial, resultOf(ctx, err), time.Since(start)) }()
	ctx, cancel := context.WithTimeout(ctx, s.d.cfg.DialTimeout)
	defer cancel()
	var dialer net.Dialer
	raw, err := dialer.DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return nil, s.down("dial", err)
	}
	deadline, _ := ctx.Deadline()
	raw.SetDeadline(deadline) // covers the TLS handshake and StartTLS, which take no context
	nc := raw
	if s.implicit {
		tc := tls.Client(raw, s.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, s.down("TLS handshake", err)
		}
		nc = tc
	}
	l := ldap.NewConn(nc, s.implicit)
	l.Start()
	l.SetTimeout(s.d.cfg.OpTimeout)
	if s.startTLS {
		if err := l.StartTLS(s.tls); err != nil {
			l.Close()
			return nil, s.down("starttls", err)
		}
	}
	raw.SetDeadline(time.Time{})
	return &conn{s: s, l: l}, nil
}

// do runs op on c within OpTimeout and ctx (the connection is closed if
// ctx ends first), and records it.
func (c *conn) do(ctx context.Context, op Op, f func() error) error {
	start := time.Now()
	stop := context.AfterFunc(ctx, func() { c.l.Close() })
	err := f()
	if !stop() {
		c.l.Close() // wait for the close that ctx started
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		c.dead = true
		err = fmt.Errorf("%s: %w", c.s.url, ctx.Err())
	case c.l.IsClosing() || unavailable(err): // the connection died: a timeout, a reset, an EOF
		c.dead = true
		err = c.s.down(string(op), err)
	}
	c.s.d.metrics.Operation(c.s.url, op, resultOf(ctx, err), time.Since(start))
	return err
}

// bindService binds c as the service account.
func (c *conn) bindService(ctx context.Context) error {
	cfg := &c.s.d.cfg
	err := c.do(ctx, OpServiceBind, func() error { return c.l.Bind(cfg.BindDN, cfg.BindPassword) })
	switch {
	case err == nil:
		c.service = true
		return nil
	case ldap.IsErrorWithCode(err, ldap.LDAPResultInvalidCredentials):
		return c.s.down(fmt.Sprintf("the server refuses the service account %q: invalid credentials", cfg.BindDN), nil)
	case unavailable(err):
		return c.s.down("service bind", err)
	default:
		return c.s.down(fmt.Sprintf("service bind as %q", cfg.BindDN), err)
	}
}

// down returns a *downError for s: what failed, and the error if any.
func (s *server) down(what string, err error) error {
	if err != nil {
		err = fmt.Errorf("%s: %w", what, err)
	} else {
		err = errors.New(what)
	}
	return &downError{url: s.url, err: err}
}

// unavailable reports whether err means the server cannot be used now
// (rather than that it answered with an error about the request).
func unavailable(err error) bool {
	var ne net.Error
	var de *downError
	return errors.As(err, &de) || errors.Is(err, ErrUnavailable) || errors.As(err, &ne) ||
		ldap.IsErrorAnyOf(err, ldap.ErrorNetwork, ldap.LDAPResultBusy, ldap.LDAPResultUnavailable)
}

func resultOf(ctx context.Context, err error) Result {
	switch {
	case err == nil:
		return ResultOK
	case ctx.Err() != nil:
		return ResultCanceled
	case unavailable(err):
		return ResultUnavailable
	default:
		return ResultRefused
	}
}

// usable returns nil when the server may be tried now, else why not.
func (s *server) usable(now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Before(s.downTil) {
		return fmt.Errorf("%w (next try in %v)", s.lastErr, s.downTil.Sub(now).Round(time.Millisecond))
	}
	return nil
}

// failed marks the server down for its backoff, doubled on every failure in
// a row, and closes its idle connections.
func (s *server) failed(err error) {
	s.mu.Lock()
	if s.backoff == 0 {
		s.backoff = s.d.cfg.ReconnectBackoff
		s.d.log.Warn("ldap server down", "server", s.url, "error", err.Error())
	} else if time.Now().After(s.downTil) { // a retry failed
		s.backoff = min(2*s.backoff, MaxReconnectBackoff)
	}
	s.downTil = time.Now().Add(s.backoff)
	s.lastErr = err
	close(s.downCh) // the waiters of now give up; later ones wait on a new channel
	s.downCh = make(chan struct{})
	s.mu.Unlock()
	s.dropIdle()
}

// ok clears the server's failure state.
func (s *server) ok() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.backoff == 0 {
		return
	}
	s.d.log.Info("ldap server back", "server", s.url)
	s.backoff, s.downTil, s.lastErr = 0, time.Time{}, nil
}

func (s *server) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.dropIdle()
}
