// Package streamrole assembles usher stream, the NBD image streaming
// server, from a Config: the image store's versions as exports (through
// the shared RAM cache, with per-connection server-disk write caches),
// the NBD server with its bounds and TLS, and its /metrics. It parses no
// flags: `usher stream`, the benches (internal/blockbench) and tests
// build the same stack through it. Only commands, benches and tests
// import it.
package streamrole

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/block/imageexport"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/block/ramcache"
	"github.com/usher-vdi/usher/internal/block/writecache"
	"github.com/usher-vdi/usher/internal/nbdserve"
	"github.com/usher-vdi/usher/internal/tlsconf"
)

// Defaults of Config's zero fields (and of usher stream's flags).
const (
	DefaultListen              = "127.0.0.1:10809" // nbd.DefaultPort on loopback
	DefaultRAMCache            = 1 << 30
	DefaultWriteCacheMax       = 32 << 30
	DefaultWriteCacheMaxTarget = 2 << 30
	DefaultWorkers             = 16
	DefaultMaxConnections      = 1024
	DefaultMaxInFlight         = 64 << 20
	DefaultMaxTotalInFlight    = 1 << 30
	DefaultWriteTimeout        = nbd.DefaultWriteTimeout
)

// Who needs a verified client certificate (Config.Auth).
const (
	AuthWrites = "writes" // maintenance versions (the default)
	AuthAll    = "all"    // every export, and the list of them
	AuthNone   = "none"   // nobody: anyone may open a maintenance version
)

