package nbd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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

// ErrUnauthenticated is returned by an Exporter when the export needs a
// client that proved who it is (Peer.Authenticated); clients see
// NBD_REP_ERR_POLICY.
var ErrUnauthenticated = errors.New("nbd: authentication required")

// Peer is the client of a connection, as the Exporter sees it through
// PeerFrom during negotiation.
type Peer struct {
	Remote string
	TLS    bool // upgraded with STARTTLS
	// Certificate is the client's certificate when it presented one
	// that the server's TLS.ClientCAs verified; nil otherwise.
	Certificate *x509.Certificate
}

// Authenticated reports whether the client proved who it is.
func (p Peer) Authenticated() bool { return p.Certificate != nil }

type peerKey struct{}

// PeerFrom returns the client a server's call to an Exporter is made
// for, or the zero Peer outside one.
func PeerFrom(ctx context.Context) Peer {
	p, _ := ctx.Value(peerKey{}).(Peer)
	return p
}

func withPeer(ctx context.Context, p Peer) context.Context {
	return context.WithValue(ctx, peerKey{}, p)
}

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
	return block.NopCloser(d[name]), info, nil
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
	// MaxInFlight bounds the bytes of request payloads and read replies
	// one connection holds (default DefaultMaxInFlight): past it the
	// server stops reading that client's requests until replies go out.
	MaxInFlight int64
	// MaxTotalInFlight bounds the same bytes across every connection
	// (default DefaultMaxTotalInFlight).
	MaxTotalInFlight int64
	// MaxConnections bounds the connections served at once; the server
	// closes the ones past it as it accepts them (0: no bound).
	MaxConnections int
	// WriteTimeout is how long one write of replies may take (default
	// DefaultWriteTimeout): a client that stops reading its replies is
	// dropped after it.
	WriteTimeout time.Duration

	once   sync.Once
	total  *budget
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
		if s.MaxInFlight <= 0 {
			s.MaxInFlight = DefaultMaxInFlight
		}
		if s.MaxTotalInFlight <= 0 {
			s.MaxTotalInFlight = DefaultMaxTotalInFlight
		}
		if s.WriteTimeout <= 0 {
			s.WriteTimeout = DefaultWriteTimeout
		}
		s.total = newBudget(s.MaxTotalInFlight)
	})
}

// Defaults of the Server's bounds.
const (
	DefaultMaxInFlight      = 64 << 20
	DefaultMaxTotalInFlight = 1 << 30
	DefaultWriteTimeout     = 30 * time.Second
)

// InFlight is the number of bytes of request payloads and read replies
// the server holds across its connections.
func (s *Server) InFlight() int64 {
	s.init()
	return s.total.inUse()
}

// Conns is the number of connections the server is serving.
func (s *Server) Conns() int {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
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
		if s.MaxConnections > 0 && len(s.conns) >= s.MaxConnections {
			s.mu.Unlock()
			s.Logger.Warn("nbd connection refused: too many connections", keyRemote, c.RemoteAddr().String(), "max", s.MaxConnections)
			c.Close()
			continue
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
