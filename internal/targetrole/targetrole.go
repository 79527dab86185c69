// Package targetrole assembles usher target, the device-side proxy, from
// a Config: the upstream stream (dialled again by the one re-dial rule,
// hostexport.Redial, that refuses another version of the image), the
// write cache over it (NewCache: RAM, RAM with an overflow file, or a
// cache file on disk), the local NBD endpoint and its /metrics. It
// parses no flags: `usher target`, the benches (internal/blockbench,
// which build their device-side stacks with NewCache) and tests build
// the same stack through it. Only commands, benches and tests import it.
package targetrole

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/usher-vdi/usher/internal/block/hostcache"
	"github.com/usher-vdi/usher/internal/block/hostexport"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/nbdserve"
	"github.com/usher-vdi/usher/internal/tlsconf"
)

// Defaults of Config's zero fields (and of usher target's flags).
const (
	DefaultListen        = "unix:/run/usher/target.sock"
	DefaultMode          = ModeRAMOverflow
	DefaultReconnectWait = 2 * time.Minute
)

// Config configures a target.
type Config struct {
	// Upstream is the stream's export: nbd://HOST[:PORT]/IMAGE or
	// nbd+unix:///IMAGE?socket=PATH, nbds:// or nbds+unix:// for TLS
	// (required); Dialer dials it (its TLS).
	Upstream string
	Dialer   nbd.Dialer
	// Cache is the write cache (Mode default DefaultMode); its Identity
	// is set by Open, from the upstream.
	Cache CacheConfig
	// Listen is the local NBD endpoint (default DefaultListen); on a
	// loopback address whose interface is down (an initramfs), Open
	// brings lo up.
	Listen        string
	MetricsListen string            // "": no /metrics
	MetricsCert   *tlsconf.Reloader // nil: /metrics in clear HTTP
	// Ready, when set, is removed first and created (holding the NBD
	// address) once the endpoint listens.
	Ready string
	// ReconnectWait is how long a read waits for a lost upstream
	// before the device gets an I/O error (default DefaultReconnectWait).
	ReconnectWait time.Duration
	Logger        *slog.Logger
}

// Target is a running target.
type Target struct {
	cfg   Config
	conn  *hostcache.Upstream
	cache *Cache
	reg   meter.Registry
	// The listeners and run loop: Run, Addr, MetricsAddr and Metrics
	// are theirs.
	*nbdserve.Server
}

