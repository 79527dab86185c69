// Package hostcacherole assembles usher hostcache, a host's read cache
// (IntelliCache), from a Config: the persistent cache of blocks in a
// directory (internal/block/hostcache), every VM of the host as an
// export over it (internal/block/hostexport), the local NBD endpoint and
// its /metrics. It parses no flags: `usher hostcache`, the benches and
// tests build the same stack through it. Only commands, benches and
// tests import it.
package hostcacherole

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-vdi/usher/internal/block/hostcache"
	"github.com/usher-vdi/usher/internal/block/hostexport"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/nbdserve"
	"github.com/usher-vdi/usher/internal/tlsconf"
)

// Defaults of Config's zero fields (and of usher hostcache's flags).
const (
	DefaultListen          = "unix:/run/usher/hostcache.sock"
	DefaultSize            = 10 << 30
	DefaultBlockSize       = hostcache.DefaultBlockSize
	DefaultUpstreamTimeout = 30 * time.Second
	DefaultRecordFor       = 2 * time.Minute
)

// Where VM writes go (Config.Writes), and the export prefix that warms
// an image (WarmPrefix+IMAGE, for `usher hostcache warm`).
const (
	WritesLocal    = hostexport.WritesLocal
	WritesUpstream = hostexport.WritesUpstream
	WarmPrefix     = hostexport.WarmPrefix
)

// Config configures a host cache.
type Config struct {
	// Upstream is the stream, without an export: nbd://HOST[:PORT] or
	// nbd+unix:///?socket=PATH (nbds for TLS); each VM's image is its
	// export (required). Dialer dials it (its TLS).
	Upstream string
	Dialer   nbd.Dialer
	// Dir is the cache directory on local disk (required): blocks/,
	// versions/ (the versions last seen) and writes/ (VM overlays).
	Dir string
	// Size and BlockSize are the cache's bytes of blocks and its unit
	// (defaults DefaultSize, DefaultBlockSize).
	Size      int64
	BlockSize int64
	// VMs maps each VM's export name to its image (IMAGE or
	// IMAGE@VERSION); at least one.
	VMs map[string]string
	// Writes is WritesLocal (default) or WritesUpstream.
	Writes string
	// UpstreamTimeout bounds an upstream read (default
	// DefaultUpstreamTimeout).
	UpstreamTimeout time.Duration
	// RecordDir, when set, records each VM boot's reads of its image
	// (its first RecordFor, default DefaultRecordFor) in RecordDir/VM.trace.
	RecordDir string
	RecordFor time.Duration
	// Listen is the local NBD endpoint (default DefaultListen).
	Listen        string
	MetricsListen string            // "": no /metrics
	MetricsCert   *tlsconf.Reloader // nil: /metrics in clear HTTP
	Logger        *slog.Logger
}

