package hotpath

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/usher-vdi/usher/internal/blob"
)

// Config configures a Server.
type Config struct {
	// Handler answers the requests the loop takes. It should be the
	// fallback server's handler, so that a request means the same on both.
	Handler http.Handler
	// Hot reports whether the loop should take a request for method and
	// path (the path as sent, before any cleaning or unescaping; a path
	// with escapes never gets here). It must be cheap and pure.
	Hot func(method, path string) bool
	// Fallback serves every connection the loop hands over. Its timeouts
	// (ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout) and its
	// BaseContext and ErrorLog apply to the loop too. Serve starts it and
	// Shutdown and Close stop it: the caller must not.
	Fallback *http.Server
	// SendBuffer, when positive, is each TCP connection's SO_SNDBUF
	// (a TLS connection's too).
	SendBuffer int
	// LoopContext, when set, makes the context of the requests that the
	// event loop runs on itself from the connection's: a handler called
	// with it must not wait, and what it calls should say when it would
	// (the handler then calls Defer). Requests run off the loop get the
	// connection's context as it is.
	LoopContext func(context.Context) context.Context
	// Goroutines serves each connection on a goroutine of its own, as on
	// platforms without the event loop and for listeners that are not
	// TCP listeners (TLS ones, say), instead of on event loops.
	Goroutines bool
	// NetHTTP serves every connection with Fallback alone, as a plain
	// http.Server would, for the day the loop misbehaves: no event loop,
	// no request read here, Hot and LoopContext unused. The Limiter, the
	// send buffer and Fallback's timeouts apply as in the other modes;
	// Defer reports false to every request.
	NetHTTP bool
	// Limiter, when set, bounds the connections per client address and
	// in total (see Limiter); Servers may share one. Nil: no bound.
	Limiter *Limiter
	Logger  *slog.Logger
}

// Server is a listener's lean loop with its net/http fallback.
type Server struct {
	cfg     Config
	log     *slog.Logger
	handoff *handoffListener
	baseCtx context.Context

	mu      sync.Mutex
	ln      net.Listener
	conns   map[*conn]struct{}
	loops   []*loop // the event loops, once Serve made them
	closing atomic.Bool
	active  sync.WaitGroup
	hot     atomic.Int64
	handed  atomic.Int64
	// fallbackDone is closed when the fallback server's Serve has
	// returned fallbackErr; nil until Serve starts it.
	fallbackDone chan struct{}
	fallbackErr  error
}

// bufferSize is the size of a loop's read buffer, and of a connection's
// own for a request that does not come whole: a request head longer
// than this goes to net/http, which bounds heads by its MaxHeaderBytes.
const bufferSize = 8 << 10

// maxDrain is the most of an unread request body the loop reads past to
// keep a connection; with more left it closes the connection instead.
const maxDrain = 256 << 10

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Handler == nil || cfg.Hot == nil || cfg.Fallback == nil {
		return nil, errors.New("hotpath: Config.Handler, Hot and Fallback are required")
	}
	s := &Server{cfg: cfg, log: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)), conns: map[*conn]struct{}{}}
	return s, nil
}

