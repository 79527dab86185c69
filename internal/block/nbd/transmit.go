package nbd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usher-vdi/usher/internal/block"
)

// hdrRoom is the space kept in front of every payload buffer so that a
// read reply's header and data go out in one write.
const hdrRoom = 32

// bufPools hold payload buffers by power-of-two size class of the
// payload (hdrRoom is on top, so a 32 MiB payload takes 32 MiB and not
// the next class).
var bufPools [27]sync.Pool // up to 2^26 = 64 MiB

// bufClass is the size class of an n-byte payload.
func bufClass(n int) int {
	if n <= 1<<12 {
		return 12
	}
	return bits.Len(uint(n - 1))
}

// bufCost is the memory getBuf(n) holds beyond hdrRoom: what a request
// of n bytes takes from the budgets.
func bufCost(n int) int64 { return 1 << bufClass(n) }

// getBuf returns a buffer of hdrRoom+n bytes.
func getBuf(n int) *[]byte {
	class := bufClass(n)
	if p, ok := bufPools[class].Get().(*[]byte); ok {
		*p = (*p)[:hdrRoom+n]
		return p
	}
	b := make([]byte, hdrRoom+n, hdrRoom+1<<class)
	return &b
}

func putBuf(p *[]byte) {
	if p == nil {
		return
	}
	n := cap(*p) - hdrRoom
	class := bufClass(n)
	if n != 1<<class || class >= len(bufPools) {
		return
	}
	bufPools[class].Put(p)
}

// job is one request handed from the reader to a worker.
type job struct {
	req  request
	buf  *[]byte // payload of a WRITE, or room for a READ's data
	cost int64   // bytes taken from the budgets for buf
}

// tx is the transmission phase of one connection.
type tx struct {
	c       *conn
	dev     block.Device
	info    ExportInfo
	wmu     sync.Mutex // guards the fields below
	wcond   sync.Cond  // signalled when writing becomes false
	writing bool       // a goroutine is writing replies
	pending []byte     // replies queued for the writer
	spare   []byte
	werr    error // first write error

	own  *budget     // this connection's bytes in flight
	dead atomic.Bool // set with werr: budget waiters give up

	slices [][]byte // scratch of trySlices
	hdr    [32]byte
}

// transmit serves requests until the client disconnects, breaks the
// protocol or the server closes.
func (c *conn) transmit(ctx context.Context, dev block.Device, info ExportInfo) error {
	t := &tx{c: c, dev: dev, info: info, own: newBudget(c.s.MaxInFlight)}
	t.wcond.L = &t.wmu
	jobs := make(chan job, c.s.Workers)
	var wg sync.WaitGroup
	for range c.s.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := worker{t: t}
			for j := range jobs {
				w.handle(ctx, j)
			}
		}()
	}
	err := t.readLoop(jobs)
	close(jobs)
	wg.Wait() // every request received gets its reply before we close
	t.flush()
	c.bw.Flush()
	return err
}

// errDropped ends the reading of requests when replies cannot go out.
var errDropped = errors.New("replies cannot be written")

// charge takes n bytes from the connection's and the server's budgets,
// waiting while either is spent: a client that does not read its
// replies stops being read. It reports false once the connection has
// failed.
func (t *tx) charge(n int64) bool {
	if !t.own.acquire(n, &t.dead) {
		return false
	}
	if !t.c.s.total.acquire(n, &t.dead) {
		t.own.release(n)
		return false
	}
	return true
}

func (t *tx) uncharge(n int64) {
	if n > 0 {
		t.c.s.total.release(n)
		t.own.release(n)
	}
}

