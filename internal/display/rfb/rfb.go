// Package rfb is a small client of the Remote Framebuffer protocol, RFB
// 3.8 (RFC 6143): enough of it to look at a session's display from a test
// or a benchmark. It shakes hands with security type None, asks for 32-bit
// true colour and the Raw encoding (with the DesktopSize pseudo-encoding),
// requests framebuffer updates, and keeps the framebuffer they carry, so
// that a caller can read the colour of a pixel.
//
// A Client works over any io.ReadWriter: the Unix socket of an Xvnc, or a
// WebSocket through websocket.NetConn. It never trusts the server: a
// malformed message is an error that says what was wrong, and no message
// makes it allocate more than the framebuffer the caller allowed
// (Options.MaxPixels).
//
// It imports only the standard library. Tests of internal/display and
// internal/vda import it, and so may benchmarks; the agent itself splices
// RFB without parsing it.
package rfb

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"image/color"
	"io"
)

// Encodings the client asks for.
const (
	EncodingRaw         int32 = 0
	EncodingDesktopSize int32 = -223 // pseudo-encoding: the framebuffer's new size
)

// Server-to-client message types.
const (
	MsgFramebufferUpdate   uint8 = 0
	MsgSetColourMapEntries uint8 = 1
	MsgBell                uint8 = 2
	MsgServerCutText       uint8 = 3
)

// Client-to-server message types.
const (
	msgSetPixelFormat           = 0
	msgSetEncodings             = 2
	msgFramebufferUpdateRequest = 3
)

const (
	securityNone = 1
	// version is the only protocol version the client speaks.
	version = "RFB 003.008\n"
	// maxReason bounds a server's failure reason, maxName its desktop
	// name, maxCutText the clipboard text it may send (skipped unread).
	maxReason  = 4 << 10
	maxName    = 4 << 10
	maxCutText = 64 << 20
	// DefaultMaxPixels is Options.MaxPixels when zero: 4096×4096.
	DefaultMaxPixels = 4096 * 4096
	bytesPerPixel    = 4
)

// PixelFormat is RFB's PIXEL_FORMAT.
type PixelFormat struct {
	BitsPerPixel, Depth             uint8
	BigEndian, TrueColour           bool
	RedMax, GreenMax, BlueMax       uint16
	RedShift, GreenShift, BlueShift uint8
}

// format is the pixel format the client asks for: 32 bits per pixel,
// depth 24, little-endian, so that a pixel is the bytes B, G, R, unused.
var format = PixelFormat{BitsPerPixel: 32, Depth: 24, TrueColour: true,
	RedMax: 255, GreenMax: 255, BlueMax: 255, RedShift: 16, GreenShift: 8, BlueShift: 0}

// ServerInit is what the server tells of its display after the handshake.
type ServerInit struct {
	Width, Height int
	Format        PixelFormat
	Name          string
}

// Options configure a Client.
type Options struct {
	// MaxPixels bounds the framebuffer (width × height) the client keeps;
	// a server that announces a larger one is refused. 0 means
	// DefaultMaxPixels.
	MaxPixels int
	// Exclusive asks the server for the display alone (ClientInit's
	// shared flag off): the server may then disconnect other clients.
	Exclusive bool
}

// Message is what ReadMessage read.
type Message struct {
	Type uint8
	// Rects is the number of rectangles of a FramebufferUpdate, and
	// Resized tells whether one of them changed the framebuffer's size.
	Rects   int
	Resized bool
}

// Client is one RFB connection. Its methods are not safe for concurrent
// use, but for none of them is that needed: a caller requests an update,
// then reads messages.
type Client struct {
	w         io.Writer
	r         *bufio.Reader
	init      ServerInit
	maxPixels int
	exclusive bool
	width     int
	height    int
	fb        []byte // width*height pixels in format
	scratch   [20]byte
}

// Handshake shakes hands with the RFB server at the other end of rw
// (ProtocolVersion 3.8, security type None, ClientInit), reads its
// ServerInit, and sets the client's pixel format and encodings.
func Handshake(rw io.ReadWriter, opts Options) (*Client, error) {
	c := newClient(rw, rw, opts)
	if err := c.handshake(); err != nil {
		return nil, err
	}
	return c, nil
}

