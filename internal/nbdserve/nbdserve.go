// Package nbdserve runs what the block roles (usher stream, target and
// hostcache) share: an NBD server on its listener, and Prometheus
// /metrics of the role's layers on a second one, over TLS when given a
// certificate. The role packages (internal/streamrole, targetrole,
// hostcacherole) build a Server each; nothing else imports it but
// their tests.
package nbdserve

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/tlsconf"
)

// Config configures a Server.
type Config struct {
	// Listen is the NBD address: host:port, or unix:/path (a missing
	// directory is made, 0755, for the local clients that connect as
	// other users). Required.
	Listen string
	// MetricsListen, when set, serves GET /metrics there: Meters, the
	// NBD server's bytes in flight and connections, and Collectors.
	MetricsListen string
	// MetricsCert, when set, serves /metrics over TLS with it (and
	// HSTS).
	MetricsCert *tlsconf.Reloader
	// NBD is the server to run; its Exports are the role's. Required.
	NBD        *nbd.Server
	Meters     *meter.Registry // nil: none
	Collectors []prometheus.Collector
	Logger     *slog.Logger // default slog.Default()
}

// FieldError is an error in, or caused by, one field of a role's
// Config: the command names its flag instead.
type FieldError struct {
	Field string // the Config field, as Go spells it
	Err   error
}

func (e *FieldError) Error() string { return strings.ToLower(e.Field) + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Field wraps err as an error of field (nil stays nil).
func Field(field string, err error) error {
	if err == nil {
		return nil
	}
	return &FieldError{Field: field, Err: err}
}

// Server is a role's NBD listener, and its metrics listener.
type Server struct {
	cfg     Config
	log     *slog.Logger
	ln, mln net.Listener
	reg     *prometheus.Registry
}

// Listen opens cfg's listeners; Run serves them, Close closes them.
// Errors are FieldErrors of Listen or MetricsListen.
func Listen(cfg Config) (*Server, error) {
	if cfg.NBD == nil {
		return nil, errors.New("nbdserve: no NBD server")
	}
	if cfg.Listen == "" {
		return nil, Field("Listen", errors.New("no address"))
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.reg = prometheus.NewRegistry()
	if cfg.Meters != nil {
		s.reg.MustRegister(cfg.Meters)
	}
	srv := cfg.NBD
	s.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "usher_nbd_bytes_in_flight", Help: "Bytes of NBD requests and replies the server holds."},
			func() float64 { return float64(srv.InFlight()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "usher_nbd_connections", Help: "NBD connections being served."},
			func() float64 { return float64(srv.Conns()) }))
	s.reg.MustRegister(cfg.Collectors...)
	if path, ok := strings.CutPrefix(cfg.Listen, "unix:"); ok {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, Field("Listen", err)
		}
	}
	var err error
	if s.ln, err = nbd.Listen(cfg.Listen); err != nil {
		return nil, Field("Listen", err)
	}
	if cfg.MetricsListen != "" {
		if s.mln, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
			s.ln.Close()
			return nil, err
		}
	}
	return s, nil
}

// Addr is the NBD listener's address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// MetricsAddr is the metrics listener's address, "" without one.
func (s *Server) MetricsAddr() string {
	if s.mln == nil {
		return ""
	}
	return s.mln.Addr().String()
}

// Metrics is the registry /metrics serves.
func (s *Server) Metrics() *prometheus.Registry { return s.reg }

// Run serves until ctx is done (nil) or the NBD server fails (its
// error); then it closes the NBD server and the metrics listener.
func (s *Server) Run(ctx context.Context) error {
	srv := s.cfg.NBD
	s.log.Info("nbd server listening", "addr", s.Addr(), "tls", srv.TLS != nil, "require_tls", srv.RequireTLS,
		"client_certs", srv.TLS != nil && srv.TLS.ClientCAs != nil)
	stopMetrics := func() {}
	if s.mln != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
		stopMetrics = ServeHTTP(s.mln, mux, s.cfg.MetricsCert, s.log)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(s.ln) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	srv.Close()
	stopMetrics()
	if err == nil {
		err = <-errc
	}
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	s.log.Info("nbd server stopped")
	return err
}

// Close closes the listeners (after Run, it has nothing left to do).
func (s *Server) Close() error {
	s.cfg.NBD.Close()
	err := s.ln.Close()
	if s.mln != nil {
		s.mln.Close()
	}
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// ServeHTTP serves h on ln, over TLS with r's certificate (and HSTS)
// when r is set, until the returned function stops it.
func ServeHTTP(ln net.Listener, h http.Handler, r *tlsconf.Reloader, log *slog.Logger) (stop func()) {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	if r != nil {
		hs.Handler = tlsconf.WithHSTS(h)
		ln = tls.NewListener(ln, r.ServerConfig())
	}
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(ln) }()
	return func() { hs.Close(); <-done }
}
