package nbd

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/blocktest"
)

// startServer serves exports on a loopback port and returns its address.
func startServer(t testing.TB, exports Exporter) string {
	t.Helper()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Exports: exports, Logger: slog.New(slog.DiscardHandler)}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func dial(t testing.TB, addr, export string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, "tcp", addr, export)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClientConformance(t *testing.T) {
	blocktest.Run(t, func(t *testing.T) block.Device {
		addr := startServer(t, Devices{"disk": block.NewMemory(blocktest.Size)})
		return dial(t, addr, "disk")
	})
}

func TestUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "nbd.sock")
	ln, err := Listen("unix:" + sock)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Exports: Devices{"": block.NewMemory(1 << 20)}}
	go s.Serve(ln)
	defer s.Close()
	c, err := DialURI(context.Background(), "nbd+unix:///?socket="+sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, want := c.Size(), int64(1<<20); got != want {
		t.Fatalf("size %d, want %d", got, want)
	}
	if !c.CanMultiConn() {
		t.Fatal("a shared device should advertise CAN_MULTI_CONN")
	}
}

func TestReadOnlyExportRefusesWrites(t *testing.T) {
	m := block.NewMemory(1 << 20)
	m.SetReadOnly(true)
	c := dial(t, startServer(t, Devices{"ro": m}), "ro")
	defer c.Close()
	if !c.ReadOnly() {
		t.Fatal("export not advertised read-only")
	}
	// Bypass the client's own check to see the server's answer.
	err := c.do(context.Background(), cmdWrite, 0, 0, 4, []byte{1, 2, 3, 4}, nil)
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != errPerm {
		t.Fatalf("write to read-only export: %v, want EPERM", err)
	}
}

func TestOutOfRangeErrors(t *testing.T) {
	c := dial(t, startServer(t, Devices{"d": block.NewMemory(1 << 20)}), "d")
	defer c.Close()
	ctx := context.Background()
	for _, tt := range []struct {
		name   string
		typ    uint16
		off    int64
		length uint32
		data   []byte
		want   uint32
	}{
		{"read past the end", cmdRead, 1<<20 - 512, 4096, nil, errInval},
		{"read larger than the maximum", cmdRead, 0, MaxPayload + 1, nil, errInval},
		{"write past the end", cmdWrite, 1 << 20, 4, []byte{1, 2, 3, 4}, errNoSpc},
		{"trim past the end", cmdTrim, 1 << 20, 4096, nil, errInval},
		{"zeroes past the end", cmdWriteZeroes, 1 << 20, 4096, nil, errNoSpc},
		{"block status of length zero", cmdBlockStatus, 0, 0, nil, errInval},
		{"unknown command", 42, 0, 0, nil, errInval},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var rbuf []byte
			if tt.typ == cmdRead && tt.want == 0 {
				rbuf = make([]byte, tt.length)
			}
			err := c.do(ctx, tt.typ, 0, tt.off, tt.length, tt.data, rbuf)
			var re *RemoteError
			if !errors.As(err, &re) || re.Code != tt.want {
				t.Fatalf("got %v, want error %d", err, tt.want)
			}
		})
	}
	// The connection is still usable.
	if err := c.ReadAt(ctx, make([]byte, 512), 0); err != nil {
		t.Fatal(err)
	}
}

// rawConn speaks the protocol by hand.
type rawConn struct {
	t  *testing.T
	nc net.Conn
}

func rawDial(t *testing.T, addr string) *rawConn {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	t.Cleanup(func() { nc.Close() })
	r := &rawConn{t: t, nc: nc}
	var hs [18]byte
	r.read(hs[:])
	if binary.BigEndian.Uint64(hs[:]) != magicNBD || binary.BigEndian.Uint16(hs[16:]) != flagFixedNewstyle|flagNoZeroes {
		t.Fatalf("bad greeting %x", hs)
	}
	r.write(binary.BigEndian.AppendUint32(nil, flagFixedNewstyle|flagNoZeroes))
	return r
}