func newClient(r io.Reader, w io.Writer, opts Options) *Client {
	c := &Client{w: w, r: bufio.NewReaderSize(r, 64<<10), maxPixels: opts.MaxPixels, exclusive: opts.Exclusive}
	if c.maxPixels <= 0 {
		c.maxPixels = DefaultMaxPixels
	}
	return c
}

// errors of the handshake and of messages name what was wrong; these are
// the conditions a caller may branch on.
var (
	// ErrUnsupported: the server speaks another version of RFB, or offers
	// no security type the client has (None only).
	ErrUnsupported = errors.New("rfb: unsupported by the client")
	// ErrRefused: the server refused the connection or its security.
	ErrRefused = errors.New("rfb: refused by the server")
	// ErrMalformed: a message broke the protocol.
	ErrMalformed = errors.New("rfb: malformed message")
)

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

func (c *Client) handshake() error {
	var v [12]byte
	if _, err := io.ReadFull(c.r, v[:]); err != nil {
		return fmt.Errorf("rfb: read protocol version: %w", err)
	}
	var major, minor int
	if n, err := fmt.Sscanf(string(v[:]), "RFB %03d.%03d\n", &major, &minor); n != 2 || err != nil || v[11] != '\n' {
		return malformed("protocol version %q", v[:])
	}
	if major != 3 || minor < 8 {
		return fmt.Errorf("%w: the server speaks RFB %d.%d, the client 3.8", ErrUnsupported, major, minor)
	}
	if _, err := io.WriteString(c.w, version); err != nil {
		return fmt.Errorf("rfb: write protocol version: %w", err)
	}

	n, err := c.r.ReadByte()
	if err != nil {
		return fmt.Errorf("rfb: read security types: %w", err)
	}
	if n == 0 {
		return c.refusal("connection")
	}
	types := c.scratch[:0]
	none := false
	for range n {
		t, err := c.r.ReadByte()
		if err != nil {
			return fmt.Errorf("rfb: read security types: %w", err)
		}
		none = none || t == securityNone
		if len(types) < cap(types) {
			types = append(types, t)
		}
	}
	if !none {
		return fmt.Errorf("%w: the server offers security types %v, not None (1)", ErrUnsupported, types)
	}
	if _, err := c.w.Write([]byte{securityNone}); err != nil {
		return fmt.Errorf("rfb: write security type: %w", err)
	}
	result, err := c.u32()
	if err != nil {
		return fmt.Errorf("rfb: read security result: %w", err)
	}
	if result != 0 {
		return c.refusal("security")
	}

	shared := byte(1)
	if c.exclusive {
		shared = 0
	}
	if _, err := c.w.Write([]byte{shared}); err != nil {
		return fmt.Errorf("rfb: write client init: %w", err)
	}
	var si [24]byte
	if _, err := io.ReadFull(c.r, si[:]); err != nil {
		return fmt.Errorf("rfb: read server init: %w", err)
	}
	w, h := int(binary.BigEndian.Uint16(si[0:])), int(binary.BigEndian.Uint16(si[2:]))
	c.init.Format = decodePixelFormat(si[4:20])
	nameLen := binary.BigEndian.Uint32(si[20:])
	if nameLen > maxName {
		return malformed("desktop name of %d bytes (at most %d)", nameLen, maxName)
	}
	name := make([]byte, nameLen)
	if _, err := io.ReadFull(c.r, name); err != nil {
		return fmt.Errorf("rfb: read desktop name: %w", err)
	}
	c.init.Name = string(name)
	if err := c.resize(w, h); err != nil {
		return err
	}
	c.init.Width, c.init.Height = w, h

	if err := c.setPixelFormat(); err != nil {
		return err
	}
	return c.setEncodings(EncodingRaw, EncodingDesktopSize)
}

// refusal reads the reason string that follows a refusal.
func (c *Client) refusal(what string) error {
	n, err := c.u32()
	if err != nil {
		return fmt.Errorf("%w: %s (no reason: %v)", ErrRefused, what, err)
	}
	if n > maxReason {
		return malformed("%s refused with a reason of %d bytes (at most %d)", what, n, maxReason)
	}
	reason := make([]byte, n)
	if _, err := io.ReadFull(c.r, reason); err != nil {
		return fmt.Errorf("%w: %s (reason cut short: %v)", ErrRefused, what, err)
	}
	return fmt.Errorf("%w: %s: %q", ErrRefused, what, reason)
}

