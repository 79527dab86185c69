package nbd

import (
	"bufio"
	"context"
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
// fixed newstyle with NBD_OPT_GO (simple replies) and keeps any number
// of requests in flight on its one connection. Reads larger than
// MaxPayload are split.
type Client struct {
	nc       net.Conn
	size     int64
	flags    uint16
	readOnly bool

	wmu sync.Mutex // serialises requests on the wire
	bw  *bufio.Writer

	mu      sync.Mutex
	pending map[uint64]*call
	cookie  uint64
	err     error // set once the connection is dead
	done    chan struct{}
}

var _ block.Device = (*Client)(nil)

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
	buf  []byte // where a read's data goes
	err  error
	done chan struct{}
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// DialURI connects to an NBD URI: nbd://host[:port]/export or
// nbd+unix:///export?socket=/path.
func DialURI(ctx context.Context, uri string) (*Client, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("nbd uri %q: %w", uri, err)
	}
	export := strings.TrimPrefix(u.Path, "/")
	switch u.Scheme {
	case "nbd":
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), fmt.Sprint(DefaultPort))
		}
		return Dial(ctx, "tcp", host, export)
	case "nbd+unix":
		sock := u.Query().Get("socket")
		if sock == "" {
			return nil, fmt.Errorf("nbd uri %q: no socket= parameter", uri)
		}
		return Dial(ctx, "unix", sock, export)
	}
	return nil, fmt.Errorf("nbd uri %q: scheme is not nbd or nbd+unix", uri)
}

// Dial connects to export on an NBD server at addr.
func Dial(ctx context.Context, network, addr, export string) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	c := &Client{nc: nc, pending: make(map[uint64]*call), done: make(chan struct{})}
	br := bufio.NewReaderSize(nc, 256<<10)
	c.bw = bufio.NewWriterSize(nc, 256<<10)
	if err := c.handshake(br, export); err != nil {
		nc.Close()
		return nil, fmt.Errorf("nbd handshake with %s: %w", addr, err)
	}
	nc.SetDeadline(timeZero)
	go c.readReplies(br)
	return c, nil
}

func (c *Client) handshake(br *bufio.Reader, export string) error {
	var hs [18]byte
	if _, err := io.ReadFull(br, hs[:]); err != nil {
		return err
	}
	if binary.BigEndian.Uint64(hs[:]) != magicNBD || binary.BigEndian.Uint64(hs[8:]) != magicOpt {
		return fmt.Errorf("%w: not a newstyle NBD server", ErrProtocol)
	}
	var cf [4]byte
	binary.BigEndian.PutUint32(cf[:], flagFixedNewstyle|flagNoZeroes&uint32(binary.BigEndian.Uint16(hs[16:])))
	c.bw.Write(cf[:])
	// NBD_OPT_GO with the export name and a request for block sizes.
	data := binary.BigEndian.AppendUint32(nil, uint32(len(export)))
	data = append(data, export...)
	data = binary.BigEndian.AppendUint16(data, 1)
	data = binary.BigEndian.AppendUint16(data, infoBlockSize)
	var oh [16]byte
	binary.BigEndian.PutUint64(oh[:], magicOpt)
	binary.BigEndian.PutUint32(oh[8:], optGo)
	binary.BigEndian.PutUint32(oh[12:], uint32(len(data)))
	c.bw.Write(oh[:])
	c.bw.Write(data)
	if err := c.bw.Flush(); err != nil {
		return err
	}
	for {
		var rh [20]byte
		if _, err := io.ReadFull(br, rh[:]); err != nil {
			return err
		}
		if binary.BigEndian.Uint64(rh[:]) != magicOptReply {
			return fmt.Errorf("%w: bad option reply magic", ErrProtocol)
		}
		typ := binary.BigEndian.Uint32(rh[12:])
		n := binary.BigEndian.Uint32(rh[16:])
		if n > maxOptionLength {
			return fmt.Errorf("%w: option reply of %d bytes", ErrProtocol, n)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			return err
		}
		switch {
		case typ == repAck:
			if c.flags&tfHasFlags == 0 {
				return fmt.Errorf("%w: no export info before ack", ErrProtocol)
			}
			return nil
		case typ == repInfo && len(body) >= 12 && binary.BigEndian.Uint16(body) == infoExport:
			c.size = int64(binary.BigEndian.Uint64(body[2:]))
			c.flags = binary.BigEndian.Uint16(body[10:])
			c.readOnly = c.flags&tfReadOnly != 0
		case typ == repErrUnknown:
			return fmt.Errorf("%w %q: %s", ErrUnknownExport, export, body)
		case typ == repErrPolicy:
			return fmt.Errorf("%w %q: %s", ErrExportBusy, export, body)
		case typ&(1<<31) != 0:
			return fmt.Errorf("server refused export %q (%#x): %s", export, typ, body)
		}
	}
}

// readReplies matches replies to calls until the connection fails.
func (c *Client) readReplies(br *bufio.Reader) {
	var h [16]byte
	var err error
	for {
		if _, err = io.ReadFull(br, h[:]); err != nil {
			break
		}
		if binary.BigEndian.Uint32(h[:]) != magicSimple {
			err = fmt.Errorf("%w: bad reply magic %#x", ErrProtocol, binary.BigEndian.Uint32(h[:]))
			break
		}
		code := binary.BigEndian.Uint32(h[4:])
		cookie := binary.BigEndian.Uint64(h[8:])
		c.mu.Lock()
		cl := c.pending[cookie]
		delete(c.pending, cookie)
		c.mu.Unlock()
		if cl == nil {
			err = fmt.Errorf("%w: reply to unknown cookie %d", ErrProtocol, cookie)
			break
		}
		if code != 0 {
			cl.err = &RemoteError{Code: code}
		} else if cl.buf != nil {
			if _, err = io.ReadFull(br, cl.buf); err != nil {
				cl.err = err
				cl.done <- struct{}{}
				break
			}
		}
		cl.done <- struct{}{}
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

// do sends one request with an optional payload and waits for its reply;
// a read's data lands in rbuf.
func (c *Client) do(ctx context.Context, typ, flags uint16, off int64, length uint32, payload, rbuf []byte) error {
	cl := callPool.Get().(*call)
	cl.buf, cl.err = rbuf, nil
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
	cl.buf = nil
	callPool.Put(cl)
	return err
}

// Size implements block.Device.
func (c *Client) Size() int64 { return c.size }

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

// Flush implements block.Device.
func (c *Client) Flush(ctx context.Context) error {
	return c.do(ctx, cmdFlush, 0, 0, 0, nil, nil)
}

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