func (r *rawConn) read(b []byte) {
	r.t.Helper()
	if _, err := io.ReadFull(r.nc, b); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) write(b []byte) {
	r.t.Helper()
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) option(opt uint32, data []byte) {
	b := binary.BigEndian.AppendUint64(nil, magicOpt)
	b = binary.BigEndian.AppendUint32(b, opt)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	r.write(append(b, data...))
}

// reply reads one option reply and returns its type and data.
func (r *rawConn) reply(opt uint32) (uint32, []byte) {
	r.t.Helper()
	var h [20]byte
	r.read(h[:])
	if binary.BigEndian.Uint64(h[:]) != magicOptReply || binary.BigEndian.Uint32(h[8:]) != opt {
		r.t.Fatalf("bad option reply header %x", h)
	}
	data := make([]byte, binary.BigEndian.Uint32(h[16:]))
	r.read(data)
	return binary.BigEndian.Uint32(h[12:]), data
}

func goData(name string, infos ...uint16) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(infos)))
	for _, i := range infos {
		b = binary.BigEndian.AppendUint16(b, i)
	}
	return b
}

func metaData(name string, queries ...string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(queries)))
	for _, q := range queries {
		b = binary.BigEndian.AppendUint32(b, uint32(len(q)))
		b = append(b, q...)
	}
	return b
}

