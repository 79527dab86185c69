package hotpath

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/usher-vdi/usher/internal/blob"
)

// The event loop. Each loop is one goroutine that waits on an epoll
// instance of its own for the connections it was given, reads their
// requests into a buffer per connection, runs the handler for each whole
// request on itself, and writes the answer without waiting: what the
// socket does not take at once is kept (a copy of small parts, a
// reference to a blob's file) and sent as the socket drains. A request
// whose handler would wait is run again on a goroutine (Defer), and its
// connection comes back to the loop with the answer. Compared with a
// goroutine per connection on the runtime's poller, a loop takes the
// events of many connections in one epoll_wait and switches no
// goroutines per request, which is most of what a small answer costs.
//
// Ownership: a connection's fields belong to its loop, except while a
// request of it is deferred, when they belong to the goroutine running
// it until it hands the connection back through the loop's queue.

// loopSweep is how often a loop looks for connections past a deadline.
const loopSweep = 250 * time.Millisecond

// maxIovecs bounds the buffers one sendmsg(2) gathers.
const maxIovecs = 16

// loop is one event loop.
type loop struct {
	s *Server
	// ln is the listener, nil once the loop stopped accepting;
	// acceptPaused is when to listen again after a failed accept.
	ln            *acceptor
	acceptPaused  time.Time
	acceptBackoff time.Duration
	epfd          int
	// wake is an eventfd in the epoll set: writing it wakes the loop to
	// take its queue.
	wake int

	mu sync.Mutex
	// queue holds connections whose deferred request is answered;
	// evicted those to close as their slots went to new connections.
	queue   []*lconn
	evicted []*lconn
	stop    bool // close connections once idle, then return
	kill    bool // close every connection now, then return
	exited  bool
	signals int // wakes written and not yet read, at most one

	// stopped is stop as the loop last took it.
	stopped bool
	conns   map[int]*lconn
	events  []unix.EpollEvent
	// rbuf is where a connection with nothing buffered reads: it is
	// one connection's at a time, and given back with the bytes of an
	// unfinished request copied out (unshare) before the loop moves on.
	// A waiting connection then holds no read buffer, and a busy one
	// reads into memory the loop keeps warm.
	rbuf      []byte
	nextSweep time.Time
	done      chan struct{}
}

func newLoop(s *Server, a *acceptor) (*loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, os.NewSyscallError("eventfd", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	l := &loop{s: s, ln: a, epfd: epfd, wake: wake, conns: map[int]*lconn{}, events: make([]unix.EpollEvent, 256), rbuf: make([]byte, bufferSize), done: make(chan struct{})}
	if err := l.listen(); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	return l, nil
}

// post queues c, whose deferred request is answered, for the loop and
// wakes it. It reports false when the loop has returned.
func (l *loop) post(c *lconn) bool {
	l.mu.Lock()
	if l.exited {
		l.mu.Unlock()
		return false
	}
	l.queue = append(l.queue, c)
	l.signal()
	l.mu.Unlock()
	return true
}

// signal wakes the loop; l.mu is held.
func (l *loop) signal() {
	if l.signals > 0 {
		return
	}
	l.signals++
	one := uint64(1)
	unix.Write(l.wake, (*[8]byte)(unsafe.Pointer(&one))[:])
}

// shutdown has the loop close its connections as they become idle and
// return once it has none; close has it close them all at once.
func (l *loop) shutdown() { l.order(func() { l.stop = true }) }
func (l *loop) close()    { l.order(func() { l.stop, l.kill = true, true }) }

func (l *loop) order(f func()) {
	l.mu.Lock()
	f()
	l.signal()
	l.mu.Unlock()
}

func (l *loop) run() {
	defer close(l.done)
	defer unix.Close(l.epfd)
	defer unix.Close(l.wake)
	defer l.unlisten()
	for {
		n, err := l.wait()
		if err != nil && err != unix.EINTR {
			l.s.log.Error("epoll_wait failed; closing the loop's connections", "err", err)
			l.exit()
			return
		}
		for i := range max(n, 0) {
			ev := &l.events[i]
			fd := int(ev.Fd)
			switch {
			case fd == l.wake:
				var b [8]byte
				unix.Read(l.wake, b[:])
				continue
			case l.ln != nil && fd == l.ln.fd:
				l.accept()
				continue
			}
			c := l.conns[fd]
			if c == nil {
				continue
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				c.readable = true
			}
			if ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				c.hup = true
			}
			c.drive()
		}
		l.mu.Lock()
		queue, evicted := l.queue, l.evicted
		l.queue, l.evicted, l.signals = nil, nil, 0
		stop, kill := l.stop, l.kill
		l.mu.Unlock()
		for _, c := range evicted {
			c.close()
		}
		l.stopped = stop
		if stop {
			l.unlisten()
		}
		for _, c := range queue {
			c.resume()
			if kill {
				c.close()
			} else {
				c.drive()
			}
		}
		now := time.Now()
		if kill || stop || now.After(l.nextSweep) {
			l.sweep(now, stop, kill)
			l.nextSweep = now.Add(loopSweep)
			if l.ln != nil && !l.acceptPaused.IsZero() && now.After(l.acceptPaused) {
				l.acceptPaused = time.Time{}
				if err := l.listen(); err != nil {
					l.s.log.Error("listening again failed", "err", err)
				}
			}
		}
		if stop && len(l.conns) == 0 {
			l.exit()
			return
		}
		// Through the scheduler once a batch: the other goroutines get
		// their turn, and the runtime sees the loop is not stuck, so its
		// monitor neither preempts it nor keeps waking up to check (each
		// a thread switch, which costs dearly in some VMs).
		runtime.Gosched()
	}
}

