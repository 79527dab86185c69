package nbd

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"

	"github.com/usher-vdi/usher/internal/block"
)

// Client is a block.Device served by a remote NBD server. It negotiates
// fixed newstyle: TLS first when dialled with it (NBD_OPT_STARTTLS, no
// fallback to plaintext), structured replies and the base:allocation metadata
// context when the server offers them (Extents then asks the server),
// then NBD_OPT_GO; it keeps any number of requests in flight on its one
// connection. Reads larger than MaxPayload are split.
type Client struct {
	nc       net.Conn
	size     int64
	flags    uint16
	readOnly bool
	desc     string // NBD_INFO_DESCRIPTION, when the server sent one

	// Negotiated: structured replies, and the base:allocation context.
	structured bool
	hasMeta    bool
	metaID     uint32

	wmu sync.Mutex // serialises requests on the wire
	bw  *bufio.Writer

	mu      sync.Mutex
	pending map[uint64]*call
	cookie  uint64
	err     error // set once the connection is dead
	done    chan struct{}
}

var (
	_ block.Device   = (*Client)(nil)
	_ block.Extenter = (*Client)(nil)
)

// ErrProtocol is returned for a reply the client cannot make sense of.
var ErrProtocol = errors.New("nbd: protocol error")

// RemoteError is an error the server returned for a request.
type RemoteError struct{ Code uint32 }

func (e *RemoteError) Error() string { return fmt.Sprintf("nbd: server error %d", e.Code) }

// Unwrap maps the NBD error to the block errors it stands for.
func (e *RemoteError) Unwrap() error {
	switch e.Code {
	case errPerm:
		return block.ErrReadOnly
	case errNoSpc:
		return block.ErrNoSpace
	case errInval:
		return block.ErrOutOfRange
	case errNotSup:
		return block.ErrNotSupported
	}
	return nil
}

type call struct {
	buf  []byte          // where a read's data goes
	off  int64           // a read's offset
	got  int64           // bytes of buf the read's chunks covered
	ext  *[]block.Extent // where a block status request's extents go
	err  error
	done chan struct{}
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// Dialer connects to NBD servers. The zero value dials without TLS
// unless a URI asks for it.
type Dialer struct {
	// TLS, when set, upgrades every connection with NBD_OPT_STARTTLS as
	// the first option; a server that refuses fails the dial, with no
	// fallback to plaintext. An empty ServerName is taken from the
	// address.
	TLS *tls.Config
}

// DialURI connects to an NBD URI: nbd://host[:port]/export,
// nbd+unix:///export?socket=/path, or their TLS forms nbds:// and
// nbds+unix:// (which use d.TLS, or the system's roots when it is nil).
func DialURI(ctx context.Context, uri string) (*Client, error) {
	return (&Dialer{}).DialURI(ctx, uri)
}

// Dial connects to export on an NBD server at addr, without TLS.
func Dial(ctx context.Context, network, addr, export string) (*Client, error) {
	return (&Dialer{}).Dial(ctx, network, addr, export)
}

// DialURI is DialURI with the dialer's TLS configuration.
func (d *Dialer) DialURI(ctx context.Context, uri string) (*Client, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("nbd uri %q: %w", uri, err)
	}
	export := strings.TrimPrefix(u.Path, "/")
	dd := *d
	if strings.HasPrefix(u.Scheme, "nbds") && dd.TLS == nil {
		dd.TLS = &tls.Config{}
	}
	switch u.Scheme {
	case "nbd", "nbds":
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), fmt.Sprint(DefaultPort))
		}
		return dd.Dial(ctx, "tcp", host, export)
	case "nbd+unix", "nbds+unix":
		sock := u.Query().Get("socket")
		if sock == "" {
			return nil, fmt.Errorf("nbd uri %q: no socket= parameter", uri)
		}
		return dd.Dial(ctx, "unix", sock, export)
	}
	return nil, fmt.Errorf("nbd uri %q: scheme is not nbd, nbds, nbd+unix or nbds+unix", uri)
}