func decodePixelFormat(b []byte) PixelFormat {
	return PixelFormat{BitsPerPixel: b[0], Depth: b[1], BigEndian: b[2] != 0, TrueColour: b[3] != 0,
		RedMax: binary.BigEndian.Uint16(b[4:]), GreenMax: binary.BigEndian.Uint16(b[6:]), BlueMax: binary.BigEndian.Uint16(b[8:]),
		RedShift: b[10], GreenShift: b[11], BlueShift: b[12]}
}

func (c *Client) setPixelFormat() error {
	b := c.scratch[:20]
	clear(b)
	b[0] = msgSetPixelFormat
	p := b[4:]
	p[0], p[1] = format.BitsPerPixel, format.Depth
	if format.BigEndian {
		p[2] = 1
	}
	if format.TrueColour {
		p[3] = 1
	}
	binary.BigEndian.PutUint16(p[4:], format.RedMax)
	binary.BigEndian.PutUint16(p[6:], format.GreenMax)
	binary.BigEndian.PutUint16(p[8:], format.BlueMax)
	p[10], p[11], p[12] = format.RedShift, format.GreenShift, format.BlueShift
	if _, err := c.w.Write(b); err != nil {
		return fmt.Errorf("rfb: write SetPixelFormat: %w", err)
	}
	return nil
}

func (c *Client) setEncodings(encs ...int32) error {
	b := make([]byte, 4+4*len(encs))
	b[0] = msgSetEncodings
	binary.BigEndian.PutUint16(b[2:], uint16(len(encs)))
	for i, e := range encs {
		binary.BigEndian.PutUint32(b[4+4*i:], uint32(e))
	}
	if _, err := c.w.Write(b); err != nil {
		return fmt.Errorf("rfb: write SetEncodings: %w", err)
	}
	return nil
}

// Init returns the server's ServerInit.
func (c *Client) Init() ServerInit { return c.init }

// Size returns the framebuffer's size now (a DesktopSize rectangle
// changes it).
func (c *Client) Size() (width, height int) { return c.width, c.height }

// RequestUpdate sends a FramebufferUpdateRequest for the whole
// framebuffer; incremental asks only for what changed since the last
// update.
func (c *Client) RequestUpdate(incremental bool) error {
	b := c.scratch[:10]
	b[0] = msgFramebufferUpdateRequest
	b[1] = 0
	if incremental {
		b[1] = 1
	}
	binary.BigEndian.PutUint16(b[2:], 0)
	binary.BigEndian.PutUint16(b[4:], 0)
	binary.BigEndian.PutUint16(b[6:], uint16(c.width))
	binary.BigEndian.PutUint16(b[8:], uint16(c.height))
	if _, err := c.w.Write(b); err != nil {
		return fmt.Errorf("rfb: write FramebufferUpdateRequest: %w", err)
	}
	return nil
}

// Pixel returns the colour of the pixel at x, y, as the updates read so
// far left it (black before any); out of the framebuffer, it returns the
// zero colour and false.
func (c *Client) Pixel(x, y int) (color.RGBA, bool) {
	if x < 0 || y < 0 || x >= c.width || y >= c.height {
		return color.RGBA{}, false
	}
	i := (y*c.width + x) * bytesPerPixel
	return color.RGBA{R: c.fb[i+2], G: c.fb[i+1], B: c.fb[i], A: 0xff}, true
}