// exit closes what is left and marks the loop returned.
func (l *loop) exit() {
	l.mu.Lock()
	l.exited = true
	l.queue, l.evicted = nil, nil
	l.mu.Unlock()
	l.unlisten()
	for _, c := range l.conns {
		c.close()
	}
}

// add registers a new connection.
func (l *loop) add(c *lconn) {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(c.fd)}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
		l.s.log.Warn("epoll_ctl failed; connection closed", "remote", c.remote, "err", err)
		unix.Close(c.fd)
		c.fd = -1
		c.cancel()
		c.slot.release()
		return
	}
	l.conns[c.fd] = c
	c.readable = true // what came with the connection raised no edge
}

// sweep closes connections past their deadline, and on shutdown the
// idle ones (all of them, for close).
func (l *loop) sweep(now time.Time, stop, kill bool) {
	for _, c := range l.conns {
		switch {
		case c.deferred:
			if kill {
				c.close()
			}
		case kill, stop && c.idle():
			c.close()
		case c.pending():
			if !c.writeDL.IsZero() && now.After(c.writeDL) {
				c.close()
			}
		case !c.readDL.IsZero() && now.After(c.readDL):
			c.close()
		case c.idle():
			c.trim()
		}
	}
}

// lconn is a connection on a loop.
type lconn struct {
	l      *loop
	fd     int
	remote string
	// base holds the context of requests on the loop, waitBase of
	// deferred ones; cancel ends both.
	base, waitBase *http.Request
	cancel         context.CancelFunc

	// buf[r:w] is read and not yet consumed. buf is the loop's rbuf
	// while shared, else own, which is allocated for the first
	// request that does not come whole.
	buf, own []byte
	r, w     int
	shared   bool
	readable bool // an edge not yet read to the end
	eof      bool // the peer will send nothing more
	hup      bool // the peer shut down: read to the end

	head head
	// While a request comes in parts: scanned is how much of
	// buf[r:w] headEnd has seen without finding the head's end, and need,
	// once the head is parsed (into head), the request's length. A head
	// or body that trickles in is then not scanned or parsed again for
	// every read.
	scanned, need int
	resp          response
	body          memBody
	// deferred is set while a request runs off the loop; n is its
	// length, head and body included.
	deferred bool
	n        int
	queueing bool // writes are queued, not tried: the request is off the loop

	// out[oh:] is queued: what the socket has not taken yet.
	out   []segment
	oh    int
	arena []byte
	iov   [maxIovecs]unix.Iovec
	bufs  [][]byte

	readDL, writeDL time.Time
	// slot is the connection's in the Limiter, nil without one; resting
	// is set while it is marked idle there.
	slot    *slot
	resting bool
	// began is when the request being read began: its head is due within
	// the head's timeout of it, and its body within ReadTimeout, as
	// net/http allows.
	began      time.Time
	closeAfter bool
}