// Serve accepts connections on ln until Shutdown or Close, which make it
// return http.ErrServerClosed; it closes ln. It may be called once.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.ln != nil {
		s.mu.Unlock()
		return errors.New("hotpath: Serve called twice")
	}
	if s.closing.Load() {
		s.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	s.ln = ln
	s.handoff = newHandoffListener(ln.Addr())
	s.baseCtx = context.Background()
	if f := s.cfg.Fallback.BaseContext; f != nil {
		s.baseCtx = f(ln)
	}
	if s.cfg.Limiter != nil {
		s.cfg.Fallback.ConnState = trackState(s.cfg.Fallback.ConnState)
	}
	if s.cfg.Goroutines || s.cfg.NetHTTP {
		withTLSState(s.cfg.Fallback)
	}
	// Started under the lock, so that Shutdown and Close, which take it
	// to stop, find the fallback server running or never started.
	s.fallbackDone = make(chan struct{})
	go func() {
		s.fallbackErr = s.cfg.Fallback.Serve(s.handoff)
		close(s.fallbackDone)
	}()
	s.mu.Unlock()
	defer ln.Close()

	if !s.cfg.NetHTTP {
		if handled, err := s.serveLoops(ln); handled {
			return err
		}
	}
	var backoff time.Duration
	for {
		rwc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			if isTemporary(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "err", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		backoff = 0
		var sl *slot
		if lim := s.cfg.Limiter; lim != nil {
			if sl, _ = lim.reserve(addrOf(rwc.RemoteAddr())); sl == nil {
				refuse(rwc)
				continue
			}
			sl.evict = func() { rwc.Close() }
		}
		if tc, ok := tcpConn(rwc); ok && s.cfg.SendBuffer > 0 {
			tc.SetWriteBuffer(s.cfg.SendBuffer)
		}
		if s.cfg.NetHTTP {
			// net/http reads it from its first byte; until a request
			// comes it is idle, and then its ConnState (trackState) marks
			// the slot busy and idle and gives it back.
			sl.idle()
			s.handed.Add(1)
			if !s.handoff.give(&bufferedConn{Conn: rwc, r: rwc, slot: sl}) {
				rwc.Close()
				sl.release()
				return http.ErrServerClosed
			}
			continue
		}
		c := &conn{s: s, rwc: rwc, remote: rwc.RemoteAddr().String(), slot: sl}
		if sc, ok := rwc.(syscall.Conn); ok {
			c.raw, _ = sc.SyscallConn()
		}
		if !s.track(c, true) {
			rwc.Close()
			sl.release()
			return http.ErrServerClosed
		}
		go c.serve()
	}
}

// tcpConn is the TCP connection under c: c itself, or a TLS
// connection's.
func tcpConn(c net.Conn) (*net.TCPConn, bool) {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	tc, ok := c.(*net.TCPConn)
	return tc, ok
}

// refuse closes a connection refused for want of a slot, after a minimal
// 503 when it is plain TCP, whose fresh socket takes the answer at once
// (the deadline only guards against one that does not); a TLS one is
// closed without a word, as an answer would cost a handshake. A client
// whose request came before the close may get a reset in place of the
// answer.
func refuse(rwc net.Conn) {
	if tc, ok := rwc.(*net.TCPConn); ok {
		tc.SetWriteDeadline(time.Now().Add(refuseWrite))
		tc.Write(refusal)
	}
	rwc.Close()
}

// refuseWrite bounds the write of a refusal.
const refuseWrite = 10 * time.Millisecond

// trackState is the fallback server's ConnState: it marks the slots of
// the connections handed over idle and busy, and gives a slot back when
// net/http is done with its connection, then calls next.
func trackState(next func(net.Conn, http.ConnState)) func(net.Conn, http.ConnState) {
	return func(nc net.Conn, st http.ConnState) {
		if bc, ok := nc.(*bufferedConn); ok {
			switch st {
			case http.StateIdle:
				bc.slot.idle()
			case http.StateActive:
				bc.slot.busy() // when false, the connection is being closed
			case http.StateClosed:
				bc.slot.release()
			}
		}
		if next != nil {
			next(nc, st)
		}
	}
}

// isTemporary reports accept errors worth retrying: running out of file
// descriptors or buffers, a connection reset before it was accepted.
func isTemporary(err error) bool {
	type temporary interface{ Temporary() bool }
	var t temporary
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.As(err, &t) && t.Temporary()
}

func (s *Server) track(c *conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.closing.Load() {
			return false
		}
		s.conns[c] = struct{}{}
		s.active.Add(1)
		return true
	}
	delete(s.conns, c)
	s.active.Done()
	return true
}

// Counts returns how many requests the loop answered and how many
// connections it handed to the fallback server.
func (s *Server) Counts() (hot, handedOver int64) { return s.hot.Load(), s.handed.Load() }

// Shutdown stops accepting, closes the loop's idle connections, waits
// for those answering a request to finish it (or for ctx), then shuts the
// fallback server down with ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stop()
	s.mu.Lock()
	for c := range s.conns {
		if c.idle.Load() {
			c.rwc.SetReadDeadline(aLongTimeAgo)
		}
	}
	loops := s.loops
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.active.Wait()
		for _, l := range loops {
			<-l.done
		}
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		s.closeConns()
		for _, l := range loops {
			l.close()
		}
	}
	if ferr := s.cfg.Fallback.Shutdown(ctx); err == nil {
		err = ferr
	}
	s.waitFallback()
	return err
}

// Close closes the listener and every connection at once, the fallback
// server's too.
func (s *Server) Close() error {
	s.stop()
	s.closeConns()
	s.mu.Lock()
	loops := s.loops
	s.mu.Unlock()
	for _, l := range loops {
		l.close()
	}
	for _, l := range loops {
		<-l.done
	}
	err := s.cfg.Fallback.Close()
	s.waitFallback()
	return err
}

func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing.Store(true)
	if s.ln != nil {
		s.ln.Close()
		s.handoff.Close()
	}
	for _, l := range s.loops {
		l.shutdown()
	}
}

func (s *Server) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.rwc.Close()
	}
}

func (s *Server) waitFallback() {
	s.mu.Lock()
	done := s.fallbackDone
	s.mu.Unlock()
	if done != nil {
		<-done
	}
}