func TestNegotiation(t *testing.T) {
	m := block.NewMemory(1 << 20)
	m.WriteAt(context.Background(), []byte("hello"), 65536, 0)
	addr := startServer(t, Devices{"img": m})

	t.Run("UnknownOptionIsUnsupported", func(t *testing.T) {
		r := rawDial(t, addr)
		r.option(99, nil)
		if typ, _ := r.reply(99); typ != repErrUnsup {
			t.Fatalf("reply %#x, want NBD_REP_ERR_UNSUP", typ)
		}
		r.option(optStartTLS, nil)
		if typ, _ := r.reply(optStartTLS); typ != repErrUnsup {
			t.Fatalf("STARTTLS reply %#x, want NBD_REP_ERR_UNSUP", typ)
		}
	})
	t.Run("List", func(t *testing.T) {
		r := rawDial(t, addr)
		r.option(optList, nil)
		typ, data := r.reply(optList)
		if typ != repServer || string(data[4:]) != "img" {
			t.Fatalf("reply %#x %q, want the server img", typ, data)
		}
		if typ, _ := r.reply(optList); typ != repAck {
			t.Fatalf("reply %#x, want ack", typ)
		}
		r.option(optList, []byte{1})
		if typ, _ := r.reply(optList); typ != repErrInvalid {
			t.Fatalf("list with data: %#x, want NBD_REP_ERR_INVALID", typ)
		}
	})
	t.Run("InfoUnknownExport", func(t *testing.T) {
		r := rawDial(t, addr)
		r.option(optInfo, goData("nope"))
		if typ, _ := r.reply(optInfo); typ != repErrUnknown {
			t.Fatalf("reply %#x, want NBD_REP_ERR_UNKNOWN", typ)
		}
		r.option(optGo, []byte{0, 0, 0, 9, 'x'}) // name longer than the data
		if typ, _ := r.reply(optGo); typ != repErrInvalid {
			t.Fatalf("malformed go: %#x, want NBD_REP_ERR_INVALID", typ)
		}
		r.option(optAbort, nil)
		if typ, _ := r.reply(optAbort); typ != repAck {
			t.Fatalf("abort: %#x, want ack", typ)
		}
	})
	t.Run("GoStructuredBlockStatus", func(t *testing.T) {
		r := rawDial(t, addr)
		r.option(optSetMetaContext, metaData("img", metaAllocation))
		if typ, _ := r.reply(optSetMetaContext); typ != repErrInvalid {
			t.Fatalf("meta context before structured replies: %#x, want invalid", typ)
		}
		r.option(optStructuredReply, nil)
		if typ, _ := r.reply(optStructuredReply); typ != repAck {
			t.Fatalf("structured reply: %#x", typ)
		}
		r.option(optListMetaContext, metaData("img"))
		if typ, data := r.reply(optListMetaContext); typ != repMetaContext || string(data[4:]) != metaAllocation {
			t.Fatalf("list meta: %#x %q", typ, data)
		}
		r.reply(optListMetaContext) // ack
		r.option(optSetMetaContext, metaData("img", "base:allocation", "qemu:dirty-bitmap:x"))
		typ, data := r.reply(optSetMetaContext)
		if typ != repMetaContext || binary.BigEndian.Uint32(data) != metaAllocationID {
			t.Fatalf("set meta: %#x %q", typ, data)
		}
		r.reply(optSetMetaContext) // ack
		r.option(optGo, goData("img", infoBlockSize, infoName))
		var size int64
		for {
			typ, data := r.reply(optGo)
			if typ == repAck {
				break
			}
			if typ != repInfo {
				t.Fatalf("go: %#x", typ)
			}
			if binary.BigEndian.Uint16(data) == infoExport {
				size = int64(binary.BigEndian.Uint64(data[2:]))
			}
		}
		if size != 1<<20 {
			t.Fatalf("size %d", size)
		}
		var req [requestSize]byte
		putRequest(req[:], request{typ: cmdBlockStatus, cookie: 7, offset: 0, length: 1 << 20})
		r.write(req[:])
		var h [20]byte
		r.read(h[:])
		if binary.BigEndian.Uint32(h[:]) != magicStructured || binary.BigEndian.Uint16(h[6:]) != replyTypeBlockStatus || binary.BigEndian.Uint64(h[8:]) != 7 {
			t.Fatalf("block status reply %x", h)
		}
		payload := make([]byte, binary.BigEndian.Uint32(h[16:]))
		r.read(payload)
		var total uint32
		var flags []uint32
		for p := payload[4:]; len(p) >= 8; p = p[8:] {
			total += binary.BigEndian.Uint32(p)
			flags = append(flags, binary.BigEndian.Uint32(p[4:]))
		}
		if total != 1<<20 || len(flags) != 3 || flags[1] != 0 || flags[0] != 3 {
			t.Fatalf("extents cover %d with flags %v, want hole, data, hole", total, flags)
		}
		// A structured read.
		putRequest(req[:], request{typ: cmdRead, cookie: 8, offset: 65536, length: 5})
		r.write(req[:])
		r.read(h[:])
		data = make([]byte, binary.BigEndian.Uint32(h[16:]))
		r.read(data)
		if binary.BigEndian.Uint16(h[6:]) != replyTypeOffsetData || string(data[8:]) != "hello" {
			t.Fatalf("structured read: %x %q", h, data)
		}
		// Bad magic: the server hangs up.
		r.write(bytes.Repeat([]byte{0xee}, requestSize))
		if _, err := r.nc.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("after bad magic: %v, want EOF", err)
		}
	})
	t.Run("ExportNameFallback", func(t *testing.T) {
		r := rawDial(t, addr)
		r.option(optExportName, []byte("img"))
		var b [10]byte
		r.read(b[:])
		if binary.BigEndian.Uint64(b[:]) != 1<<20 {
			t.Fatalf("export name reply %x", b)
		}
		var req [requestSize]byte
		putRequest(req[:], request{typ: cmdRead, cookie: 1, offset: 65536, length: 5})
		r.write(req[:])
		var h [16 + 5]byte
		r.read(h[:])
		if binary.BigEndian.Uint32(h[:]) != magicSimple || string(h[16:]) != "hello" {
			t.Fatalf("simple read %x", h)
		}
	})
	t.Run("OversizedWriteDisconnects", func(t *testing.T) {
		r := rawDial(t, addr)
		r.option(optExportName, []byte("img"))
		r.read(make([]byte, 10))
		var req [requestSize]byte
		putRequest(req[:], request{typ: cmdWrite, cookie: 1, length: MaxPayload + 1})
		r.write(req[:])
		if _, err := r.nc.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("after an oversized write: %v, want EOF", err)
		}
	})
}