// segment is a part of an answer the socket has not taken yet.
type segment struct {
	b []byte
	// A file segment sends blob's bytes [off, end) from f (fd).
	blob     *blob.Blob
	fd       int
	off, end int64
}

// idle reports whether c waits for a request with nothing begun.
func (c *lconn) idle() bool { return !c.deferred && !c.pending() && c.r == c.w }

// trim gives back what an idle connection holds for a request that came
// in parts or an answer its socket did not take at once, so that a
// connection waiting for its next request costs a few KiB however its
// last one went. It is done at a sweep, not after each request: a busy
// connection keeps its buffers.
func (c *lconn) trim() {
	if !c.shared {
		c.buf, c.own, c.r, c.w = nil, nil, 0, 0
	}
	c.body = memBody{}
	if cap(c.arena) > idleBuffer {
		c.arena = nil
	}
	c.resp.trim()
	// The last sendmsg's vectors point into what was sent.
	clear(c.iov[:])
	clear(c.bufs[:cap(c.bufs)])
}

// pending reports whether output is queued.
func (c *lconn) pending() bool { return c.oh < len(c.out) }

func (c *lconn) close() {
	if c.fd < 0 {
		return
	}
	delete(c.l.conns, c.fd)
	unix.Close(c.fd) // which takes it out of the epoll set
	c.fd = -1
	c.cancel()
	c.slot.release()
}

// evict has the loop close c, whose slot went to a new connection.
func (c *lconn) evict() {
	c.l.order(func() {
		if !c.l.exited {
			c.l.evicted = append(c.l.evicted, c)
		}
	})
}

// rest marks c idle in the Limiter: it waits for a request with nothing
// begun.
func (c *lconn) rest() {
	if !c.resting {
		c.resting = true
		c.slot.idle()
	}
}

// wake marks c busy in the Limiter as a request begins; false when its
// slot went to another connection (c is then closed).
func (c *lconn) wake() bool {
	if c.resting {
		c.resting = false
		if !c.slot.busy() {
			c.close()
			return false
		}
	}
	return true
}

// drive moves c as far as it can go without waiting: it writes what is
// pending, answers the requests its buffer holds, and reads. It leaves
// the loop's read buffer free.
func (c *lconn) drive() {
	c.advance()
	c.unshare()
}

// unshare gives the loop's read buffer back, the bytes c has read and
// not consumed copied to its own buffer.
func (c *lconn) unshare() {
	if !c.shared {
		return
	}
	rest := c.buf[c.r:c.w]
	c.buf, c.r, c.w, c.shared = c.own, 0, 0, false
	if len(rest) == 0 || c.fd < 0 {
		return
	}
	if c.own == nil {
		c.own = make([]byte, bufferSize)
		c.buf = c.own
	}
	c.w = copy(c.buf, rest)
}

// advance is drive but for giving the read buffer back.
func (c *lconn) advance() {
	for c.fd >= 0 && !c.deferred {
		if c.pending() {
			done, err := c.flush()
			if err != nil {
				c.close()
				return
			}
			if !done {
				return // EPOLLOUT brings it back
			}
			c.writeDL = time.Time{}
		}
		if c.closeAfter {
			c.close()
			return
		}
		if c.r < c.w {
			switch c.parse() {
			case reqReady:
				c.serve()
				continue
			case reqHandOver:
				c.handOver()
				return
			case reqBody:
				if c.eof {
					// The body ends early: the handler hears of it as
					// it would from net/http, an unexpected EOF.
					c.serve()
					continue
				}
			}
		} else if c.l.stopped {
			c.close()
			return
		} else {
			c.rest()
		}
		if c.eof {
			c.close()
			return
		}
		if !c.readable {
			return
		}
		wasEmpty := c.r == c.w
		if !c.read() {
			return
		}
		if wasEmpty && c.r < c.w {
			if !c.wake() {
				return
			}
			c.begin()
		}
	}
}