func (t *tx) readLoop(jobs chan<- job) error {
	br := t.c.br
	var h [requestSize]byte
	for {
		if _, err := io.ReadFull(br, h[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read request: %w", err)
		}
		r, err := parseRequest(h[:])
		if err != nil {
			return err // bad magic: clean disconnect
		}
		j := job{req: r}
		switch r.typ {
		case cmdDisc:
			return nil
		case cmdWrite:
			if r.length > MaxPayload {
				return fmt.Errorf("write of %d bytes exceeds the %d-byte maximum", r.length, MaxPayload)
			}
			n := int(r.length)
			if n > 0 && n <= br.Size() {
				// The payload is taken in place from the read buffer:
				// a device that can write it inline does so here, with
				// no hand-off to a worker.
				if br.Buffered() < n {
					t.flush() // about to wait for the client
				}
				p, err := br.Peek(n)
				if err != nil {
					return fmt.Errorf("read write payload: %w", err)
				}
				if t.tryWrite(r, p) {
					br.Discard(n)
					if br.Buffered() < requestSize {
						t.flush()
					}
					continue
				}
				t.flush()
				if !t.charge(bufCost(n)) {
					return errDropped
				}
				j.buf, j.cost = getBuf(n), bufCost(n)
				copy((*j.buf)[hdrRoom:], p)
				br.Discard(n)
				break
			}
			t.flush()
			if !t.charge(bufCost(n)) {
				return errDropped
			}
			j.buf, j.cost = getBuf(n), bufCost(n)
			if _, err := io.ReadFull(br, (*j.buf)[hdrRoom:]); err != nil {
				putBuf(j.buf)
				t.uncharge(j.cost)
				return fmt.Errorf("read write payload: %w", err)
			}
		case cmdRead:
			if r.length > maxQueued && r.length <= MaxPayload && t.trySlices(r) {
				continue
			}
			if t.tryRead(r) {
				// Replies to reads served from memory wait until no
				// further request is buffered: one write answers them
				// all.
				if br.Buffered() < requestSize {
					t.flush()
				}
				continue
			}
			if r.length <= MaxPayload {
				t.flush()
				n := int(r.length)
				if !t.charge(bufCost(n)) {
					return errDropped
				}
				j.buf, j.cost = getBuf(n), bufCost(n)
			}
		}
		t.flush()
		jobs <- j
	}
}

// tryRead serves a read from memory on the reading goroutine, with no
// hand-off to a worker, copying the data straight into the reply queue;
// it reports false when the device cannot (a cache miss), and the read
// goes to a worker.
func (t *tx) tryRead(r request) bool {
	allowed, _ := allowedFlags(cmdRead, t.c.structured)
	if r.flags&^allowed != 0 || r.length == 0 || r.length > maxQueued || r.offset > 1<<62 {
		return false
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if t.werr != nil {
		return true // the connection is failing: no reply will go out
	}
	if len(t.pending) >= maxPending {
		return false // the client is slow to read: a worker waits
	}
	n := len(t.pending)
	t.pending = readReplyHeader(t.pending, t.c.structured, r)
	h := len(t.pending)
	t.pending = slices.Grow(t.pending, int(r.length))[:h+int(r.length)]
	if !block.TryReadAt(t.dev, t.pending[h:], int64(r.offset)) {
		t.pending = t.pending[:n]
		return false
	}
	return true
}

// trySlices answers a large read from memory the device never changes
// (block.SliceReader) on the reading goroutine, writing the reply
// straight from that memory; it reports false when the device cannot.
func (t *tx) trySlices(r request) bool {
	allowed, _ := allowedFlags(cmdRead, t.c.structured)
	if r.flags&^allowed != 0 || r.offset > 1<<62 {
		return false
	}
	sl, ok := block.TrySlices(t.dev, int64(r.offset), int64(r.length), t.slices[:0])
	if ok {
		t.sendv(readReplyHeader(t.hdr[:0], t.c.structured, r), sl)
	}
	clear(sl) // hold no cache memory
	t.slices = sl[:0]
	return ok
}

// tryWrite runs a write on the reading goroutine when the device can
// take it inline (block.InlineWriter) and queues its reply; it reports
// false when the write must go to a worker: a flag such as FUA, a
// read-only export, or a device that would wait.
func (t *tx) tryWrite(r request, p []byte) bool {
	if r.flags != 0 || t.info.ReadOnly || r.offset > 1<<62 {
		return false
	}
	t.wmu.Lock()
	full := len(t.pending) >= maxPending
	t.wmu.Unlock()
	if full {
		return false
	}
	if !block.TryWriteAt(t.dev, p, int64(r.offset)) {
		return false
	}
	t.wmu.Lock()
	if t.werr == nil {
		t.pending = appendOK(t.pending, t.c.structured, r.cookie)
	}
	t.wmu.Unlock()
	return true
}

// appendOK appends a successful reply without data.
func appendOK(b []byte, structured bool, cookie uint64) []byte {
	if !structured {
		b = binary.BigEndian.AppendUint32(b, magicSimple)
		b = binary.BigEndian.AppendUint32(b, 0)
		return binary.BigEndian.AppendUint64(b, cookie)
	}
	var h [20]byte
	putChunkHeader(h[:], replyFlagDone, replyTypeNone, cookie, 0)
	return append(b, h[:]...)
}

// flush writes the queued replies unless a writer is at work (it will
// write them).
func (t *tx) flush() {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if t.writing || len(t.pending) == 0 || t.werr != nil {
		return
	}
	t.writing = true
	t.drain()
}

// send queues b as one reply and returns once it is written or queued
// behind a write in progress (b may be reused at once). Replies are
// group-committed: whoever finds no write in progress writes everything
// queued, so a busy connection makes one syscall for many replies.
func (t *tx) send(b []byte) {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if len(b) > maxQueued {
		// Large reads are not copied.
		t.writeAfterQueue(net.Buffers{b})
		return
	}
	for t.writing && len(t.pending) >= maxPending && t.werr == nil {
		t.wcond.Wait() // the client is slow to read: hold no more
	}
	if t.werr != nil {
		return
	}
	t.pending = append(t.pending, b...)
	if t.writing {
		return
	}
	t.writing = true
	t.drain()
}

// sendv writes hdr and data as one reply, after what is queued, in one
// writev; it returns once they are written (data is not copied).
func (t *tx) sendv(hdr []byte, data [][]byte) {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.writeAfterQueue(append(append(make(net.Buffers, 0, 1+len(data)), hdr), data...))
}

// writeAfterQueue waits for the writer's role, then writes what is
// queued and bufs in one writev, and drains what was queued meanwhile.
// The queue takes the spare buffer while the write runs, as replies
// queued meanwhile must not land in memory being written. Called with
// wmu held.
func (t *tx) writeAfterQueue(bufs net.Buffers) {
	for t.writing {
		t.wcond.Wait()
	}
	if t.werr != nil {
		return
	}
	t.writing = true
	out := t.pending
	t.pending = t.spare[:0]
	t.wmu.Unlock()
	all := append(net.Buffers{out}, bufs...)
	t.c.nc.SetWriteDeadline(time.Now().Add(t.c.s.WriteTimeout))
	_, err := all.WriteTo(t.c.nc)
	t.wmu.Lock()
	t.spare = out[:0]
	t.fail(err)
	t.drain()
}

// drain writes the queue until it is empty, then gives up the writer's
// role. Called with wmu held and writing set.
func (t *tx) drain() {
	for len(t.pending) > 0 && t.werr == nil {
		out := t.pending
		t.pending = t.spare[:0]
		t.wmu.Unlock()
		t.c.nc.SetWriteDeadline(time.Now().Add(t.c.s.WriteTimeout))
		_, err := t.c.nc.Write(out)
		t.wmu.Lock()
		t.spare = out[:0]
		t.fail(err)
		t.wcond.Broadcast() // room in the queue
	}
	t.writing = false
	t.wcond.Broadcast()
}

// maxQueued is the largest reply copied into the queue.
const maxQueued = 64 << 10

// maxPending is the size of the reply queue past which replies wait
// for the writer instead of growing it.
const maxPending = 1 << 20

// fail records a write error; the connection is closed so that the
// reader stops too. Called with wmu held.
func (t *tx) fail(err error) {
	if err != nil && t.werr == nil {
		t.werr = err
		t.c.nc.Close()
		t.dead.Store(true)
		t.own.wake()
		t.c.s.total.wake()
	}
}

// worker runs requests; its scratch space is reused across requests.
type worker struct {
	t       *tx
	scratch [128]byte
	extents []block.Extent
	status  []byte
}

func (w *worker) handle(ctx context.Context, j job) {
	defer w.t.uncharge(j.cost) // after the reply is written or queued
	defer putBuf(j.buf)
	t, r := w.t, j.req
	allowed, known := allowedFlags(r.typ, t.c.structured)
	if !known {
		w.fail(r, errInval, "unknown command")
		return
	}
	if r.flags&^allowed != 0 {
		w.fail(r, errInval, "command flag not allowed")
		return
	}
	var f block.Flags
	if r.flags&cmdFlagFUA != 0 {
		f |= block.FUA
	}
	off, n := int64(r.offset), int64(r.length)
	if r.offset > 1<<62 {
		off = -1 // fails every range check
	}
	var err error
	switch r.typ {
	case cmdRead:
		if j.buf == nil {
			w.fail(r, errInval, "read larger than the maximum block size")
			return
		}
		if err = t.dev.ReadAt(ctx, (*j.buf)[hdrRoom:], off); err == nil {
			w.readReply(r, *j.buf)
			return
		}
	case cmdWrite:
		err = t.dev.WriteAt(ctx, (*j.buf)[hdrRoom:], off, f)
	case cmdFlush:
		err = t.dev.Flush(ctx)
	case cmdTrim:
		err = t.dev.Trim(ctx, off, n, f)
	case cmdWriteZeroes:
		if r.flags&cmdFlagNoHole != 0 {
			f |= block.NoHole
		}
		if r.flags&cmdFlagFastZero != 0 {
			f |= block.FastZero
		}
		err = t.dev.Zero(ctx, off, n, f)
	case cmdCache:
		err = w.cache(ctx, off, n)
	case cmdBlockStatus:
		if !t.c.metaAlloc {
			w.fail(r, errInval, "no metadata context negotiated")
			return
		}
		if n == 0 {
			w.fail(r, errInval, "block status of length zero")
			return
		}
		if err = w.blockStatus(ctx, r, off, n); err == nil {
			return
		}
	}
	if err != nil {
		code, msg := errorCode(err)
		if code == errIO && ctx.Err() == nil {
			t.c.log.Warn("nbd request failed", "cmd", r.typ, "offset", r.offset, "length", r.length, keyErr, err)
		}
		w.fail(r, code, msg)
		return
	}
	w.ok(r)
}

// errorCode maps an error to an NBD error and a message safe to send.
func errorCode(err error) (uint32, string) {
	switch {
	case errors.Is(err, block.ErrReadOnly):
		return errPerm, "export is read-only"
	case errors.Is(err, block.ErrNoSpace):
		return errNoSpc, "no space left"
	case errors.Is(err, block.ErrOutOfRange):
		return errInval, "range beyond the end of the export"
	case errors.Is(err, block.ErrNotSupported):
		return errNotSup, "not supported"
	case errors.Is(err, context.Canceled), errors.Is(err, block.ErrClosed):
		return errShutdown, "server shutting down"
	}
	return errIO, "input/output error"
}

func (w *worker) cache(ctx context.Context, off, n int64) error {
	if err := block.CheckRange(w.t.dev, off, n); err != nil {
		return err
	}
	const chunk = 1 << 20
	buf := getBuf(int(min(n, chunk)))
	defer putBuf(buf)
	for n > 0 {
		l := min(n, chunk)
		if err := w.t.dev.ReadAt(ctx, (*buf)[hdrRoom:hdrRoom+l], off); err != nil {
			return err
		}
		off, n = off+l, n-l
	}
	return nil
}

func (w *worker) blockStatus(ctx context.Context, r request, off, n int64) error {
	const maxDescriptors = 1024
	ext, err := block.Extents(ctx, w.t.dev, off, n, w.extents[:0])
	w.extents = ext[:0]
	if err != nil {
		return err
	}
	var zero [20]byte
	b := append(w.status[:0], zero[:]...)
	b = binary.BigEndian.AppendUint32(b, metaAllocationID)
	count := 0
	for i, e := range ext {
		// Merge runs with the same flags; lengths fit in 32 bits since
		// they sum to at most n.
		if i > 0 && ext[i-1].Flags == e.Flags && count > 0 {
			prev := b[len(b)-8:]
			binary.BigEndian.PutUint32(prev, binary.BigEndian.Uint32(prev)+uint32(e.Length))
			continue
		}
		if count == maxDescriptors || (count == 1 && r.flags&cmdFlagReqOne != 0) {
			break
		}
		b = binary.BigEndian.AppendUint32(b, uint32(e.Length))
		b = binary.BigEndian.AppendUint32(b, uint32(e.Flags))
		count++
	}
	w.status = b
	putChunkHeader(b, replyFlagDone, replyTypeBlockStatus, r.cookie, uint32(len(b)-20))
	w.t.send(b)
	return nil
}

func putChunkHeader(b []byte, flags, typ uint16, cookie uint64, length uint32) {
	binary.BigEndian.PutUint32(b, magicStructured)
	binary.BigEndian.PutUint16(b[4:], flags)
	binary.BigEndian.PutUint16(b[6:], typ)
	binary.BigEndian.PutUint64(b[8:], cookie)
	binary.BigEndian.PutUint32(b[16:], length)
}

// readReply sends buf[hdrRoom:] as the data of a successful read.
func (w *worker) readReply(r request, buf []byte) {
	if w.t.c.structured && r.length == 0 {
		w.ok(r)
		return
	}
	w.t.send(readReplyFrame(w.t.c.structured, r, buf))
}

// readReplyHeader appends the header of a successful read's reply
// (r.length > 0 when structured) to dst.
func readReplyHeader(dst []byte, structured bool, r request) []byte {
	if !structured {
		dst = binary.BigEndian.AppendUint32(dst, magicSimple)
		dst = binary.BigEndian.AppendUint32(dst, 0)
		return binary.BigEndian.AppendUint64(dst, r.cookie)
	}
	var h [28]byte
	putChunkHeader(h[:], replyFlagDone, replyTypeOffsetData, r.cookie, 8+r.length)
	binary.BigEndian.PutUint64(h[20:], r.offset)
	return append(dst, h[:]...)
}

// readReplyFrame writes the reply header in front of the data in
// buf[hdrRoom:] and returns header and data (r.length > 0 when
// structured).
func readReplyFrame(structured bool, r request, buf []byte) []byte {
	if !structured {
		h := buf[hdrRoom-16:]
		binary.BigEndian.PutUint32(h, magicSimple)
		binary.BigEndian.PutUint32(h[4:], 0)
		binary.BigEndian.PutUint64(h[8:], r.cookie)
		return h
	}
	h := buf[hdrRoom-28:]
	putChunkHeader(h, replyFlagDone, replyTypeOffsetData, r.cookie, 8+r.length)
	binary.BigEndian.PutUint64(h[20:], r.offset)
	return h
}

func (w *worker) ok(r request) {
	w.t.send(appendOK(w.scratch[:0], w.t.c.structured, r.cookie))
}

func (w *worker) fail(r request, code uint32, msg string) {
	if !w.t.c.structured {
		h := w.scratch[:16]
		binary.BigEndian.PutUint32(h, magicSimple)
		binary.BigEndian.PutUint32(h[4:], code)
		binary.BigEndian.PutUint64(h[8:], r.cookie)
		w.t.send(h)
		return
	}
	b := w.scratch[:26]
	putChunkHeader(b, replyFlagDone, replyTypeError, r.cookie, uint32(6+len(msg)))
	binary.BigEndian.PutUint32(b[20:], code)
	binary.BigEndian.PutUint16(b[24:], uint16(len(msg)))
	w.t.send(append(b, msg...))
}