// Dial connects to export on an NBD server at addr.
func (d *Dialer) Dial(ctx context.Context, network, addr, export string) (*Client, error) {
	var nd net.Dialer
	nc, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	raw := nc
	c := &Client{nc: nc, pending: make(map[uint64]*call), done: make(chan struct{})}
	br := bufio.NewReaderSize(nc, 256<<10)
	c.bw = bufio.NewWriterSize(nc, 256<<10)
	var cfg *tls.Config
	if d.TLS != nil {
		cfg = d.TLS.Clone()
		if cfg.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil || network == "unix" {
				host = "localhost"
			}
			cfg.ServerName = host
		}
	}
	if br, err = c.handshake(ctx, br, export, cfg); err != nil {
		c.nc.Close()
		return nil, fmt.Errorf("nbd handshake with %s: %w", addr, err)
	}
	raw.SetDeadline(timeZero)
	go c.readReplies(br)
	return c, nil
}

// handshake negotiates up to transmission: TLS first when tlsConfig is
// set, then structured replies, base:allocation and the export. It
// returns the reader the replies come on (a new one after TLS).
func (c *Client) handshake(ctx context.Context, br *bufio.Reader, export string, tlsConfig *tls.Config) (*bufio.Reader, error) {
	var hs [18]byte
	if _, err := io.ReadFull(br, hs[:]); err != nil {
		return br, err
	}
	if binary.BigEndian.Uint64(hs[:]) != magicNBD || binary.BigEndian.Uint64(hs[8:]) != magicOpt {
		return br, fmt.Errorf("%w: not a newstyle NBD server", ErrProtocol)
	}
	hflags := binary.BigEndian.Uint16(hs[16:])
	var cf [4]byte
	binary.BigEndian.PutUint32(cf[:], flagFixedNewstyle|flagNoZeroes&uint32(hflags))
	c.bw.Write(cf[:])

	if tlsConfig != nil {
		if hflags&flagFixedNewstyle == 0 {
			return br, errors.New("server cannot do TLS: no fixed newstyle negotiation")
		}
		if err := c.option(optStartTLS, nil); err != nil {
			return br, err
		}
		typ, body, err := readOptReply(br, optStartTLS)
		if err != nil {
			return br, err
		}
		if typ != repAck {
			return br, fmt.Errorf("server refused TLS (%#x): %s", typ, body)
		}
		if br.Buffered() != 0 {
			return br, fmt.Errorf("%w: data after the STARTTLS reply", ErrProtocol)
		}
		tc := tls.Client(c.nc, tlsConfig)
		if err := tc.HandshakeContext(ctx); err != nil {
			return br, fmt.Errorf("tls handshake: %w", err)
		}
		c.nc = tc
		br = bufio.NewReaderSize(tc, 256<<10)
		c.bw = bufio.NewWriterSize(tc, 256<<10)
	}

	// Structured replies, then base:allocation: both optional, so a
	// refusal only leaves Extents reporting everything as data.
	if err := c.option(optStructuredReply, nil); err != nil {
		return br, err
	}
	typ, _, err := readOptReply(br, optStructuredReply)
	if err != nil {
		return br, err
	}
	c.structured = typ == repAck
	if c.structured {
		data := binary.BigEndian.AppendUint32(nil, uint32(len(export)))
		data = append(data, export...)
		data = binary.BigEndian.AppendUint32(data, 1)
		data = binary.BigEndian.AppendUint32(data, uint32(len(metaAllocation)))
		data = append(data, metaAllocation...)
		if err := c.option(optSetMetaContext, data); err != nil {
			return br, err
		}
		for {
			typ, body, err := readOptReply(br, optSetMetaContext)
			if err != nil {
				return br, err
			}
			if typ == repMetaContext && len(body) > 4 && string(body[4:]) == metaAllocation {
				c.metaID, c.hasMeta = binary.BigEndian.Uint32(body), true
			}
			if typ == repAck || typ&(1<<31) != 0 {
				break
			}
		}
	}

	// NBD_OPT_GO with the export name and a request for block sizes
	// and the description.
	data := binary.BigEndian.AppendUint32(nil, uint32(len(export)))
	data = append(data, export...)
	data = binary.BigEndian.AppendUint16(data, 2)
	data = binary.BigEndian.AppendUint16(data, infoBlockSize)
	data = binary.BigEndian.AppendUint16(data, infoDescription)
	if err := c.option(optGo, data); err != nil {
		return br, err
	}
	for {
		typ, body, err := readOptReply(br, optGo)
		if err != nil {
			return br, err
		}
		switch {
		case typ == repAck:
			if c.flags&tfHasFlags == 0 {
				return br, fmt.Errorf("%w: no export info before ack", ErrProtocol)
			}
			return br, nil
		case typ == repInfo && len(body) >= 12 && binary.BigEndian.Uint16(body) == infoExport:
			c.size = int64(binary.BigEndian.Uint64(body[2:]))
			c.flags = binary.BigEndian.Uint16(body[10:])
			c.readOnly = c.flags&tfReadOnly != 0
		case typ == repInfo && len(body) >= 2 && binary.BigEndian.Uint16(body) == infoDescription:
			c.desc = string(body[2:])
		case typ == repErrUnknown:
			return br, &refusedError{err: ErrUnknownExport, export: export, msg: string(body)}
		case typ == repErrPolicy:
			return br, &refusedError{err: ErrExportBusy, export: export, msg: string(body)}
		case typ == repErrTLSReqd:
			return br, fmt.Errorf("server requires TLS (an nbds:// URI): %s", body)
		case typ&(1<<31) != 0:
			return br, fmt.Errorf("server refused export %q (%#x): %s", export, typ, body)
		}
	}
}