func (c *lconn) setReadDL(t time.Time) error { c.readDL = t; return nil }

// begin starts the clock of a request: its head has the head's timeout.
func (c *lconn) begin() {
	f := c.l.s.cfg.Fallback
	c.began = time.Now()
	c.readDL = deadlineAfter(c.began, cmp.Or(f.ReadHeaderTimeout, f.ReadTimeout))
}

// deadlineAfter is d after t, or no deadline when d is not positive.
func deadlineAfter(t time.Time, d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return t.Add(d)
}

// read reads what the socket has into the buffer. It returns false when
// nothing more is to be had now (or the connection closed).
func (c *lconn) read() bool {
	if c.r == c.w {
		c.buf, c.r, c.w, c.shared = c.l.rbuf, 0, 0, true
	} else if c.r > 0 && c.w == len(c.buf) {
		c.w = copy(c.buf, c.buf[c.r:c.w])
		c.r = 0
	}
	space := len(c.buf) - c.w
	n, err := rawRead(c.fd, c.buf[c.w:])
	switch {
	case n > 0:
		c.w += n
		// A short read drained the socket: the next bytes raise a new
		// edge, so there is no need to read until EAGAIN. The peer's
		// end may have come with the bytes, and raises none.
		c.readable = n == space || c.hup
		return true
	case err == unix.EAGAIN:
		c.readable = false
		return false
	case err == unix.EINTR:
		return true
	case n == 0 && err == nil:
		c.eof, c.readable = true, false
		return true
	default:
		c.close()
		return false
	}
}

// What parse found.
const (
	reqMore     = iota // the head is not whole yet
	reqBody            // the head is whole, the body not yet
	reqReady           // the request is whole
	reqHandOver        // the request is net/http's
)

// parse looks at the buffered bytes for a whole request the loop takes.
func (c *lconn) parse() int {
	buf := c.buf[c.r:c.w]
	if c.need > 0 {
		if len(buf) < c.need {
			return reqBody
		}
		return reqReady
	}
	n, bare := headEnd(buf, c.scanned)
	switch {
	case bare:
		return reqHandOver
	case n < 0:
		if len(buf) == len(c.buf) {
			return reqHandOver // a long head: net/http's to judge
		}
		c.scanned = len(buf)
		return reqMore
	}
	c.scanned = 0
	h := &c.head
	if !parseHead(buf[:n], h) || h.method == http.MethodHead || !c.l.s.cfg.Hot(h.method, h.path) {
		return reqHandOver
	}
	total := int64(h.size) + h.contentLength
	switch {
	case total > int64(len(c.buf)):
		return reqHandOver // a body larger than the buffer: net/http reads it as it comes
	case int64(len(buf)) < total:
		if c.r > 0 && int64(c.r)+total > int64(len(c.buf)) {
			c.w = copy(c.buf, buf)
			c.r = 0
		}
		c.need = int(total)
		// The head is in: the body has what is left of ReadTimeout.
		c.readDL = deadlineAfter(c.began, c.l.s.cfg.Fallback.ReadTimeout)
		return reqBody
	}
	return reqReady
}

// serve runs the handler for the request parse found, on the loop.
func (c *lconn) serve() {
	h := &c.head
	c.n = min(h.size+int(h.contentLength), c.w-c.r)
	c.need = 0
	c.l.s.hot.Add(1)
	f := c.l.s.cfg.Fallback
	c.readDL = time.Time{}
	setDeadline(c.setWriteDL, f.WriteTimeout)
	r := c.request(c.base)
	w := &c.resp
	w.reset(c, r)
	w.onLoop = true
	ok := c.run(w, r)
	if w.deferred {
		c.deferred, c.queueing = true, true
		c.unshare() // the request is read again off the loop
		go c.runDeferred()
		return
	}
	c.finish(w, ok)
}