// Open dials the upstream, builds the cache over it and opens the local
// endpoint; Run serves it. Errors: a bad Config names what is wrong;
// the upstream's are "upstream: ..."; a field's value (Cache.Path,
// Cache.Persist with ErrStale, Listen, Ready) an nbdserve.FieldError.
func Open(ctx context.Context, cfg Config) (_ *Target, err error) {
	if cfg.Upstream == "" {
		return nil, errors.New("target: no upstream")
	}
	if cfg.Cache.Mode == "" {
		cfg.Cache.Mode = DefaultMode
	}
	if err := cfg.Cache.check(); err != nil {
		return nil, err
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.ReconnectWait <= 0 {
		cfg.ReconnectWait = DefaultReconnectWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger
	cfg.Cache.Logger = log
	if cfg.Ready != "" {
		// An earlier run's would say ready before this one serves.
		if err := os.Remove(cfg.Ready); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, nbdserve.Field("Ready", err)
		}
	}
	t := &Target{cfg: cfg}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	up, err := cfg.Dialer.DialURI(ctx, cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	export := cfg.Upstream
	if u, err := url.Parse(cfg.Upstream); err == nil {
		export = strings.TrimPrefix(u.Path, "/")
	}
	// The cache holds writes over what the upstream serves now: a
	// connection dialled again (the stream restarted) must serve the
	// same version of the same image, or the device's reads would mix
	// two images.
	identity, err := hostexport.Identity(ctx, export, up)
	if err != nil {
		up.Close()
		return nil, fmt.Errorf("upstream: %w", err)
	}
	t.conn = hostcache.NewUpstream(up, hostexport.Redial(export, identity, hostexport.Identity, func(ctx context.Context) (*nbd.Client, error) {
		return cfg.Dialer.DialURI(ctx, cfg.Upstream)
	}), hostcache.UpstreamOptions{Wait: cfg.ReconnectWait, Logger: log, Name: cfg.Upstream})
	cfg.Cache.Identity = identity
	if t.cache, err = NewCache(t.conn, cfg.Cache, &t.reg); err != nil {
		return nil, err
	}
	if t.cache.Discarded != "" {
		log.Warn("persistent cache discarded: the upstream changed", "path", cfg.Cache.Path, "reason", t.cache.Discarded)
	}
	log.Info("target cache ready", "upstream", cfg.Upstream, "cache", cfg.Cache.Mode, "size", up.Size(), "block_status", up.HasBlockStatus())
	var extra []prometheus.Collector
	if ram := t.cache.RAM; ram != nil {
		extra = append(extra, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "usher_target_writes_refused_total",
			Help: "Device writes the write cache refused (ENOSPC to the device): its RAM budget, and its overflow file if it has one, are full.",
		}, func() float64 { return float64(ram.Full.Load()) }))
	}
	// One cache per target: a second local connection would share it,
	// so the export is coherent. The default export, and the upstream's
	// name for it: Debian's nbd-client initramfs hook
	// (nbdroot=127.0.0.1:PORT/EXPORT) needs a name.
	exports := nbd.Devices{"": t.cache}
	if export != "" && export != cfg.Upstream {
		exports[export] = t.cache
	}
	if err := loopbackUp(cfg.Listen, log); err != nil {
		return nil, nbdserve.Field("Listen", err)
	}
	if t.Server, err = nbdserve.Listen(nbdserve.Config{Listen: cfg.Listen, MetricsListen: cfg.MetricsListen, MetricsCert: cfg.MetricsCert,
		NBD: &nbd.Server{Exports: exports, Logger: log}, Meters: &t.reg, Collectors: extra, Logger: log}); err != nil {
		return nil, err
	}
	if cfg.Ready != "" {
		if err := os.WriteFile(cfg.Ready, []byte(t.Server.Addr()+"\n"), 0o644); err != nil {
			log.Error("--ready: the ready file", "path", cfg.Ready, "err", err)
		}
	}
	return t, nil
}

// Close stops serving and closes the cache and the upstream.
func (t *Target) Close() error {
	var errs []error
	if t.Server != nil {
		errs = append(errs, t.Server.Close())
	}
	if t.cache != nil {
		errs = append(errs, t.cache.Close())
	}
	if t.conn != nil {
		errs = append(errs, t.conn.Close())
	}
	return errors.Join(errs...)
}

// Cache is the write cache the endpoint serves.
func (t *Target) Cache() *Cache { return t.cache }

// ReloadTLS reads Config.MetricsCert's files again (nothing without
// one).
func (t *Target) ReloadTLS() error {
	if t.cfg.MetricsCert == nil {
		return nil
	}
	return t.cfg.MetricsCert.Reload()
}

// loopbackUp brings the loopback interface up when listen is a TCP
// address on it and it is down: in an initramfs, where usher target
// serves the root disk on 127.0.0.1 before anything else has set up
// lo. On a machine whose lo is up it does nothing.
func loopbackUp(listen string, log *slog.Logger) error {
	host, _, err := net.SplitHostPort(listen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return nil
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil || lo.Flags&net.FlagUp != 0 {
		return nil
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("the loopback interface's flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring the loopback interface up: %w", err)
	}
	log.Info("the loopback interface was down: brought it up", "listen", listen)
	return nil
}

// FieldError is an error of one Config field (Field, as Go spells it),
// for a command to name its flag.
type FieldError = nbdserve.FieldError