// option sends one negotiation option.
func (c *Client) option(opt uint32, data []byte) error {
	var oh [16]byte
	binary.BigEndian.PutUint64(oh[:], magicOpt)
	binary.BigEndian.PutUint32(oh[8:], opt)
	binary.BigEndian.PutUint32(oh[12:], uint32(len(data)))
	c.bw.Write(oh[:])
	c.bw.Write(data)
	return c.bw.Flush()
}

// readOptReply reads one option reply to opt: its type and data.
func readOptReply(br *bufio.Reader, opt uint32) (uint32, []byte, error) {
	var rh [20]byte
	if _, err := io.ReadFull(br, rh[:]); err != nil {
		return 0, nil, err
	}
	if binary.BigEndian.Uint64(rh[:]) != magicOptReply {
		return 0, nil, fmt.Errorf("%w: bad option reply magic", ErrProtocol)
	}
	if got := binary.BigEndian.Uint32(rh[8:]); got != opt {
		return 0, nil, fmt.Errorf("%w: reply to option %d, want %d", ErrProtocol, got, opt)
	}
	typ := binary.BigEndian.Uint32(rh[12:])
	n := binary.BigEndian.Uint32(rh[16:])
	if n > maxOptionLength {
		return 0, nil, fmt.Errorf("%w: option reply of %d bytes", ErrProtocol, n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		return 0, nil, err
	}
	return typ, body, nil
}

// readReplies matches replies to calls until the connection fails.
func (c *Client) readReplies(br *bufio.Reader) {
	var h [20]byte
	var err error
	for {
		if _, err = io.ReadFull(br, h[:4]); err != nil {
			break
		}
		switch m := binary.BigEndian.Uint32(h[:]); m {
		case magicSimple:
			if _, err = io.ReadFull(br, h[4:16]); err == nil {
				err = c.simpleReply(br, binary.BigEndian.Uint32(h[4:]), binary.BigEndian.Uint64(h[8:]))
			}
		case magicStructured:
			if _, err = io.ReadFull(br, h[4:20]); err == nil {
				err = c.chunk(br, binary.BigEndian.Uint16(h[4:]), binary.BigEndian.Uint16(h[6:]),
					binary.BigEndian.Uint64(h[8:]), binary.BigEndian.Uint32(h[16:]))
			}
		default:
			err = fmt.Errorf("%w: bad reply magic %#x", ErrProtocol, m)
		}
		if err != nil {
			break
		}
	}
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		err = block.ErrClosed
	}
	c.mu.Lock()
	c.err = err
	for k, cl := range c.pending {
		cl.err = err
		cl.done <- struct{}{}
		delete(c.pending, k)
	}
	c.mu.Unlock()
	close(c.done)
}