// runDeferred runs the deferred request on its own goroutine, queueing
// its answer, and hands the connection back to the loop.
func (c *lconn) runDeferred() {
	r := c.request(c.waitBase)
	w := &c.resp
	w.reset(c, r)
	c.finish(w, c.run(w, r))
	if !c.l.post(c) {
		c.cancel()
	}
}

// resume takes a connection back from its deferred request.
func (c *lconn) resume() { c.deferred, c.queueing = false, false }

// finish ends the answer to the request of c.n bytes and consumes it.
func (c *lconn) finish(w *response, ok bool) {
	if !ok || w.finish() != nil || w.closeAfter || c.head.close {
		c.closeAfter = true
	}
	c.r += c.n
	if c.r == c.w {
		f := c.l.s.cfg.Fallback
		setDeadline(c.setReadDL, cmp.Or(f.IdleTimeout, f.ReadTimeout))
	} else {
		c.begin() // the next request's bytes are here
	}
}

func (c *lconn) setWriteDL(t time.Time) error { c.writeDL = t; return nil }

// request makes the request whose head is c.head and whose body follows
// it in the buffer, from base, which holds its context.
func (c *lconn) request(base *http.Request) *http.Request {
	h := &c.head
	r := new(http.Request)
	*r = *base // its context: one allocation, where WithContext makes two
	r.Method = h.method
	r.URL = urlOf(h.path, h.query)
	r.Header = h.header
	r.Host = h.host
	r.RequestURI = h.target
	r.RemoteAddr = c.remote
	r.Close = h.close
	r.ContentLength = h.contentLength
	r.Body = http.NoBody
	if h.contentLength > 0 {
		c.body = memBody{b: c.buf[c.r+h.size : c.r+c.n]}
		if int64(c.n-h.size) < h.contentLength {
			c.body.err = io.ErrUnexpectedEOF
		}
		r.Body = &c.body
	}
	return r
}

// run runs the handler; false when it panicked.
func (c *lconn) run(w *response, r *http.Request) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			ok = false
			if v == http.ErrAbortHandler {
				return
			}
			buf := make([]byte, 16<<10)
			buf = buf[:runtime.Stack(buf, false)]
			c.l.s.log.Error("panic serving request", "remote", c.remote, "path", c.head.path, "panic", v, "stack", string(buf))
		}
	}()
	c.l.s.cfg.Handler.ServeHTTP(w, r)
	return true
}