// Config configures a stream server. Zero fields take the Default...
// values, except where said.
type Config struct {
	// Store is the image store whose versions are served (required).
	Store *image.Store
	// Listen is the NBD address: host:port or unix:/path. One off
	// loopback needs RequireTLS or InsecureListen.
	Listen        string
	MetricsListen string // "" serves no /metrics
	// InsecureListen allows Listen off loopback without RequireTLS.
	InsecureListen bool
	// RAMCache is the bytes of the RAM cache of image blocks every
	// connection shares; negative: none.
	RAMCache int64
	// WriteCacheDir, when set, gives each connection to a shared
	// version a server-disk write cache there, deleted when it
	// disconnects (made 0700 when missing); else such exports are read
	// only. WriteCacheMax bounds them together, WriteCacheMaxTarget
	// one connection's.
	WriteCacheDir                      string
	WriteCacheMax, WriteCacheMaxTarget int64
	// TLS, when set, is offered to clients (NBD_OPT_STARTTLS; with
	// RequireTLS, before any other option); its ClientCAs verify the
	// client certificates Auth asks for. Cert, when set, is TLS's
	// certificate, which /metrics serves too and ReloadTLS reads again.
	TLS        *tls.Config
	RequireTLS bool
	Cert       *tlsconf.Reloader
	// Auth is AuthWrites, AuthAll or AuthNone (default AuthWrites).
	Auth string
	// Per-connection workers, and the bounds of the NBD server
	// (nbd.Server's); MaxConnections negative: no bound.
	Workers                       int
	MaxConnections                int
	MaxInFlight, MaxTotalInFlight int64
	WriteTimeout                  time.Duration
	Logger                        *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Store == nil {
		return c, errors.New("stream: no image store")
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.RAMCache == 0 {
		c.RAMCache = DefaultRAMCache
	}
	if c.WriteCacheMax == 0 {
		c.WriteCacheMax = DefaultWriteCacheMax
	}
	if c.WriteCacheMaxTarget == 0 {
		c.WriteCacheMaxTarget = DefaultWriteCacheMaxTarget
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxTotalInFlight == 0 {
		c.MaxTotalInFlight = DefaultMaxTotalInFlight
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.Auth == "" {
		c.Auth = AuthWrites
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.Auth != AuthWrites && c.Auth != AuthAll && c.Auth != AuthNone:
		return c, fmt.Errorf("stream: auth %q is not writes, all or none", c.Auth)
	case c.Auth == AuthAll && (c.TLS == nil || c.TLS.ClientCAs == nil):
		return c, errors.New("stream: auth all needs TLS with client CAs")
	case c.RequireTLS && c.TLS == nil:
		return c, errors.New("stream: RequireTLS without TLS")
	case !tlsconf.LoopbackAddr(c.Listen) && !c.RequireTLS && !c.InsecureListen:
		return c, fmt.Errorf("stream: %s is not a loopback address: serve it with RequireTLS, or set InsecureListen", c.Listen)
	case c.WriteCacheMax < 0 || c.WriteCacheMaxTarget < 0 || c.Workers < 0 || c.MaxInFlight < 0 || c.MaxTotalInFlight < 0 || c.WriteTimeout < 0:
		return c, errors.New("stream: a negative size, count or timeout")
	}
	if c.MaxConnections < 0 {
		c.MaxConnections = 0 // nbd.Server: no bound
	}
	return c, nil
}

// Images returns the exports of cfg's image store as the stream serves
// them (RAM cache, server-disk write caches and their bounds, metered in
// meters when set), for a caller that serves or opens them itself (a
// bench). It makes WriteCacheDir. Close it after use.
func Images(cfg Config, meters *meter.Registry) (*imageexport.Images, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return images(cfg, meters)
}

func images(cfg Config, meters *meter.Registry) (*imageexport.Images, error) {
	if cfg.WriteCacheDir != "" {
		if err := os.MkdirAll(cfg.WriteCacheDir, 0o700); err != nil {
			return nil, nbdserve.Field("WriteCacheDir", err)
		}
	}
	exports := &imageexport.Images{Store: cfg.Store, WriteCacheDir: cfg.WriteCacheDir, Meters: meters, Logger: cfg.Logger,
		WriteCacheMax: cfg.WriteCacheMaxTarget, WriteCacheQuota: writecache.NewQuota(cfg.WriteCacheMax),
		AllowAnonymousWrites: cfg.Auth == AuthNone, RequireAuth: cfg.Auth == AuthAll}
	if cfg.RAMCache > 0 {
		exports.Cache = ramcache.New(cfg.RAMCache, 0)
	}
	return exports, nil
}

// NBDServer returns the NBD server of cfg over exports, with the
// stream's bounds and TLS.
func NBDServer(cfg Config, exports nbd.Exporter) (*nbd.Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return nbdServer(cfg, exports), nil
}

func nbdServer(cfg Config, exports nbd.Exporter) *nbd.Server {
	return &nbd.Server{Exports: exports, Logger: cfg.Logger, Workers: cfg.Workers, TLS: cfg.TLS, RequireTLS: cfg.RequireTLS,
		MaxConnections: cfg.MaxConnections, MaxInFlight: cfg.MaxInFlight, MaxTotalInFlight: cfg.MaxTotalInFlight, WriteTimeout: cfg.WriteTimeout}
}

// Stream is a running stream server.
type Stream struct {
	cfg     Config
	exports *imageexport.Images
	// The listeners and run loop: Run, Addr, MetricsAddr and Metrics
	// are theirs.
	*nbdserve.Server
}

// Open builds the stream of cfg and opens its listeners; Run serves it.
// A bad Config is an error naming what is wrong; errors of a field's
// value (a listen address, the write cache directory) are
// nbdserve.FieldErrors.
func Open(ctx context.Context, cfg Config) (*Stream, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	var reg meter.Registry
	exports, err := images(cfg, &reg)
	if err != nil {
		return nil, err
	}
	if cfg.Auth == AuthWrites && (cfg.TLS == nil || cfg.TLS.ClientCAs == nil) {
		cfg.Logger.Info("maintenance versions cannot be opened: they need a client certificate and there is no --tls-client-ca")
	}
	srv, err := nbdserve.Listen(nbdserve.Config{Listen: cfg.Listen, MetricsListen: cfg.MetricsListen, MetricsCert: cfg.Cert,
		NBD: nbdServer(cfg, exports), Meters: &reg, Logger: cfg.Logger})
	if err != nil {
		exports.Close()
		return nil, err
	}
	return &Stream{cfg: cfg, exports: exports, Server: srv}, nil
}

// Close stops serving and closes the exports.
func (s *Stream) Close() error { return errors.Join(s.Server.Close(), s.exports.Close()) }

// ReloadTLS reads Config.Cert's files again (nothing without one).
func (s *Stream) ReloadTLS() error {
	if s.cfg.Cert == nil {
		return nil
	}
	return s.cfg.Cert.Reload()
}

// FieldError is an error of one Config field (Field, as Go spells it),
// for a command to name its flag.
type FieldError = nbdserve.FieldError