func (c Config) withDefaults() (Config, *url.URL, error) {
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.Writes == "" {
		c.Writes = WritesLocal
	}
	if c.UpstreamTimeout == 0 {
		c.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if c.RecordFor == 0 {
		c.RecordFor = DefaultRecordFor
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.Upstream == "":
		return c, nil, errors.New("hostcache: no upstream")
	case c.Dir == "":
		return c, nil, errors.New("hostcache: no cache directory")
	case len(c.VMs) == 0:
		return c, nil, errors.New("hostcache: no VM")
	case c.Writes != WritesLocal && c.Writes != WritesUpstream:
		return c, nil, fmt.Errorf("hostcache: writes %q is not local or upstream", c.Writes)
	case c.UpstreamTimeout < 0 || c.RecordFor < 0 || c.Size < 0 || c.BlockSize < 0:
		return c, nil, errors.New("hostcache: a negative size or duration")
	}
	u, err := url.Parse(c.Upstream)
	if err != nil || !strings.HasPrefix(u.Scheme, "nbd") || strings.Trim(u.Path, "/") != "" {
		return c, nil, fmt.Errorf("hostcache: upstream %q is not nbd://HOST[:PORT] or nbd+unix:///?socket=PATH (or nbds) without an export", c.Upstream)
	}
	return c, u, nil
}

// HostCache is a running host cache.
type HostCache struct {
	cfg   Config
	cache *hostcache.Cache
	hx    *hostexport.Exports
	// The listeners and run loop: Run, Addr, MetricsAddr and Metrics
	// are theirs.
	*nbdserve.Server
}

// Open opens the cache directory (a second daemon on it is refused),
// reaches each VM's image (a wrong image name fails now, not at a VM's
// boot) and opens the local endpoint; Run serves it. A bad Config is an
// error naming what is wrong; errors of Dir, RecordDir and Listen are
// nbdserve.FieldErrors.
func Open(ctx context.Context, cfg Config) (_ *HostCache, err error) {
	cfg, u, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	h := &HostCache{cfg: cfg}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	if h.cache, err = hostcache.Open(filepath.Join(cfg.Dir, "blocks"), hostcache.Options{Size: cfg.Size, BlockSize: int(cfg.BlockSize), Logger: log}); err != nil {
		return nil, nbdserve.Field("Dir", err)
	}
	stateDir := filepath.Join(cfg.Dir, "versions")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, nbdserve.Field("Dir", err)
	}
	writesDir := filepath.Join(cfg.Dir, "writes")
	if cfg.Writes == WritesLocal {
		if err := os.MkdirAll(writesDir, 0o700); err != nil {
			return nil, nbdserve.Field("Dir", err)
		}
	}
	if cfg.RecordDir != "" {
		if err := os.MkdirAll(cfg.RecordDir, 0o700); err != nil {
			return nil, nbdserve.Field("RecordDir", err)
		}
	}
	var reg meter.Registry
	if h.hx, err = hostexport.New(hostexport.Config{
		Dial: func(ctx context.Context, export string) (*nbd.Client, error) {
			eu := *u
			eu.Path = "/" + export
			return cfg.Dialer.DialURI(ctx, eu.String())
		},
		Cache: h.cache, VMs: cfg.VMs, Writes: cfg.Writes, WritesDir: writesDir,
		Upstream: hostcache.UpstreamOptions{Timeout: cfg.UpstreamTimeout}, RecordDir: cfg.RecordDir, RecordFor: cfg.RecordFor,
		StateDir: stateDir, Meters: &reg, Logger: log,
	}); err != nil {
		return nil, err
	}
	if err := h.hx.Prepare(ctx); err != nil {
		return nil, err
	}
	st := h.cache.Stats()
	log.Info("host cache ready", "dir", cfg.Dir, "blocks", st.Slots, "block_size", h.cache.BlockSize(), "recovered", st.Recovered,
		"vms", len(cfg.VMs), "writes", cfg.Writes)
	if h.Server, err = nbdserve.Listen(nbdserve.Config{Listen: cfg.Listen, MetricsListen: cfg.MetricsListen, MetricsCert: cfg.MetricsCert,
		NBD: &nbd.Server{Exports: h.hx, Logger: log}, Meters: &reg, Collectors: []prometheus.Collector{h.hx}, Logger: log}); err != nil {
		return nil, err
	}
	return h, nil
}

// Close stops serving and closes the exports and the cache.
func (h *HostCache) Close() error {
	var errs []error
	if h.Server != nil {
		errs = append(errs, h.Server.Close())
	}
	if h.hx != nil {
		errs = append(errs, h.hx.Close())
	}
	if h.cache != nil {
		errs = append(errs, h.cache.Close())
	}
	return errors.Join(errs...)
}

// Cache is the host's cache of blocks.
func (h *HostCache) Cache() *hostcache.Cache { return h.cache }

// ReloadTLS reads Config.MetricsCert's files again (nothing without
// one).
func (h *HostCache) ReloadTLS() error {
	if h.cfg.MetricsCert == nil {
		return nil
	}
	return h.cfg.MetricsCert.Reload()
}

// FieldError is an error of one Config field (Field, as Go spells it),
// for a command to name its flag.
type FieldError = nbdserve.FieldError