// handOver gives the connection, with what it has buffered, to the
// fallback server.
func (c *lconn) handOver() {
	rest := bytes.Clone(c.buf[c.r:c.w])
	fd := c.fd
	delete(c.l.conns, fd)
	unix.EpollCtl(c.l.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	c.fd = -1
	c.cancel()
	file := os.NewFile(uintptr(fd), "")
	nc, err := net.FileConn(file) // a duplicate, on the runtime's poller
	file.Close()
	sl := c.slot
	c.slot = nil // the fallback server's now
	if err != nil {
		c.l.s.log.Warn("handing a connection over failed; closed", "remote", c.remote, "err", err)
		sl.release()
		return
	}
	c.l.s.handed.Add(1)
	bc := &bufferedConn{Conn: nc, r: io.MultiReader(bytes.NewReader(rest), nc), slot: sl}
	if sl != nil {
		sl.evict = func() { nc.Close() } // set while busy, before any eviction can read it
	}
	go func() {
		if !c.l.s.handoff.give(bc) {
			bc.Close()
		}
	}()
}

// send writes bufs now, as far as the socket takes them, and queues the
// rest.
func (c *lconn) send(bufs ...[]byte) error {
	if c.queueing {
		return c.queue(bufs)
	}
	if c.fd < 0 {
		return net.ErrClosed
	}
	if !c.pending() {
		n, err := c.sendmsg(bufs)
		if err != nil && err != unix.EAGAIN {
			return err
		}
		for i, b := range bufs {
			if n < len(b) {
				bufs[i] = b[n:]
				return c.queue(bufs[i:])
			}
			n -= len(b)
		}
		return nil
	}
	return c.queue(bufs)
}

// maxQueued bounds the bytes of an answer a connection keeps copied
// while its socket is full (blobs are kept by reference, not copied):
// the hot answers are blobs or small, and a client that does not read
// must not make the server hold an answer's worth of memory for each of
// its connections.
const maxQueued = 1 << 20

// errQueueFull fails a write past maxQueued; the connection closes.
var errQueueFull = errors.New("hotpath: the client is not reading and too much of the answer is queued")

// queue copies bufs to the queue, or fails with errQueueFull.
func (c *lconn) queue(bufs [][]byte) error {
	n := len(c.arena)
	for _, b := range bufs {
		n += len(b)
	}
	if n > maxQueued {
		return errQueueFull
	}
	for _, b := range bufs {
		c.queueBytes(b)
	}
	return nil
}

func (c *lconn) queueBytes(b []byte) {
	if len(b) == 0 {
		return
	}
	start := len(c.arena)
	c.arena = append(c.arena, b...)
	c.out = append(c.out, segment{b: c.arena[start:len(c.arena):len(c.arena)]})
}

func (c *lconn) files() bool { return true }

// sendBlob queues hdr and b's file and sends what the socket takes now.
// It returns b's length: what is queued is as good as sent.
func (c *lconn) sendBlob(hdr []byte, b *blob.Blob, f *os.File) (int64, error) {
	fd := int(f.Fd()) // open as long as the segment holds b, which holds f
	// Queued only: the loop sends it once the handler returns.
	c.queueBytes(hdr)
	c.out = append(c.out, segment{blob: b, fd: fd, end: int64(b.Len())})
	return int64(b.Len()), nil
}

// SetReadDeadline and SetWriteDeadline are the connection's deadlines,
// for http.ResponseController.
func (c *lconn) SetReadDeadline(t time.Time) error  { c.readDL = t; return nil }
func (c *lconn) SetWriteDeadline(t time.Time) error { c.writeDL = t; return nil }

// flush sends what is queued until the socket is full. It reports
// whether everything went.
func (c *lconn) flush() (bool, error) {
	for c.pending() {
		s := &c.out[c.oh]
		if s.blob == nil {
			// Without MSG_MORE, even before a file: the head then leaves
			// in a segment of its own. Holding it back for the body saved
			// 5% of the CPU per answer under cubic, but under bbr, whose
			// pacing the kernel does itself when the qdisc is not fq, it
			// armed a pacing timer for most answers and doubled the
			// kernel's time (51.6 against 28.5 µs per 110 KB answer, nginx
			// 26.5; wrk at 100 connections, 2026-11-27). The flag has
			// gone in and out with the machines' congestion control: A/B
			// it under both before adding it back.
			n, err := c.sendmsg(c.iovBufs())
			switch err {
			case nil:
			case unix.EAGAIN:
				return false, nil
			case unix.EINTR:
				continue
			default:
				return false, err
			}
			c.consume(n)
			continue
		}
		m, err := rawSendfile(c.fd, s.fd, &s.off, int(s.end-s.off))
		switch {
		case err == unix.EAGAIN:
			return false, nil
		case err == unix.EINTR:
		case err == unix.EINVAL || err == unix.ENOSYS:
			// No sendfile for this file: its bytes, then.
			s.b, s.blob = s.blob.Bytes()[s.off:s.end], nil
		case err != nil:
			return false, err
		case m == 0:
			return false, errors.New("sendfile: file shorter than its blob")
		case s.off == s.end:
			*s = segment{}
			c.oh++
		}
	}
	c.out, c.oh, c.arena = c.out[:0], 0, c.arena[:0]
	if cap(c.arena) > maxBuffered {
		c.arena = nil // a rare large copy is not kept for the connection's life
	}
	return true, nil
}

// iovBufs returns the byte segments at the head of the queue.
func (c *lconn) iovBufs() [][]byte {
	bufs := c.bufs[:0]
	for _, s := range c.out[c.oh:min(len(c.out), c.oh+maxIovecs)] {
		if s.blob != nil {
			break
		}
		bufs = append(bufs, s.b)
	}
	c.bufs = bufs
	return bufs
}

// consume drops n sent bytes from the head of the queue.
func (c *lconn) consume(n int) {
	for n > 0 && c.pending() {
		s := &c.out[c.oh]
		if n < len(s.b) {
			s.b = s.b[n:]
			return
		}
		n -= len(s.b)
		*s = segment{}
		c.oh++
	}
}

// sendmsg writes bufs with one sendmsg(2), without allocating.
func (c *lconn) sendmsg(bufs [][]byte) (int, error) {
	iov := c.iov[:0]
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if len(iov) == maxIovecs {
			break
		}
		v := unix.Iovec{Base: &b[0]}
		v.SetLen(len(b))
		iov = append(iov, v)
	}
	if len(iov) == 0 {
		return 0, nil
	}
	msg := unix.Msghdr{Iov: &iov[0]}
	msg.SetIovlen(len(iov))
	const flags = unix.MSG_NOSIGNAL | unix.MSG_DONTWAIT
	raceRelease()
	n, _, errno := unix.RawSyscall(unix.SYS_SENDMSG, uintptr(c.fd), uintptr(unsafe.Pointer(&msg)), uintptr(flags))
	runtime.KeepAlive(bufs)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// The loop's socket calls never block (the sockets are non-blocking), so
// they are made as raw system calls: the goroutine keeps its P, where a
// blocking-call entry would let the runtime hand the P to another thread
// during a long sendfile and make the loop take it back after, a futex
// round trip per request. Only epoll_wait, when nothing is ready, blocks.

// wait returns the ready events: at once when some are, else after
// waiting up to loopSweep.
func (l *loop) wait() (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(l.epfd), uintptr(unsafe.Pointer(&l.events[0])), uintptr(len(l.events)), 0, 0, 0)
	if e == 0 && n > 0 {
		return int(n), nil
	}
	return unix.EpollWait(l.epfd, l.events, int(loopSweep/time.Millisecond))
}

