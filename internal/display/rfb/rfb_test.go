package rfb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image/color"
	"io"
	"strings"
	"testing"
)

// server builds what an RFB server sends, for the client to read.
type server struct{ bytes.Buffer }

func (s *server) u8(v ...uint8) *server { s.Write(v); return s }
func (s *server) u16(v ...uint16) *server {
	for _, x := range v {
		s.Write(binary.BigEndian.AppendUint16(nil, x))
	}
	return s
}
func (s *server) i32(v int32) *server  { return s.u32(uint32(v)) }
func (s *server) u32(v uint32) *server { s.Write(binary.BigEndian.AppendUint32(nil, v)); return s }
func (s *server) str(v string) *server { s.u32(uint32(len(v))); s.WriteString(v); return s }

// hello is a server's side of a handshake that succeeds with None, for
// a w×h display.
func hello(w, h uint16) *server {
	s := &server{}
	s.WriteString("RFB 003.008\n")
	s.u8(2, 2, securityNone) // VNC authentication, None
	s.u32(0)
	s.u16(w, h)
	s.u8(32, 24, 0, 1).u16(255, 255, 255).u8(16, 8, 0, 0, 0, 0)
	s.str("usher test")
	return s
}

// rect appends a rectangle header.
func (s *server) rect(x, y, w, h uint16, enc int32) *server {
	return s.u16(x, y, w, h).i32(enc)
}

// pixels appends n pixels of colour c in the client's format.
func (s *server) pixels(n int, c color.RGBA) *server {
	for range n {
		s.u8(c.B, c.G, c.R, 0)
	}
	return s
}

func handshake(t *testing.T, s *server) (*Client, *bytes.Buffer) {
	t.Helper()
	var sent bytes.Buffer
	c := newClient(s, &sent, Options{MaxPixels: 1 << 16})
	if err := c.handshake(); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	return c, &sent
}

func TestHandshake(t *testing.T) {
	c, sent := handshake(t, hello(64, 48))
	if got := c.Init(); got.Width != 64 || got.Height != 48 || got.Name != "usher test" || got.Format.BitsPerPixel != 32 || !got.Format.TrueColour {
		t.Errorf("Init() = %+v", got)
	}
	if w, h := c.Size(); w != 64 || h != 48 {
		t.Errorf("Size() = %d, %d", w, h)
	}
	want := &server{}
	want.WriteString("RFB 003.008\n")
	want.u8(securityNone, 1)                                             // security type, shared
	want.u8(msgSetPixelFormat, 0, 0, 0, 32, 24, 0, 1).u16(255, 255, 255) // SetPixelFormat
	want.u8(16, 8, 0, 0, 0, 0)                                           // shifts, padding
	want.u8(msgSetEncodings, 0).u16(2).u32(0).i32(EncodingDesktopSize)   // SetEncodings
	if !bytes.Equal(sent.Bytes(), want.Bytes()) {
		t.Errorf("the client sent\n%x\nwant\n%x", sent.Bytes(), want.Bytes())
	}

	sent.Reset()
	if err := c.RequestUpdate(true); err != nil {
		t.Fatal(err)
	}
	if want := []byte{msgFramebufferUpdateRequest, 1, 0, 0, 0, 0, 0, 64, 0, 48}; !bytes.Equal(sent.Bytes(), want) {
		t.Errorf("FramebufferUpdateRequest = %x, want %x", sent.Bytes(), want)
	}
}

func TestExclusive(t *testing.T) {
	var sent bytes.Buffer
	c := newClient(hello(8, 8), &sent, Options{Exclusive: true})
	if err := c.handshake(); err != nil {
		t.Fatal(err)
	}
	if got := sent.Bytes()[len(version)+1]; got != 0 {
		t.Errorf("shared flag %d with Exclusive, want 0", got)
	}
}

func TestHandshakeRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server func() *server
		is     error
		says   string
	}{
		{"old version", func() *server { s := &server{}; s.WriteString("RFB 003.003\n"); return s }, ErrUnsupported, "3.3"},
		{"not RFB", func() *server { s := &server{}; s.WriteString("HTTP/1.1 200"); return s }, ErrMalformed, "protocol version"},
		{"connection refused", func() *server {
			s := &server{}
			s.WriteString("RFB 003.008\n")
			return s.u8(0).str("too many connections")
		}, ErrRefused, "too many connections"},
		{"no None", func() *server { s := &server{}; s.WriteString("RFB 003.008\n"); return s.u8(1, 2) }, ErrUnsupported, "[2]"},
		{"security failed", func() *server {
			s := &server{}
			s.WriteString("RFB 003.008\n")
			return s.u8(1, securityNone).u32(1).str("no")
		}, ErrRefused, `security: "no"`},
		{"huge reason", func() *server {
			s := &server{}
			s.WriteString("RFB 003.008\n")
			return s.u8(0).u32(1 << 30)
		}, ErrMalformed, "reason of"},
		{"huge name", func() *server {
			s := &server{}
			s.WriteString("RFB 003.008\n")
			s.u8(1, securityNone).u32(0).u16(8, 8).u8(32, 24, 0, 1).u16(255, 255, 255).u8(16, 8, 0, 0, 0, 0)
			return s.u32(1 << 31)
		}, ErrMalformed, "desktop name"},
		{"huge display", func() *server { return hello(4096, 4096) }, ErrMalformed, "4096x4096"},
		{"cut short", func() *server { s := hello(8, 8); s.Truncate(s.Len() - 3); return s }, io.ErrUnexpectedEOF, "desktop name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(tc.server(), io.Discard, Options{MaxPixels: 1 << 16})
			err := c.handshake()
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("handshake: %v, want %v saying %q", err, tc.is, tc.says)
			}
		})
	}
}

func TestReadMessage(t *testing.T) {
	blue := color.RGBA{R: 0x1f, G: 0x6f, B: 0xeb, A: 0xff}
	s := hello(16, 8)
	c, _ := handshake(t, s)

	// An update of two Raw rectangles, then Bell, clipboard and colour map.
	s.u8(MsgFramebufferUpdate, 0).u16(2)
	s.rect(0, 0, 16, 8, EncodingRaw).pixels(16*8, color.RGBA{R: 1, G: 2, B: 3})
	s.rect(4, 2, 2, 3, EncodingRaw).pixels(6, blue)
	s.u8(MsgBell)
	s.u8(MsgServerCutText, 0, 0, 0).str("clipboard")
	s.u8(MsgSetColourMapEntries, 0).u16(0, 2).u16(1, 2, 3, 4, 5, 6)
	// A resize, then a rectangle of the new size.
	s.u8(MsgFramebufferUpdate, 0).u16(2).rect(0, 0, 32, 4, EncodingDesktopSize).rect(31, 3, 1, 1, EncodingRaw).pixels(1, blue)

	m, err := c.ReadMessage()
	if err != nil || m.Type != MsgFramebufferUpdate || m.Rects != 2 || m.Resized {
		t.Fatalf("ReadMessage = %+v, %v", m, err)
	}
	for _, p := range []struct {
		x, y int
		want color.RGBA
	}{{0, 0, color.RGBA{1, 2, 3, 0xff}}, {4, 2, blue}, {5, 4, blue}, {6, 4, color.RGBA{1, 2, 3, 0xff}}, {15, 7, color.RGBA{1, 2, 3, 0xff}}} {
		if got, ok := c.Pixel(p.x, p.y); !ok || got != p.want {
			t.Errorf("Pixel(%d, %d) = %v, %v; want %v", p.x, p.y, got, ok, p.want)
		}
	}
	if _, ok := c.Pixel(16, 0); ok {
		t.Error("Pixel(16, 0) of a 16-wide framebuffer is ok")
	}
	for _, want := range []uint8{MsgBell, MsgServerCutText, MsgSetColourMapEntries} {
		if m, err := c.ReadMessage(); err != nil || m.Type != want {
			t.Fatalf("ReadMessage = %+v, %v; want type %d", m, err, want)
		}
	}
	m, err = c.ReadMessage()
	if err != nil || !m.Resized {
		t.Fatalf("ReadMessage of the resize = %+v, %v", m, err)
	}
	if w, h := c.Size(); w != 32 || h != 4 {
		t.Errorf("Size() after the resize = %d, %d", w, h)
	}
	if got, _ := c.Pixel(31, 3); got != blue {
		t.Errorf("Pixel(31, 3) = %v, want %v", got, blue)
	}
	if got, _ := c.Pixel(0, 0); got != (color.RGBA{A: 0xff}) {
		t.Errorf("Pixel(0, 0) after a resize = %v, want black", got)
	}
	if _, err := c.ReadMessage(); !errors.Is(err, io.EOF) {
		t.Errorf("ReadMessage at the end: %v, want EOF", err)
	}
}