var aLongTimeAgo = time.Unix(1, 0)

// conn is one connection in the loop.
type conn struct {
	s   *Server
	rwc net.Conn
	// raw is rwc's raw connection, nil when it has none.
	raw    syscall.RawConn
	remote string
	br     *bufio.Reader
	// idle is set while the connection waits for a request's first byte.
	idle atomic.Bool
	// slot is the connection's in the Limiter, nil without one.
	slot *slot
	head head
	resp response
	bufs net.Buffers
}

func (c *conn) serve() {
	handedOver := false
	defer func() {
		if !handedOver {
			c.rwc.Close()
			c.slot.release()
		}
		c.s.track(c, false)
	}()
	ctx, cancel := context.WithCancel(c.s.baseCtx)
	defer cancel()
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, c.rwc.LocalAddr())
	base, _ := http.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	c.br = bufio.NewReaderSize(c.rwc, bufferSize)
	c.head.header = http.Header{}
	f := c.s.cfg.Fallback
	first := true
	for {
		// Wait for a request, as long as the idle timeout (for the first,
		// the head's timeout) allows.
		wait := cmp.Or(f.IdleTimeout, f.ReadTimeout)
		if first {
			wait = cmp.Or(f.ReadHeaderTimeout, f.ReadTimeout)
		}
		c.idle.Store(true)
		c.slot.idle()
		if c.s.closing.Load() {
			return
		}
		setDeadline(c.rwc.SetReadDeadline, wait)
		if !first && c.br.Buffered() == 0 {
			// The client is reading the answer just sent: let the other
			// connections run first, so that its next request is likely
			// there when this one reads, saving a read that finds
			// nothing and a trip through the poller.
			runtime.Gosched()
		}
		if _, err := c.br.Peek(1); err != nil {
			return
		}
		if first {
			base.TLS = tlsState(c.rwc) // the handshake is done once a byte came
		}
		c.idle.Store(false)
		if !c.slot.busy() {
			return // closed to make room for another connection
		}
		start := time.Now()
		// A head that came whole with its first byte, as a well-behaved
		// client's does, needs no head deadline: serveRequest sets the
		// request's.
		if buf, _ := c.br.Peek(c.br.Buffered()); !wholeHead(buf) {
			setDeadline(c.rwc.SetReadDeadline, cmp.Or(f.ReadHeaderTimeout, f.ReadTimeout))
		}
		ok, err := c.readHead()
		if err != nil {
			return
		}
		if !ok {
			handedOver = c.handOver()
			return
		}
		if !c.serveRequest(base, start) || c.s.closing.Load() {
			return
		}
		first = false
	}
}

// readHead reads until the buffer holds a whole head, and parses it. It
// returns false when the loop should not take the request.
func (c *conn) readHead() (bool, error) {
	for from := 0; ; {
		buf, _ := c.br.Peek(c.br.Buffered())
		n, bare := headEnd(buf, from)
		from = len(buf)
		if bare {
			return false, nil
		}
		if n >= 0 {
			h := &c.head
			if !parseHead(buf[:n], h) || h.method == http.MethodHead || !c.s.cfg.Hot(h.method, h.path) {
				return false, nil
			}
			return true, nil
		}
		if len(buf) == c.br.Size() {
			return false, nil // a long head: net/http's to judge
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			return false, err
		}
	}
}

// wholeHead reports whether buf starts with a whole head (or with
// something readHead will decline at once).
func wholeHead(buf []byte) bool {
	n, bare := headEnd(buf, 0)
	return n >= 0 || bare
}

// tlsState is a TLS connection's state after its handshake, nil for a
// clear connection.
func tlsState(c net.Conn) *tls.ConnectionState {
	if b, ok := c.(*bufferedConn); ok {
		c = b.Conn
	}
	if t, ok := c.(interface{ ConnectionState() tls.ConnectionState }); ok {
		cs := t.ConnectionState()
		return &cs
	}
	return nil
}

// tlsConnKey keys a handed-over TLS connection in its context.
type tlsConnKey struct{}

// withTLSState gives the requests of connections handed to f over TLS
// their r.TLS, which net/http sets only for a *tls.Conn of its own
// listener, not for the bufferedConn that wraps one here. The state is
// read at each request, once the handshake is done (with Config.NetHTTP,
// net/http's first read does it).
func withTLSState(f *http.Server) {
	connContext, h := f.ConnContext, f.Handler
	if h == nil {
		h = http.DefaultServeMux
	}
	f.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if connContext != nil {
			ctx = connContext(ctx, c)
		}
		if b, ok := c.(*bufferedConn); ok {
			if _, ok := b.Conn.(interface{ ConnectionState() tls.ConnectionState }); ok {
				ctx = context.WithValue(ctx, tlsConnKey{}, c)
			}
		}
		return ctx
	}
	f.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(tlsConnKey{}).(net.Conn); ok && r.TLS == nil {
			r2 := *r
			r2.TLS = tlsState(c)
			r = &r2
		}
		h.ServeHTTP(w, r)
	})
}