// memBody is a request body the buffer holds whole, or as much of it as
// came before the peer stopped sending (then err is io.ErrUnexpectedEOF).
type memBody struct {
	b   []byte
	err error
}

func (b *memBody) Read(p []byte) (int, error) {
	end := io.EOF
	if b.err != nil {
		end = b.err
	}
	if len(b.b) == 0 {
		return 0, end
	}
	n := copy(p, b.b)
	b.b = b.b[n:]
	if len(b.b) == 0 && b.err == nil {
		return n, io.EOF
	}
	return n, nil
}

func (b *memBody) Close() error { return nil }

// serveLoops serves ln's connections on event loops, one per CPU Go
// uses, when ln is a TCP listener; handled is false, with nothing done,
// for any other listener. The loops accept the connections themselves
// from a duplicate of ln's socket, each woken alone (EPOLLEXCLUSIVE).
func (s *Server) serveLoops(ln net.Listener) (handled bool, err error) {
	tl, ok := ln.(*net.TCPListener)
	if !ok || s.cfg.Goroutines {
		return false, nil
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return false, nil
	}
	a := &acceptor{closed: make(chan struct{})}
	var derr error
	if err := rc.Control(func(fd uintptr) { a.fd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		return false, nil
	}
	loops := make([]*loop, runtime.GOMAXPROCS(0))
	for i := range loops {
		if loops[i], err = newLoop(s, a); err != nil {
			for _, l := range loops[:i] {
				unix.Close(l.epfd)
				unix.Close(l.wake)
			}
			unix.Close(a.fd)
			return true, err
		}
	}
	a.refs.Store(int32(len(loops)))
	s.mu.Lock()
	s.loops = loops
	closing := s.closing.Load()
	s.mu.Unlock()
	for _, l := range loops {
		go l.run()
		if closing {
			l.shutdown()
		}
	}
	<-a.closed
	return true, http.ErrServerClosed
}

// acceptor is the listening socket the loops share.
type acceptor struct {
	fd int
	// refs counts the loops still accepting; the last one to stop
	// closes fd and closed.
	refs   atomic.Int32
	closed chan struct{}
}

// accept takes the connections waiting on the listener, a bounded
// number at a time so that the others get their turn.
func (l *loop) accept() {
	for range 64 {
		nfd, sa, err := unix.Accept4(l.ln.fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		switch err {
		case nil:
		case unix.EAGAIN:
			l.acceptBackoff = 0
			return
		case unix.ECONNABORTED, unix.EINTR:
			continue
		default:
			// Out of descriptors or memory, most likely: stop listening
			// for a while, as a sleep would stop the loop.
			l.acceptBackoff = min(max(2*l.acceptBackoff, 5*time.Millisecond), time.Second)
			l.s.log.Warn("accept failed; retrying", "err", err, "in", l.acceptBackoff)
			unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, l.ln.fd, nil)
			l.acceptPaused = time.Now().Add(l.acceptBackoff)
			return
		}
		var sl *slot
		if lim := l.s.cfg.Limiter; lim != nil {
			if sl, _ = lim.reserve(sockaddrIP(sa)); sl == nil {
				// A fresh socket takes the refusal whole, or it is not
				// sent: the write never waits.
				unix.Write(nfd, refusal)
				unix.Close(nfd)
				continue
			}
		}
		unix.SetsockoptInt(nfd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		if l.s.cfg.SendBuffer > 0 {
			unix.SetsockoptInt(nfd, unix.SOL_SOCKET, unix.SO_SNDBUF, l.s.cfg.SendBuffer)
		}
		c := l.s.newLconn(l, nfd, sa)
		if sl != nil {
			c.slot = sl
			sl.evict = c.evict
		}
		l.add(c)
		c.drive()
	}
}

// listen puts the listener in the loop's epoll set.
func (l *loop) listen() error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLEXCLUSIVE, Fd: int32(l.ln.fd)}
	return unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, l.ln.fd, &ev)
}