func TestReadMessageMalformed(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  func(s *server)
		is   error
		says string
	}{
		{"rectangle too wide", func(s *server) { s.u8(0, 0).u16(1).rect(10, 0, 7, 1, EncodingRaw) }, ErrMalformed, "outside the 16x8"},
		{"rectangle too low", func(s *server) { s.u8(0, 0).u16(1).rect(0, 8, 1, 1, EncodingRaw) }, ErrMalformed, "outside"},
		{"huge rectangle", func(s *server) { s.u8(0, 0).u16(1).rect(0, 0, 65535, 65535, EncodingRaw) }, ErrMalformed, "outside"},
		{"encoding not asked for", func(s *server) { s.u8(0, 0).u16(1).rect(0, 0, 1, 1, 16) }, ErrMalformed, "encoding 16"},
		{"huge resize", func(s *server) { s.u8(0, 0).u16(1).rect(0, 0, 65535, 65535, EncodingDesktopSize) }, ErrMalformed, "larger than"},
		{"unknown type", func(s *server) { s.u8(150) }, ErrMalformed, "type 150"},
		{"huge cut text", func(s *server) { s.u8(3, 0, 0, 0).u32(1 << 31) }, ErrMalformed, "ServerCutText"},
		{"pixels cut short", func(s *server) { s.u8(0, 0).u16(1).rect(0, 0, 2, 2, EncodingRaw).pixels(3, color.RGBA{}) }, io.ErrUnexpectedEOF, "rectangle 0"},
		{"cut text cut short", func(s *server) { s.u8(3, 0, 0, 0).u32(10).u8(1) }, io.ErrUnexpectedEOF, "ServerCutText"},
		{"header cut short", func(s *server) { s.u8(0, 0) }, io.ErrUnexpectedEOF, "FramebufferUpdate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := hello(16, 8)
			c, _ := handshake(t, s)
			tc.msg(s)
			_, err := c.ReadMessage()
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("ReadMessage: %v, want %v saying %q", err, tc.is, tc.says)
			}
		})
	}
}

// FuzzReadMessage feeds server messages to a client with a 16×8
// framebuffer: whatever the bytes, it returns an error or a message,
// never panics, and keeps its framebuffer within MaxPixels.
func FuzzReadMessage(f *testing.F) {
	s := &server{}
	s.u8(0, 0).u16(2).rect(0, 0, 2, 2, EncodingRaw).pixels(4, color.RGBA{R: 9}).rect(0, 0, 40, 30, EncodingDesktopSize)
	f.Add(s.Bytes())
	f.Add([]byte{2, 3, 0, 0, 0, 0, 0, 0, 3, 'a', 'b', 'c', 1, 0, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6})
	f.Add([]byte{0, 0, 0, 1, 0, 15, 0, 7, 0, 1, 0, 1, 0, 0, 0, 0, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		const maxPixels = 1 << 12
		c := newClient(bytes.NewReader(data), io.Discard, Options{MaxPixels: maxPixels})
		if err := c.resize(16, 8); err != nil {
			t.Fatal(err)
		}
		for range 64 {
			if _, err := c.ReadMessage(); err != nil {
				break
			}
		}
		w, h := c.Size()
		if w*h > maxPixels || len(c.fb) != w*h*bytesPerPixel {
			t.Fatalf("framebuffer %dx%d of %d bytes", w, h, len(c.fb))
		}
		c.Pixel(w-1, h-1)
	})
}

// FuzzHandshake feeds a server's side of the handshake to a client.
func FuzzHandshake(f *testing.F) {
	f.Add(hello(8, 8).Bytes())
	f.Add(append([]byte("RFB 003.008\n"), 0, 0, 0, 0, 3, 'n', 'o', '!'))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := newClient(bytes.NewReader(data), io.Discard, Options{MaxPixels: 1 << 12})
		if err := c.handshake(); err == nil {
			if w, h := c.Size(); w*h > 1<<12 {
				t.Fatalf("framebuffer %dx%d", w, h)
			}
		}
	})
}