// handOver gives the connection, with what it has buffered, to the
// fallback server. It reports whether the fallback took it.
func (c *conn) handOver() bool {
	c.rwc.SetDeadline(time.Time{})
	c.s.handed.Add(1)
	return c.s.handoff.give(&bufferedConn{Conn: c.rwc, r: c.br, slot: c.slot})
}

// serveRequest answers the request whose head c.head holds. It reports
// whether the connection can take another request.
func (c *conn) serveRequest(base *http.Request, start time.Time) (keep bool) {
	h := &c.head
	c.br.Discard(h.size)
	c.s.hot.Add(1)
	f := c.s.cfg.Fallback
	if f.ReadTimeout > 0 {
		c.rwc.SetReadDeadline(start.Add(f.ReadTimeout))
	} else {
		c.rwc.SetReadDeadline(time.Time{}) // the idle wait's, as net/http clears it
	}
	if f.WriteTimeout > 0 {
		c.rwc.SetWriteDeadline(time.Now().Add(f.WriteTimeout))
	}

	r := new(http.Request)
	*r = *base
	r.Method = h.method
	r.URL = urlOf(h.path, h.query)
	r.Header = h.header
	r.Host = h.host
	r.RequestURI = h.target
	r.RemoteAddr = c.remote
	r.Close = h.close
	r.ContentLength = h.contentLength
	var body *bodyReader
	if h.contentLength > 0 {
		body = &bodyReader{br: c.br, n: h.contentLength}
		r.Body = body
	} else {
		r.Body = http.NoBody
	}
	w := &c.resp
	w.reset(c, r)

	defer func() {
		if v := recover(); v != nil {
			keep = false
			if v == http.ErrAbortHandler {
				return
			}
			buf := make([]byte, 16<<10)
			buf = buf[:runtime.Stack(buf, false)]
			c.s.log.Error("panic serving request", "remote", c.remote, "path", h.path, "panic", v, "stack", string(buf))
		}
	}()
	c.s.cfg.Handler.ServeHTTP(w, r)
	if body != nil && body.n > 0 {
		if body.n > maxDrain || body.err != nil {
			w.closeAfter = true
		}
	}
	if err := w.finish(); err != nil || w.closeAfter {
		return false
	}
	if body != nil && body.n > 0 {
		if _, err := c.br.Discard(int(body.n)); err != nil {
			return false
		}
	}
	return !h.close
}

func (c *conn) send(bufs ...[]byte) error {
	c.bufs = append(c.bufs[:0], bufs...)
	_, err := c.bufs.WriteTo(c.rwc)
	clear(c.bufs[:cap(c.bufs)])
	return err
}

func (c *conn) files() bool { return c.raw != nil }

func (c *conn) sendBlob(hdr []byte, b *blob.Blob, f *os.File) (int64, error) {
	return sendFile(c.raw, hdr, f, b.Bytes())
}

func (c *conn) SetReadDeadline(t time.Time) error  { return c.rwc.SetReadDeadline(t) }
func (c *conn) SetWriteDeadline(t time.Time) error { return c.rwc.SetWriteDeadline(t) }

// setDeadline sets a deadline d from now, or none for d <= 0.
func setDeadline(set func(time.Time) error, d time.Duration) {
	if d > 0 {
		set(time.Now().Add(d))
	} else {
		set(time.Time{})
	}
}

// bodyReader reads a request body of a known length from the connection.
type bodyReader struct {
	br  *bufio.Reader
	n   int64
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if b.err != nil {
		return 0, b.err
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.br.Read(p)
	b.n -= int64(n)
	if err == io.EOF && b.n > 0 {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		b.err = err
	}
	if b.n == 0 {
		err = io.EOF
	}
	return n, err
}

func (b *bodyReader) Close() error { return nil }

// bufferedConn is a connection read through r, which holds its first
// bytes. It holds the connection's slot, if any, and gives it back once
// closed.
type bufferedConn struct {
	net.Conn
	r    io.Reader
	slot *slot
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *bufferedConn) Close() error {
	err := c.Conn.Close()
	c.slot.release()
	return err
}

// CloseWrite half-closes the connection, which net/http does before it
// closes one after an error answer, so that the answer is not lost to a
// reset.
func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// handoffListener is the fallback server's listener: it accepts the
// connections the loop hands over.
type handoffListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// give hands c to the fallback server; false when it has closed.
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}