// unlisten stops the loop's accepting for good.
func (l *loop) unlisten() {
	if l.ln == nil {
		return
	}
	unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, l.ln.fd, nil)
	if l.ln.refs.Add(-1) == 0 {
		unix.Close(l.ln.fd)
		close(l.ln.closed)
	}
	l.ln = nil
}

func (s *Server) newLconn(l *loop, fd int, sa unix.Sockaddr) *lconn {
	ctx, cancel := context.WithCancel(s.baseCtx)
	var local net.Addr = s.ln.Addr()
	if lsa, err := unix.Getsockname(fd); err == nil {
		local = tcpAddr(lsa)
	}
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, local)
	c := &lconn{l: l, fd: fd, remote: tcpAddr(sa).String(), cancel: cancel}
	c.waitBase = baseRequest(ctx)
	c.base = c.waitBase
	if f := s.cfg.LoopContext; f != nil {
		c.base = baseRequest(f(ctx))
	}
	c.head.header = http.Header{}
	c.begin()
	return c
}

// baseRequest is what a connection's requests share: their context, and
// HTTP/1.1.
func baseRequest(ctx context.Context) *http.Request {
	r, _ := http.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	return r
}

// sockaddrIP is sa's IP address.
func sockaddrIP(sa unix.Sockaddr) netip.Addr {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(sa.Addr)
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(sa.Addr).Unmap()
	}
	return netip.Addr{}
}

func tcpAddr(sa unix.Sockaddr) *net.TCPAddr {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)))
	case *unix.SockaddrInet6:
		return net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port)))
	}
	return &net.TCPAddr{}
}