// take returns the call waiting for cookie, removing it when the reply
// is its last.
func (c *Client) take(cookie uint64, last bool) (*call, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.pending[cookie]
	if cl == nil {
		return nil, fmt.Errorf("%w: reply to unknown cookie %d", ErrProtocol, cookie)
	}
	if last {
		delete(c.pending, cookie)
	}
	return cl, nil
}

func (c *Client) simpleReply(br *bufio.Reader, code uint32, cookie uint64) error {
	cl, err := c.take(cookie, true)
	if err != nil {
		return err
	}
	switch {
	case code != 0:
		cl.err = &RemoteError{Code: code}
	case cl.ext != nil:
		err = fmt.Errorf("%w: simple reply to a block status request", ErrProtocol)
	case cl.buf != nil:
		_, err = io.ReadFull(br, cl.buf)
	}
	if err != nil {
		cl.err = err
	}
	cl.done <- struct{}{}
	return err
}

// maxStatusChunk bounds the block status chunk the client accepts.
const maxStatusChunk = 4 + 8*(1<<17)

// chunk handles one structured reply chunk of length bytes. A protocol
// violation fails the connection (and the call, when the chunk was its
// last).
func (c *Client) chunk(br *bufio.Reader, flags, typ uint16, cookie uint64, length uint32) error {
	last := flags&replyFlagDone != 0
	cl, err := c.take(cookie, last)
	if err != nil {
		return err
	}
	err = c.chunkBody(br, cl, typ, length)
	if err == nil && last && cl.err == nil && cl.buf != nil && cl.got != int64(len(cl.buf)) {
		err = fmt.Errorf("%w: read reply covers %d of %d bytes", ErrProtocol, cl.got, len(cl.buf))
	}
	if err == nil && last && cl.err == nil && cl.ext != nil && len(*cl.ext) == 0 {
		err = fmt.Errorf("%w: block status reply without extents", ErrProtocol)
	}
	if err != nil {
		cl.err = err
		if !last {
			c.mu.Lock()
			delete(c.pending, cookie)
			c.mu.Unlock()
		}
		cl.done <- struct{}{}
		return err
	}
	if last {
		cl.done <- struct{}{}
	}
	return nil
}

