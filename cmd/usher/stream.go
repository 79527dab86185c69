package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/block/ramcache"
)

// stream runs the NBD image streaming server over an image store.
func (m *Main) stream(ctx context.Context, args []string) error {
	fs := m.flagSet("stream", "--store DIR [--listen ADDR] [flags]")
	var lf logFlags
	lf.register(fs)
	store := fs.String("store", "", "image store directory (required)")
	listen := fs.String("listen", fmt.Sprintf(":%d", nbd.DefaultPort), "NBD listen address: host:port or unix:/path")
	ramCache := fs.String("ram-cache", "1GiB", "server RAM cache of image blocks shared by every target (0 to disable)")
	writeCache := fs.String("write-cache", "", "directory for per-target server-disk write caches; empty: exports are read-only (targets cache on the device)")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus /metrics on this address")
	workers := fs.Int("workers", 16, "requests in progress per connection")
	tlsCert := fs.String("tls-cert", "", "PEM certificate (chain) for NBD_OPT_STARTTLS; with --tls-key")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert")
	tlsMode := fs.String("tls", "", "off, on (clients may upgrade with STARTTLS) or require (refuse every option before STARTTLS); default on with --tls-cert, else off")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	tlsConfig, requireTLS, err := serverTLS(*tlsCert, *tlsKey, *tlsMode)
	if err != nil {
		return err
	}
	if *store == "" {
		return usageError{"--store is required"}
	}
	cacheSize, err := block.ParseSize(*ramCache)
	if err != nil {
		return usageError{"--ram-cache: " + err.Error()}
	}
	log, err := lf.logger(m.Stderr)
	if err != nil {
		return err
	}
	st, err := image.Open(*store)
	if err != nil {
		return err
	}
	if *writeCache != "" {
		if err := os.MkdirAll(*writeCache, 0o755); err != nil {
			return err
		}
	}
	var reg meter.Registry
	exports := &image.Exports{Store: st, WriteCacheDir: *writeCache, Meters: &reg, Logger: log}
	if cacheSize > 0 {
		exports.Cache = ramcache.New(cacheSize, 0)
	}
	defer exports.Close()
	srv := &nbd.Server{Exports: exports, Logger: log, Workers: *workers, TLS: tlsConfig, RequireTLS: requireTLS}
	return m.serveNBD(ctx, log, *listen, *metricsListen, srv, &reg)
}

// serverTLS loads the stream server's TLS configuration from the flags.
func serverTLS(cert, key, mode string) (*tls.Config, bool, error) {
	if mode == "" {
		mode = "off"
		if cert != "" {
			mode = "on"
		}
	}
	switch mode {
	case "off":
		if cert != "" || key != "" {
			return nil, false, usageError{"--tls off with --tls-cert or --tls-key"}
		}
		return nil, false, nil
	case "on", "require":
	default:
		return nil, false, usageError{fmt.Sprintf("--tls %q is not off, on or require", mode)}
	}
	if cert == "" || key == "" {
		return nil, false, usageError{"--tls " + mode + " needs --tls-cert and --tls-key"}
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, false, fmt.Errorf("tls certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, mode == "require", nil
}

// serveNBD runs srv on listen (and /metrics on metricsListen)
// until ctx is done.
func (m *Main) serveNBD(ctx context.Context, log *slog.Logger, listen, metricsListen string, srv *nbd.Server, reg *meter.Registry) error {
	ln, err := nbd.Listen(listen)
	if err != nil {
		return err
	}
	if m.Listening != nil {
		m.Listening("nbd", ln.Addr().String())
	}
	log.Info("nbd server listening", "addr", ln.Addr().String(), "tls", srv.TLS != nil, "require_tls", srv.RequireTLS)
	var hs *http.Server
	if metricsListen != "" {
		mln, err := net.Listen("tcp", metricsListen)
		if err != nil {
			ln.Close()
			return err
		}
		pr := prometheus.NewRegistry()
		pr.MustRegister(reg)
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(pr, promhttp.HandlerOpts{}))
		hs = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		if m.Listening != nil {
			m.Listening("metrics", mln.Addr().String())
		}
		go hs.Serve(mln)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	srv.Close()
	if hs != nil {
		hs.Close()
	}
	if err == nil {
		err = <-errc
	}
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	log.Info("nbd server stopped")
	return err
}