func TestOutOfOrderAndFlush(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk")
	f, err := block.CreateFile(path, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := dial(t, startServer(t, Devices{"d": f}), "d")
	defer c.Close()
	ctx := context.Background()
	errs := make(chan error, 64)
	for i := range 64 {
		go func() {
			p := bytes.Repeat([]byte{byte(i)}, 1<<20)
			if err := c.WriteAt(ctx, p, int64(i)<<20, 0); err != nil {
				errs <- err
				return
			}
			q := make([]byte, 1<<20)
			if err := c.ReadAt(ctx, q, int64(i)<<20); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(p, q) {
				errs <- errors.New("read back differs")
				return
			}
			errs <- nil
		}()
	}
	for range 64 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestServerCloseLeavesNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ln, _ := Listen("127.0.0.1:0")
	s := &Server{Exports: Devices{"d": block.NewMemory(1 << 20)}}
	done := make(chan error)
	go func() { done <- s.Serve(ln) }()
	var clients []*Client
	for range 3 {
		clients = append(clients, dial(t, ln.Addr().String(), "d"))
	}
	idle, _ := net.Dial("tcp", ln.Addr().String()) // stuck in negotiation
	s.Close()
	<-done
	for _, c := range clients {
		c.Close()
	}
	idle.Close()
}

func FuzzParseRequest(f *testing.F) {
	var b [requestSize]byte
	putRequest(b[:], request{typ: cmdRead, cookie: 1, length: 4096})
	f.Add(b[:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := parseRequest(data)
		if err != nil {
			return
		}
		var out [requestSize]byte
		putRequest(out[:], r)
		if !bytes.Equal(out[:], data[:requestSize]) {
			t.Fatalf("round trip %x != %x", out, data[:requestSize])
		}
	})
}

// FuzzNegotiate feeds arbitrary client bytes to the handshake: it must
// end (error or export) without panicking.
func FuzzNegotiate(f *testing.F) {
	seed := binary.BigEndian.AppendUint32(nil, flagFixedNewstyle)
	opt := func(b []byte, o uint32, data []byte) []byte {
		b = binary.BigEndian.AppendUint64(b, magicOpt)
		b = binary.BigEndian.AppendUint32(b, o)
		b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
		return append(b, data...)
	}
	f.Add(opt(seed, optGo, goData("d", infoBlockSize)))
	f.Add(opt(opt(opt(seed, optStructuredReply, nil), optSetMetaContext, metaData("d", metaAllocation)), optInfo, goData("d")))
	f.Add(opt(opt(seed, optList, nil), optExportName, []byte("d")))
	f.Add(opt(seed, optListMetaContext, []byte{0, 0, 0, 1, 'd', 0xff, 0xff, 0xff, 0xff}))
	f.Add(opt(opt(seed, optStartTLS, nil), optGo, goData("d")))
	f.Add(opt(opt(seed, optList, nil), optStartTLS, nil))
	exports := Devices{"d": block.NewMemory(4096)}
	servers := []*Server{
		{Exports: exports, Logger: slog.New(slog.DiscardHandler)},
		{Exports: exports, Logger: slog.New(slog.DiscardHandler), TLS: &tls.Config{}},
		{Exports: exports, Logger: slog.New(slog.DiscardHandler), TLS: &tls.Config{}, RequireTLS: true},
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		c := &conn{
			// The last byte picks the server: no TLS, TLS offered, or
			// TLS required.
			s:   servers[int(in[len(in)-1])%len(servers)],
			nc:  fakeConn{},
			log: slog.New(slog.DiscardHandler),
		}
		c.br = newReader(in)
		c.bw = newWriter()
		dev, _, err := negotiateOn(context.Background(), c)
		if err == nil && dev == nil {
			t.Fatal("negotiation ended without an export or an error")
		}
		if dev != nil {
			dev.Close()
		}
	})
}

// BenchmarkWrite4K runs 4 KiB writes, 32 in flight, from the package's
// client through the server into an in-memory device (which takes them
// inline on the server's reading goroutine) over loopback TCP.
func BenchmarkWrite4K(b *testing.B) {
	const size = 64 << 20
	addr := startServer(b, Devices{"": block.NewMemory(size)})
	c := dial(b, addr, "")
	defer c.Close()
	b.SetBytes(4096)
	b.SetParallelism(32 / runtime.GOMAXPROCS(0))
	b.RunParallel(func(pb *testing.PB) {
		p := make([]byte, 4096)
		var i int64
		for pb.Next() {
			i = (i + 7919) % (size / 4096)
			if err := c.WriteAt(context.Background(), p, i*4096, 0); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