func (c *Client) chunkBody(br *bufio.Reader, cl *call, typ uint16, length uint32) error {
	var b [12]byte
	switch typ {
	case replyTypeNone:
		if length != 0 {
			return fmt.Errorf("%w: NBD_REPLY_TYPE_NONE with %d bytes", ErrProtocol, length)
		}
		return nil
	case replyTypeOffsetData, replyTypeOffsetHole:
		if cl.buf == nil || length < 8 || (typ == replyTypeOffsetHole && length != 12) {
			return fmt.Errorf("%w: unexpected read chunk of %d bytes", ErrProtocol, length)
		}
		if _, err := io.ReadFull(br, b[:8]); err != nil {
			return err
		}
		n := int64(length) - 8
		if typ == replyTypeOffsetHole {
			if _, err := io.ReadFull(br, b[8:12]); err != nil {
				return err
			}
			n = int64(binary.BigEndian.Uint32(b[8:]))
		}
		rel := int64(binary.BigEndian.Uint64(b[:])) - cl.off
		if rel < 0 || n > int64(len(cl.buf)) || rel > int64(len(cl.buf))-n {
			return fmt.Errorf("%w: read chunk outside the request", ErrProtocol)
		}
		p := cl.buf[rel : rel+n]
		if typ == replyTypeOffsetHole {
			clear(p)
		} else if _, err := io.ReadFull(br, p); err != nil {
			return err
		}
		cl.got += n
		return nil
	case replyTypeBlockStatus:
		if cl.ext == nil || length < 12 || (length-4)%8 != 0 || length > maxStatusChunk {
			return fmt.Errorf("%w: unexpected block status chunk of %d bytes", ErrProtocol, length)
		}
		if _, err := io.ReadFull(br, b[:4]); err != nil {
			return err
		}
		if id := binary.BigEndian.Uint32(b[:]); !c.hasMeta || id != c.metaID {
			return fmt.Errorf("%w: block status for context %d", ErrProtocol, id)
		}
		for range (length - 4) / 8 {
			if _, err := io.ReadFull(br, b[:8]); err != nil {
				return err
			}
			l := int64(binary.BigEndian.Uint32(b[:]))
			f := block.ExtentFlags(binary.BigEndian.Uint32(b[4:])) & (block.Hole | block.Zeroed)
			if l == 0 {
				return fmt.Errorf("%w: block status extent of length 0", ErrProtocol)
			}
			*cl.ext = append(*cl.ext, block.Extent{Length: l, Flags: f})
		}
		return nil
	}
	if typ&(1<<15) == 0 {
		return fmt.Errorf("%w: unknown reply chunk type %d", ErrProtocol, typ)
	}
	// An error chunk: code, message length, message (and for
	// NBD_REPLY_TYPE_ERROR_OFFSET an offset), which is discarded.
	if length < 6 || length > 6+maxString+8 {
		return fmt.Errorf("%w: error chunk of %d bytes", ErrProtocol, length)
	}
	if _, err := io.ReadFull(br, b[:6]); err != nil {
		return err
	}
	if _, err := br.Discard(int(length) - 6); err != nil {
		return err
	}
	code := binary.BigEndian.Uint32(b[:])
	if code == 0 {
		code = errIO // an error chunk must carry an error
	}
	if cl.err == nil {
		cl.err = &RemoteError{Code: code}
	}
	return nil
}

// do sends one request with an optional payload and waits for its reply;
// a read's data lands in rbuf.
func (c *Client) do(ctx context.Context, typ, flags uint16, off int64, length uint32, payload, rbuf []byte) error {
	return c.doCall(ctx, typ, flags, off, length, payload, rbuf, nil)
}

// doCall is do with a block status request's destination.
func (c *Client) doCall(ctx context.Context, typ, flags uint16, off int64, length uint32, payload, rbuf []byte, ext *[]block.Extent) error {
	cl := callPool.Get().(*call)
	cl.buf, cl.off, cl.got, cl.ext, cl.err = rbuf, off, 0, ext, nil
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		callPool.Put(cl)
		return err
	}
	c.cookie++
	cookie := c.cookie
	c.pending[cookie] = cl
	c.mu.Unlock()

	var h [requestSize]byte
	putRequest(h[:], request{flags: flags, typ: typ, cookie: cookie, offset: uint64(off), length: length})
	c.wmu.Lock()
	c.bw.Write(h[:])
	c.bw.Write(payload)
	err := c.bw.Flush()
	c.wmu.Unlock()
	if err != nil {
		c.nc.Close() // readReplies fails every pending call, this one too
	}
	select {
	case <-cl.done:
	case <-ctx.Done():
		// The reply may still come and must not land in a buffer the
		// caller reuses: the connection is given up.
		c.nc.Close()
		<-cl.done
		callPool.Put(cl)
		return ctx.Err()
	}
	err = cl.err
	cl.buf, cl.ext = nil, nil
	callPool.Put(cl)
	return err
}

// Size implements block.Device.
func (c *Client) Size() int64 { return c.size }

// Description is the export's description (NBD_INFO_DESCRIPTION), or
// "" when the server sent none.
func (c *Client) Description() string { return c.desc }

// ReadOnly implements block.Device.
func (c *Client) ReadOnly() bool { return c.readOnly }

// CanMultiConn reports whether the server allows several connections.
func (c *Client) CanMultiConn() bool { return c.flags&tfCanMultiConn != 0 }

