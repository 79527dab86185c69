package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/block/writecache"
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
	tlsCA := fs.String("tls-ca", "", "PEM CA certificates that sign the upstream's certificate (implies TLS; default for nbds://: the system's roots)")
	tlsServerName := fs.String("tls-server-name", "", "name to verify in the upstream's certificate (default: the upstream host)")
	mode := fs.String("cache", "ram-overflow", "write cache: ram, ram-overflow or disk")
	ramSize := fs.String("ram", "512MiB", "RAM budget of the write cache (ram, ram-overflow)")
	overflow := fs.String("overflow", "", "overflow file (ram-overflow) or cache file (disk)")
	overflowSize := fs.String("overflow-size", "", "overflow file capacity (default: the image size)")
	persist := fs.Bool("persist", false, "disk mode: keep the cache across restarts (default: discard at each start, a new boot)")
	listen := fs.String("listen", "unix:/run/usher/target.sock", "local NBD endpoint: unix:/path or 127.0.0.1:port")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus /metrics on this address")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *upstream == "" {
		return usageError{"--upstream is required"}
	}
	budget, err := block.ParseSize(*ramSize)
	if err != nil {
		return usageError{"--ram: " + err.Error()}
	}
	log, err := lf.logger(m.Stderr)
	if err != nil {
		return err
	}
	var dialer nbd.Dialer
	if *tlsCA != "" || *tlsServerName != "" {
		dialer.TLS = &tls.Config{ServerName: *tlsServerName, MinVersion: tls.VersionTLS12}
		if *tlsCA != "" {
			pem, err := os.ReadFile(*tlsCA)
			if err != nil {
				return fmt.Errorf("--tls-ca: %w", err)
			}
			dialer.TLS.RootCAs = x509.NewCertPool()
			if !dialer.TLS.RootCAs.AppendCertsFromPEM(pem) {
				return usageError{"--tls-ca: no PEM certificate in " + *tlsCA}
			}
		}
	}
	up, err := dialer.DialURI(ctx, *upstream)
	if err != nil {
		return err
	}
	defer up.Close()
	var reg meter.Registry
	base := block.Device(meter.Wrap(readOnly{up}, reg.Layer(layerUpstream)))

	var dev block.Device
	switch *mode {
	case "ram":
		dev = meter.Wrap(writecache.NewRAM(base, writecache.RAMOptions{Budget: budget, Logger: log}), reg.Layer(layerCacheRAM))
	case "ram-overflow":
		if *overflow == "" {
			return usageError{"--cache ram-overflow needs --overflow FILE"}
		}
		capacity := up.Size()
		if *overflowSize != "" {
			if capacity, err = block.ParseSize(*overflowSize); err != nil {
				return usageError{"--overflow-size: " + err.Error()}
			}
		}
		of, err := block.CreateFile(*overflow, capacity)
		if err != nil {
			return err
		}
		defer os.Remove(*overflow)
		dev = meter.Wrap(writecache.NewRAM(base, writecache.RAMOptions{
			Budget: budget, Logger: log, Overflow: meter.Wrap(of, reg.Layer(layerOverflow)),
		}), reg.Layer(layerCacheRAM))
	case "disk":
		if *overflow == "" {
			return usageError{"--cache disk needs --overflow FILE (the cache file)"}
		}
		o, err := writecache.OpenOverlay(base, *overflow, *persist)
		if err != nil {
			return err
		}
		dev = meter.Wrap(o, reg.Layer(layerDeviceDisk))
	default:
		return usageError{fmt.Sprintf("--cache %q is not ram, ram-overflow or disk", *mode)}
	}
	defer dev.Close()
	log.Info("target cache ready", "upstream", *upstream, "cache", *mode, "size", up.Size(), "block_status", up.HasBlockStatus())
	// One cache per target: a second local connection would share it,
	// so the export is coherent.
	return m.serveNBD(ctx, log, *listen, *metricsListen, &nbd.Server{Exports: nbd.Devices{"": dev}, Logger: log}, &reg)
}

// readOnly hides the upstream's writability: targets never write to
// the stream, only to their cache.
type readOnly struct{ block.Device }

func (readOnly) ReadOnly() bool { return true }

// Extents passes block status through: the upstream's holes stay holes
// under the cache when it negotiated base:allocation.
func (r readOnly) Extents(ctx context.Context, off, n int64, dst []block.Extent) ([]block.Extent, error) {
	return block.Extents(ctx, r.Device, off, n, dst)
}
