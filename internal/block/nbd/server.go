// Package nbd serves block.Devices over the Network Block Device protocol
// and holds a small client for them.
//
// The server follows doc/proto.md of the NetworkBlockDevice project:
// fixed newstyle negotiation (OPT_GO, OPT_INFO, OPT_LIST, OPT_ABORT,
// OPT_EXPORT_NAME, OPT_STRUCTURED_REPLY, OPT_LIST/SET_META_CONTEXT with
// base:allocation, and OPT_STARTTLS when the server has a TLS
// configuration, optionally required; anything else gets
// NBD_REP_ERR_UNSUP), then READ, WRITE, FLUSH, TRIM, WRITE_ZEROES (FAST_ZERO,
// NO_HOLE), CACHE, BLOCK_STATUS and DISC with FUA. A connection runs
// many requests at once on a pool of workers; replies go out as each
// finishes, matched by cookie. Reads a device serves from memory
// (block.MemReader) and writes it takes without waiting
// (block.InlineWriter) run on the connection's reading goroutine
// instead, and their replies go out together once no further request
// is buffered. Payloads are bounded by MaxPayload.
//
// Only cmd/usher and the block layers' tests import this package.
package nbd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/block"
)

// ErrUnknownExport is returned by an Exporter for a name it does not
// serve; clients see NBD_REP_ERR_UNKNOWN.
var ErrUnknownExport = errors.New("nbd: unknown export")

// ErrExportBusy is returned by an Exporter when the export cannot take
// another client (a private image with a writer); clients see
// NBD_REP_ERR_POLICY.
var ErrExportBusy = errors.New("nbd: export is busy")

// ExportInfo describes an export.
type ExportInfo struct {
	Name, Description string
	Size              int64
	ReadOnly          bool
	// MultiConn: every connection to this export sees the same data and
	// a flush on one covers writes on all (NBD_FLAG_CAN_MULTI_CONN).
	MultiConn bool
}

// Exporter is what a Server serves. Implementations are safe for
// concurrent use.
type Exporter interface {
	// Info describes the export name, or fails with ErrUnknownExport.
	Info(ctx context.Context, name string) (ExportInfo, error)
	// Open opens the export name for one connection; the server closes
	// the device when the connection ends. It fails with
	// ErrUnknownExport or ErrExportBusy; other errors are logged and
	// the client sees a generic refusal.
	Open(ctx context.Context, name string, remote string) (block.Device, ExportInfo, error)
	// List returns the exports a client may see with NBD_OPT_LIST.
	List(ctx context.Context) ([]ExportInfo, error)
}

// Devices is an Exporter of fixed, shared devices by name. Every
// connection shares the device, so exports advertise CAN_MULTI_CONN;
// closing a connection does not close the device.
type Devices map[string]block.Device

// Info implements Exporter.
func (d Devices) Info(_ context.Context, name string) (ExportInfo, error) {
	dev, ok := d[name]
	if !ok {
		return ExportInfo{}, fmt.Errorf("%w %q", ErrUnknownExport, name)
	}
	return ExportInfo{Name: name, Size: dev.Size(), ReadOnly: dev.ReadOnly(), MultiConn: true}, nil
}

// Open implements Exporter.
func (d Devices) Open(ctx context.Context, name, _ string) (block.Device, ExportInfo, error) {
	info, err := d.Info(ctx, name)
	if err != nil {
		return nil, info, err
	}
	return noClose{d[name]}, info, nil
}

// List implements Exporter.
func (d Devices) List(ctx context.Context) ([]ExportInfo, error) {
	var out []ExportInfo
	for name := range d {
		info, _ := d.Info(ctx, name)
		out = append(out, info)
	}
	return out, nil
}

type noClose struct{ block.Device }

func (noClose) Close() error { return nil }

// Log attribute keys.
const (
	keyRemote = "remote"
	keyExport = "export"
	keyErr    = "err"
)

// Server serves NBD connections. Set the fields before Serve.
type Server struct {
	Exports Exporter
	Logger  *slog.Logger
	// Workers is the number of requests one connection may have in
	// progress (default 16).
	Workers int
	// HandshakeTimeout bounds negotiation (default 30s).
	HandshakeTimeout time.Duration
	// TLS, when set, lets a client upgrade its connection with
	// NBD_OPT_STARTTLS; without it STARTTLS gets NBD_REP_ERR_UNSUP.
	TLS *tls.Config
	// RequireTLS (with TLS) refuses every option but STARTTLS and ABORT
	// with NBD_REP_ERR_TLS_REQD until the client has upgraded, and
	// drops a client that sends NBD_OPT_EXPORT_NAME before (the spec's
	// FORCEDTLS mode).
	RequireTLS bool

	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	lns    map[net.Listener]struct{}
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
	closed bool
}

func (s *Server) init() {
	s.once.Do(func() {
		s.ctx, s.cancel = context.WithCancel(context.Background())
		s.lns = make(map[net.Listener]struct{})
		s.conns = make(map[net.Conn]struct{})
		if s.Logger == nil {
			s.Logger = slog.New(slog.DiscardHandler)
		}
		if s.Workers <= 0 {
			s.Workers = 16
		}
		if s.HandshakeTimeout <= 0 {
			s.HandshakeTimeout = 30 * time.Second
		}
	})
}

// Listen listens on addr: "unix:/path/sock" for a unix socket, else a
// TCP "host:port" (port 10809 when omitted). A stale unix socket file
// is removed first.
func Listen(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(path)
		}
		return net.Listen("unix", path)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(strings.Trim(addr, "[]"), strconv.Itoa(DefaultPort))
	}
	return net.Listen("tcp", addr)
}

// Serve accepts connections on ln until Close (returning nil) or an
// accept error. It closes ln.
func (s *Server) Serve(ln net.Listener) error {
	s.init()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lns, ln)
		s.mu.Unlock()
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.serveConn(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// Close stops the listeners, closes every connection and waits for
// their goroutines to end. Requests in progress see a cancelled context.
func (s *Server) Close() error {
	s.init()
	s.mu.Lock()
	s.closed = true
	s.cancel()
	for ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

func (s *Server) serveConn(nc net.Conn) {
	defer nc.Close()
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	log := s.Logger.With(keyRemote, nc.RemoteAddr().String())
	c := &conn{s: s, nc: nc, log: log}
	nc.SetDeadline(time.Now().Add(s.HandshakeTimeout))
	dev, info, err := c.negotiate(s.ctx)
	if err != nil {
		if !errors.Is(err, errAbort) {
			log.Info("nbd negotiation ended", keyErr, err)
		}
		return
	}
	nc.SetDeadline(time.Time{})
	defer dev.Close()
	log = log.With(keyExport, info.Name)
	c.log = log
	log.Debug("nbd client attached", "size", info.Size, "readonly", info.ReadOnly)
	if err := c.transmit(s.ctx, dev, info); err != nil && s.ctx.Err() == nil {
		log.Info("nbd connection ended", keyErr, err)
	}
}

func (n noClose) TryReadAt(p []byte, off int64) bool { return block.TryReadAt(n.Device, p, off) }

func (n noClose) TryWriteAt(p []byte, off int64) bool { return block.TryWriteAt(n.Device, p, off) }

func (n noClose) TrySlices(off, length int64, dst [][]byte) ([][]byte, bool) {
	return block.TrySlices(n.Device, off, length, dst)
}

func (n noClose) Extents(ctx context.Context, off, length int64, dst []block.Extent) ([]block.Extent, error) {
	return block.Extents(ctx, n.Device, off, length, dst)
}