// ReadAt implements block.Device.
func (c *Client) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := block.CheckRange(c, off, int64(len(p))); err != nil {
		return err
	}
	for len(p) > 0 {
		n := min(len(p), MaxPayload)
		if err := c.do(ctx, cmdRead, 0, off, uint32(n), nil, p[:n]); err != nil {
			return err
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// WriteAt implements block.Device.
func (c *Client) WriteAt(ctx context.Context, p []byte, off int64, f block.Flags) error {
	if err := block.CheckWrite(c, off, int64(len(p))); err != nil {
		return err
	}
	for len(p) > 0 {
		n := min(len(p), MaxPayload)
		if err := c.do(ctx, cmdWrite, fuaFlag(f), off, uint32(n), p[:n], nil); err != nil {
			return err
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

func fuaFlag(f block.Flags) uint16 {
	if f&block.FUA != 0 {
		return cmdFlagFUA
	}
	return 0
}

// Zero implements block.Device.
func (c *Client) Zero(ctx context.Context, off, n int64, f block.Flags) error {
	if err := block.CheckWrite(c, off, n); err != nil {
		return err
	}
	flags := fuaFlag(f)
	if f&block.NoHole != 0 {
		flags |= cmdFlagNoHole
	}
	if f&block.FastZero != 0 {
		flags |= cmdFlagFastZero
	}
	return c.ranged(ctx, cmdWriteZeroes, flags, off, n)
}

// Trim implements block.Device.
func (c *Client) Trim(ctx context.Context, off, n int64, f block.Flags) error {
	if c.readOnly {
		return block.ErrReadOnly
	}
	if err := block.CheckRange(c, off, n); err != nil {
		return err
	}
	return c.ranged(ctx, cmdTrim, fuaFlag(f), off, n)
}

func (c *Client) ranged(ctx context.Context, typ, flags uint16, off, n int64) error {
	const maxLen = 1 << 30
	for n > 0 {
		l := min(n, maxLen)
		if err := c.do(ctx, typ, flags, off, uint32(l), nil, nil); err != nil {
			return err
		}
		off, n = off+l, n-l
	}
	return nil
}

// Extents implements block.Extenter with NBD_CMD_BLOCK_STATUS when the
// server agreed to base:allocation; otherwise the whole range is
// reported as data. Like the server it asks, it may stop early.
func (c *Client) Extents(ctx context.Context, off, n int64, dst []block.Extent) ([]block.Extent, error) {
	if err := block.CheckRange(c, off, n); err != nil {
		return dst, err
	}
	if n == 0 {
		return dst, nil
	}
	if !c.hasMeta {
		return append(dst, block.Extent{Length: n}), nil
	}
	l := min(n, 1<<30)
	var ext []block.Extent
	if err := c.doCall(ctx, cmdBlockStatus, 0, off, uint32(l), nil, nil, &ext); err != nil {
		return dst, err
	}
	// A server may describe more than was asked: clip to the range.
	for _, e := range ext {
		e.Length = min(e.Length, l)
		dst = append(dst, e)
		if l -= e.Length; l == 0 {
			break
		}
	}
	return dst, nil
}

// HasBlockStatus reports whether the server agreed to base:allocation,
// so that Extents reports its holes.
func (c *Client) HasBlockStatus() bool { return c.hasMeta }

// Flush implements block.Device.
func (c *Client) Flush(ctx context.Context) error {
	return c.do(ctx, cmdFlush, 0, 0, 0, nil, nil)
}

// Done is closed once the connection is dead: closed, lost, or given up
// after a request's context ended. Every call fails after it.
func (c *Client) Done() <-chan struct{} { return c.done }

// Close sends NBD_CMD_DISC and closes the connection.
func (c *Client) Close() error {
	var h [requestSize]byte
	putRequest(h[:], request{typ: cmdDisc})
	c.wmu.Lock()
	c.bw.Write(h[:])
	c.bw.Flush()
	c.wmu.Unlock()
	err := c.nc.Close()
	<-c.done
	return err
}

// refusedError is a server's refusal of an export, in the server's own
// words when it sent any (usher's name the export); it unwraps to
// ErrUnknownExport or ErrExportBusy.
type refusedError struct {
	err         error
	export, msg string
}

func (e *refusedError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	return fmt.Sprintf("%v %q", e.err, e.export)
}

func (e *refusedError) Unwrap() error { return e.err }
