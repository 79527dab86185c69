package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/hostcache"
	"github.com/usher-vdi/usher/internal/block/hostexport"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/block/writecache"
	"github.com/usher-vdi/usher/internal/bytesize"
	"github.com/usher-vdi/usher/internal/tlsconf"
	"golang.org/x/sys/unix"
)

// Layer names of the device-side caches.
const (
	layerUpstream   = "upstream"
	layerCacheRAM   = "writecache_ram"
	layerOverflow   = "overflow"
	layerDeviceDisk = "writecache_device_disk"
)

// target runs the device-side proxy: a write cache in front of an
// upstream stream, served on a local NBD endpoint.
func (m *Main) target(ctx context.Context, args []string) error {
	fs := m.flagSet("target", "--upstream nbd://HOST:PORT/IMAGE --cache ram|ram-overflow|disk [flags]")
	var lf logFlags
	lf.register(fs)
	upstream := fs.String("upstream", "", "upstream export: nbd://HOST[:PORT]/IMAGE or nbd+unix:///IMAGE?socket=PATH, nbds:// or nbds+unix:// for TLS (required)")
	var tf upstreamTLSFlags
	tf.register(fs)
	mode := fs.String("cache", "ram-overflow", "write cache: ram, ram-overflow or disk")
	ramSize := fs.String("ram", "512MiB", "RAM budget of the write cache (ram, ram-overflow)")
	overflow := fs.String("overflow", "", "overflow file (ram-overflow) or cache file (disk); a missing directory is created (0700); ram-overflow also takes a block device (a local disk, overwritten, its whole size the capacity)")
	overflowSize := fs.String("overflow-size", "", "overflow file capacity (default: the image size; a block device's is its size)")
	var persist persistFlag
	fs.Var(&persist, "persist", "disk mode: keep the cache across restarts while the upstream image version is the same, else discard it and say so; --persist=strict refuses to start instead (default: discard at each start, a new boot)")
	listen := fs.String("listen", "unix:/run/usher/target.sock", "local NBD endpoint: unix:/path or 127.0.0.1:port")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus /metrics on this address (over TLS with --metrics-tls-cert)")
	metricsCert := fs.String("metrics-tls-cert", "", "PEM certificate (chain) that --metrics-listen serves TLS with, read again when it changes or on SIGHUP; with --metrics-tls-key")
	metricsKey := fs.String("metrics-tls-key", "", "PEM private key of --metrics-tls-cert")
	insecure := fs.Bool("insecure-listen", false, "allow a non-loopback --metrics-listen without --metrics-tls-cert (anyone who reaches it reads the metrics)")
	ready := fs.String("ready", "", "once the local endpoint serves, create this file (an initramfs waits for it before attaching the root disk)")
	reconnectWait := fs.Duration("reconnect-wait", 2*time.Minute, "how long a read waits for a lost upstream to come back (the stream restarting) before the device gets an I/O error")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *upstream == "" {
		return usageError{"--upstream is required"}
	}
	budget, err := bytesize.Parse(*ramSize)
	if err != nil {
		return usageError{"--ram: " + err.Error()}
	}
	switch *mode {
	case "ram":
	case "ram-overflow":
		if *overflow == "" {
			return usageError{"--cache ram-overflow needs --overflow FILE"}
		}
	case "disk":
		if *overflow == "" {
			return usageError{"--cache disk needs --overflow FILE (the cache file)"}
		}
	default:
		return usageError{fmt.Sprintf("--cache %q is not ram, ram-overflow or disk", *mode)}
	}
	log, err := lf.logger(m.Stderr)
	if err != nil {
		return err
	}
	if *ready != "" {
		// An earlier run's would say ready before this one serves.
		if err := os.Remove(*ready); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("--ready: %w", err)
		}
	}
	dialer, err := tf.dialer()
	if err != nil {
		return err
	}
	up, err := dialer.DialURI(ctx, *upstream)
	if err != nil {
		return fmt.Errorf("upstream: %w", err)
	}
	export := *upstream
	if u, err := url.Parse(*upstream); err == nil {
		export = strings.TrimPrefix(u.Path, "/")
	}
	// The cache holds writes over what the upstream serves now: a
	// connection dialled again (the stream restarted) must serve the
	// same version of the same image, or the device's reads would mix
	// two images.
	identity, err := hostexport.Identity(ctx, export, up)
	if err != nil {
		up.Close()
		return fmt.Errorf("upstream: %w", err)
	}
	conn := hostcache.NewUpstream(up, func(ctx context.Context) (hostcache.Conn, error) {
		c, err := dialer.DialURI(ctx, *upstream)
		if err != nil {
			return nil, err
		}
		if id, err := hostexport.Identity(ctx, export, c); err != nil || id != identity {
			c.Close()
			if err == nil {
				err = fmt.Errorf("it now serves %s, not %s", id, identity)
			}
			return nil, err
		}
		return c, nil
	}, hostcache.UpstreamOptions{Wait: *reconnectWait, Logger: log, Name: *upstream})
	defer conn.Close()
	var reg meter.Registry
	// Targets never write to the stream, only to their cache; the
	// upstream's block status passes through, so its holes stay holes
	// under the cache when it negotiated base:allocation.
	base := block.Device(meter.Wrap(block.ReadOnly(conn), reg.Layer(layerUpstream)))

	if *mode != "ram" {
		// The cache holds the device's writes: only its owner reads it.
		if err := os.MkdirAll(filepath.Dir(*overflow), 0o700); err != nil {
			return fmt.Errorf("--overflow: %w", err)
		}
	}
	var dev block.Device
	var ram *writecache.RAM // ram and ram-overflow
	switch *mode {
	case "ram":
		ram = writecache.NewRAM(base, writecache.RAMOptions{Budget: budget, Logger: log})
		dev = meter.Wrap(ram, reg.Layer(layerCacheRAM))
	case "ram-overflow":
		capacity := up.Size()
		if *overflowSize != "" {
			if capacity, err = bytesize.Parse(*overflowSize); err != nil {
				return usageError{"--overflow-size: " + err.Error()}
			}
		}
		// A block device is the device's local disk: kept, whole.
		fi, err := os.Stat(*overflow)
		device := err == nil && fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0
		of, err := block.CreateFile(*overflow, capacity)
		if err != nil {
			return fmt.Errorf("--overflow: %w", err)
		}
		if !device {
			defer os.Remove(*overflow)
		}
		ram = writecache.NewRAM(base, writecache.RAMOptions{
			Budget: budget, Logger: log, Overflow: meter.Wrap(of, reg.Layer(layerOverflow)),
		})
		dev = meter.Wrap(ram, reg.Layer(layerCacheRAM))
	case "disk":
		opts := writecache.OverlayOptions{Persist: persist != "", Strict: persist == "strict"}
		if opts.Persist {
			opts.Identity = identity
		}
		o, err := writecache.OpenOverlayWith(base, *overflow, opts)
		if errors.Is(err, writecache.ErrStale) {
			return fmt.Errorf("--persist=strict: the cache %s does not belong to this upstream: %w", *overflow, err)
		}
		if err != nil {
			return fmt.Errorf("--overflow: %w", err)
		}
		if o.Discarded != "" {
			log.Warn("persistent cache discarded: the upstream changed", "path", *overflow, "reason", o.Discarded)
		}
		dev = meter.Wrap(o, reg.Layer(layerDeviceDisk))
	}
	defer dev.Close()
	log.Info("target cache ready", "upstream", *upstream, "cache", *mode, "size", up.Size(), "block_status", up.HasBlockStatus())
	// One cache per target: a second local connection would share it,
	// so the export is coherent.
	var extra []prometheus.Collector
	if ram != nil {
		extra = append(extra, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "usher_target_writes_refused_total",
			Help: "Device writes the write cache refused (ENOSPC to the device): its RAM budget, and its overflow file if it has one, are full.",
		}, func() float64 { return float64(ram.Full.Load()) }))
	}
	// The default export, and the upstream's name for it: Debian's
	// nbd-client initramfs hook (nbdroot=127.0.0.1:PORT/EXPORT) needs a
	// name.
	exports := nbd.Devices{"": dev}
	if export != "" && export != *upstream {
		exports[export] = dev
	}
	if err := loopbackUp(*listen, log); err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	var metricsTLSCert *tlsconf.Reloader
	if *metricsListen != "" {
		if metricsTLSCert, err = metricsTLS(*metricsListen, *metricsCert, *metricsKey, *insecure, log, "--metrics-tls-cert"); err != nil {
			return err
		}
	} else if *metricsCert != "" || *metricsKey != "" {
		return usageError{"--metrics-tls-cert and --metrics-tls-key need --metrics-listen"}
	}
	mm := *m
	if *ready != "" {
		mm.Listening = func(name, addr string) {
			if name == "nbd" {
				if err := os.WriteFile(*ready, []byte(addr+"\n"), 0o644); err != nil {
					log.Error("--ready: the ready file", "path", *ready, "err", err)
				}
			}
			if m.Listening != nil {
				m.Listening(name, addr)
			}
		}
	}
	return mm.serveNBD(ctx, log, *listen, *metricsListen, metricsTLSCert, &nbd.Server{Exports: exports, Logger: log}, &reg, extra...)
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

// persistFlag is --persist: "" (off), "true" or "strict".
type persistFlag string

func (p *persistFlag) String() string   { return string(*p) }
func (p *persistFlag) IsBoolFlag() bool { return true }

func (p *persistFlag) Set(v string) error {
	switch v {
	case "false":
		*p = ""
	case "true", "strict":
		*p = persistFlag(v)
	default:
		return fmt.Errorf("%q is not true, false or strict", v)
	}
	return nil
}