// ReadMessage reads one message from the server and applies it: a
// FramebufferUpdate's Raw rectangles go to the framebuffer and its
// DesktopSize rectangle resizes it (to black); Bell, ServerCutText and
// SetColourMapEntries are read and dropped. Any other message type, or
// an encoding the client did not ask for, is an error: the stream cannot
// be followed past it.
func (c *Client) ReadMessage() (Message, error) {
	t, err := c.r.ReadByte()
	if err != nil {
		return Message{}, fmt.Errorf("rfb: read message: %w", err)
	}
	m := Message{Type: t}
	switch t {
	case MsgFramebufferUpdate:
		var h [3]byte
		if _, err := io.ReadFull(c.r, h[:]); err != nil {
			return m, fmt.Errorf("rfb: read FramebufferUpdate: %w", unexpected(err))
		}
		n := int(binary.BigEndian.Uint16(h[1:]))
		for i := range n {
			resized, err := c.readRect(i)
			if err != nil {
				return m, err
			}
			m.Rects++
			m.Resized = m.Resized || resized
		}
	case MsgSetColourMapEntries:
		var h [5]byte
		if _, err := io.ReadFull(c.r, h[:]); err != nil {
			return m, fmt.Errorf("rfb: read SetColourMapEntries: %w", unexpected(err))
		}
		if err := c.skip(6*int64(binary.BigEndian.Uint16(h[3:])), "SetColourMapEntries"); err != nil {
			return m, err
		}
	case MsgBell:
	case MsgServerCutText:
		var h [7]byte
		if _, err := io.ReadFull(c.r, h[:]); err != nil {
			return m, fmt.Errorf("rfb: read ServerCutText: %w", unexpected(err))
		}
		n := binary.BigEndian.Uint32(h[3:])
		if n > maxCutText {
			return m, malformed("ServerCutText of %d bytes (at most %d)", n, maxCutText)
		}
		if err := c.skip(int64(n), "ServerCutText"); err != nil {
			return m, err
		}
	default:
		return m, malformed("unknown server message type %d", t)
	}
	return m, nil
}

// readRect reads rectangle i of a FramebufferUpdate.
func (c *Client) readRect(i int) (resized bool, err error) {
	h := c.scratch[:12]
	if _, err := io.ReadFull(c.r, h); err != nil {
		return false, fmt.Errorf("rfb: read rectangle %d: %w", i, unexpected(err))
	}
	x, y := int(binary.BigEndian.Uint16(h[0:])), int(binary.BigEndian.Uint16(h[2:]))
	w, ht := int(binary.BigEndian.Uint16(h[4:])), int(binary.BigEndian.Uint16(h[6:]))
	enc := int32(binary.BigEndian.Uint32(h[8:]))
	switch enc {
	case EncodingDesktopSize:
		return true, c.resize(w, ht)
	case EncodingRaw:
	default:
		return false, malformed("rectangle %d has encoding %d, which the client did not ask for", i, enc)
	}
	if x+w > c.width || y+ht > c.height {
		return false, malformed("rectangle %d (%dx%d at %d,%d) is outside the %dx%d framebuffer", i, w, ht, x, y, c.width, c.height)
	}
	row := w * bytesPerPixel
	for r := range ht {
		off := ((y+r)*c.width + x) * bytesPerPixel
		if _, err := io.ReadFull(c.r, c.fb[off:off+row]); err != nil {
			return false, fmt.Errorf("rfb: read rectangle %d: %w", i, unexpected(err))
		}
	}
	return false, nil
}

// resize makes the framebuffer w×h and black, within MaxPixels.
func (c *Client) resize(w, h int) error {
	if w*h > c.maxPixels {
		return malformed("a %dx%d framebuffer is larger than the %d pixels allowed", w, h, c.maxPixels)
	}
	n := w * h * bytesPerPixel
	if cap(c.fb) >= n {
		c.fb = c.fb[:n]
		clear(c.fb)
	} else {
		c.fb = make([]byte, n)
	}
	c.width, c.height = w, h
	return nil
}

func (c *Client) skip(n int64, what string) error {
	if _, err := io.CopyN(io.Discard, c.r, n); err != nil {
		return fmt.Errorf("rfb: read %s: %w", what, unexpected(err))
	}
	return nil
}

func (c *Client) u32() (uint32, error) {
	b := c.scratch[:4]
	if _, err := io.ReadFull(c.r, b); err != nil {
		return 0, unexpected(err)
	}
	return binary.BigEndian.Uint32(b), nil
}

// unexpected turns an EOF in the middle of a message into
// io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Await requests a full update, then reads messages, requesting an
// incremental update after each update, until cond holds after an update
// or reading fails. A deadline on the connection bounds it: with nothing
// changing on the display, the server sends nothing.
func (c *Client) Await(cond func(*Client) bool) error {
	if err := c.RequestUpdate(false); err != nil {
		return err
	}
	for {
		m, err := c.ReadMessage()
		if err != nil {
			return err
		}
		if m.Type != MsgFramebufferUpdate {
			continue
		}
		if cond(c) {
			return nil
		}
		if err := c.RequestUpdate(true); err != nil {
			return err
		}
	}
}
