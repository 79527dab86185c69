package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/usher-vdi/usher/internal/block/imageexport"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/block/ramcache"
	"github.com/usher-vdi/usher/internal/block/writecache"
	"github.com/usher-vdi/usher/internal/bytesize"
	"github.com/usher-vdi/usher/internal/tlsconf"
)

// stream runs the NBD image streaming server over an image store.
func (m *Main) stream(ctx context.Context, args []string) error {
	fs := m.flagSet("stream", `--store DIR [--listen ADDR] [flags]

Serves the versions of an image store (made by 'usher image import') as NBD exports:
IMAGE is the image's production version, IMAGE@N its version N. The export's mode
follows the version's state; there is no mode flag:

  standard  production, superseded and test versions: shared read-only through the RAM
            cache; with --write-cache each connection writes to its own server-disk
            write cache, deleted when it disconnects (its writes vanish at the next
            boot); without it the export is read-only and targets cache on the device
            ('usher target')
  private   a maintenance version (IMAGE@N, after 'usher image version'): one
            connection at a time reads and writes the version itself and its writes
            stay; a second connection is refused as busy. Disconnect, then
            'usher image promote' it to test and production

Exposure: the server listens on loopback by default, and refuses another address
without --tls require unless --insecure-listen is given. A maintenance version
opens only for a client with a TLS certificate that --tls-client-ca verifies
(--auth none lifts that); --auth all demands one for every export.`)
	var lf logFlags
	lf.register(fs)
	store := fs.String("store", "", "image store directory (required)")
	listen := fs.String("listen", fmt.Sprintf("127.0.0.1:%d", nbd.DefaultPort), "NBD listen address: host:port or unix:/path")
	insecure := fs.Bool("insecure-listen", false, "allow a non-loopback --listen without --tls require, and a non-loopback --metrics-listen without --tls-cert (anyone who reaches them reads every image, or the metrics)")
	ramCache := fs.String("ram-cache", "1GiB", "server RAM cache of image blocks shared by every target (0 to disable)")
	writeCache := fs.String("write-cache", "", "directory for per-target server-disk write caches; empty: exports are read-only (targets cache on the device)")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus /metrics on this address (over TLS with --tls-cert)")
	workers := fs.Int("workers", 16, "requests in progress per connection")
	tlsCert := fs.String("tls-cert", "", "PEM certificate (chain) for NBD_OPT_STARTTLS and the --metrics-listen listener, read again when it changes or on SIGHUP; with --tls-key")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert")
	tlsMode := fs.String("tls", "", "off, on (clients may upgrade with STARTTLS) or require (refuse every option before STARTTLS); default on with --tls-cert, else off")
	clientCA := fs.String("tls-client-ca", "", "PEM CA certificates that sign the client certificates which authenticate targets and writers")
	auth := fs.String("auth", "writes", "who needs a verified client certificate: writes (maintenance versions), all (every export), none (nobody)")
	wcMax := fs.String("write-cache-max", "32GiB", "bytes the server-disk write caches may hold together; a write past it gets ENOSPC")
	wcMaxTarget := fs.String("write-cache-max-target", "2GiB", "bytes one connection's server-disk write cache may hold")
	maxConns := fs.Int("max-connections", 1024, "connections served at once; more are closed as they arrive (0: no bound)")
	inFlight := fs.String("max-in-flight", "64MiB", "bytes of requests and replies one connection may hold; past it the server stops reading its requests")
	totalInFlight := fs.String("max-total-in-flight", "1GiB", "bytes of requests and replies every connection together may hold")
	writeTimeout := fs.Duration("write-timeout", nbd.DefaultWriteTimeout, "drop a client whose replies cannot be written for this long")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	log, err := lf.logger(m.Stderr)
	if err != nil {
		return err
	}
	tlsConfig, cert, requireTLS, err := serverTLS(*tlsCert, *tlsKey, *tlsMode, log)
	if err != nil {
		return err
	}
	if *metricsListen != "" {
		if err := tlsconf.CheckListen("--metrics-listen", *metricsListen, cert != nil, *insecure); err != nil {
			return usageError{err.Error()}
		}
		if cert == nil && !tlsconf.LoopbackAddr(*metricsListen) {
			log.Warn("INSECURE: --metrics-listen is off loopback and speaks clear HTTP (--insecure-listen)", "addr", *metricsListen)
		}
	}
	if *clientCA != "" {
		if tlsConfig == nil {
			return usageError{"--tls-client-ca needs TLS: --tls-cert and --tls-key"}
		}
		if tlsConfig.ClientCAs, err = loadCAs("--tls-client-ca", *clientCA); err != nil {
			return err
		}
		tlsConfig.ClientAuth = tls.VerifyClientCertIfGiven
	}
	switch *auth {
	case "writes", "none":
	case "all":
		if *clientCA == "" {
			return usageError{"--auth all needs --tls-client-ca"}
		}
	default:
		return usageError{fmt.Sprintf("--auth %q is not writes, all or none", *auth)}
	}
	if !tlsconf.LoopbackAddr(*listen) && !requireTLS && !*insecure {
		return usageError{fmt.Sprintf("--listen %s is not a loopback address: anyone who reaches it could read every image; "+
			"serve it with --tls require (and --tls-client-ca to authenticate clients), or pass --insecure-listen", *listen)}
	}
	wcTotal, err := bytesize.Parse(*wcMax)
	if err != nil || wcTotal <= 0 {
		return usageError{fmt.Sprintf("--write-cache-max %q is not a positive size", *wcMax)}
	}
	wcTarget, err := bytesize.Parse(*wcMaxTarget)
	if err != nil || wcTarget <= 0 {
		return usageError{fmt.Sprintf("--write-cache-max-target %q is not a positive size", *wcMaxTarget)}
	}
	if *store == "" {
		return usageError{"--store is required"}
	}
	cacheSize, err := bytesize.Parse(*ramCache)
	if err != nil {
		return usageError{"--ram-cache: " + err.Error()}
	}
	perConn, err := bytesize.Parse(*inFlight)
	if err != nil || perConn <= 0 {
		return usageError{fmt.Sprintf("--max-in-flight %q is not a positive size", *inFlight)}
	}
	total, err := bytesize.Parse(*totalInFlight)
	if err != nil || total <= 0 {
		return usageError{fmt.Sprintf("--max-total-in-flight %q is not a positive size", *totalInFlight)}
	}
	if *maxConns < 0 || *writeTimeout <= 0 {
		return usageError{"--max-connections and --write-timeout must be positive"}
	}
	st, err := openStore(*store)
	if err != nil {
		return err
	}
	st.Logger = log
	if *writeCache != "" {
		if err := os.MkdirAll(*writeCache, 0o700); err != nil {
			return fmt.Errorf("--write-cache: %w", err)
		}
	}
	var reg meter.Registry
	exports := &imageexport.Images{Store: st, WriteCacheDir: *writeCache, Meters: &reg, Logger: log,
		WriteCacheMax: wcTarget, WriteCacheQuota: writecache.NewQuota(wcTotal),
		AllowAnonymousWrites: *auth == "none", RequireAuth: *auth == "all"}
	if *auth == "writes" && *clientCA == "" {
		log.Info("maintenance versions cannot be opened: they need a client certificate and there is no --tls-client-ca")
	}
	if cacheSize > 0 {
		exports.Cache = ramcache.New(cacheSize, 0)
	}
	defer exports.Close()
	srv := &nbd.Server{Exports: exports, Logger: log, Workers: *workers, TLS: tlsConfig, RequireTLS: requireTLS,
		MaxConnections: *maxConns, MaxInFlight: perConn, MaxTotalInFlight: total, WriteTimeout: *writeTimeout}
	return m.serveNBD(ctx, log, *listen, *metricsListen, cert, srv, &reg)
}

// loadCAs reads a PEM file of CA certificates for flag.
func loadCAs(flag, path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, usageError{flag + ": no PEM certificate in " + path}
	}
	return pool, nil
}

// serverTLS loads the stream server's TLS configuration from the flags:
// the NBD listener's, and the certificate (nil: none), which the metrics
// listener serves too.
func serverTLS(cert, key, mode string, log *slog.Logger) (*tls.Config, *tlsconf.Reloader, bool, error) {
	if mode == "" {
		mode = "off"
		if cert != "" {
			mode = "on"
		}
	}
	switch mode {
	case "off":
		if cert != "" || key != "" {
			return nil, nil, false, usageError{"--tls off with --tls-cert or --tls-key"}
		}
		return nil, nil, false, nil
	case "on", "require":
	default:
		return nil, nil, false, usageError{fmt.Sprintf("--tls %q is not off, on or require", mode)}
	}
	if cert == "" || key == "" {
		return nil, nil, false, usageError{"--tls " + mode + " needs --tls-cert and --tls-key"}
	}
	r, err := tlsconf.NewReloader(cert, key, log.With("component", "tls"))
	if err != nil {
		return nil, nil, false, err
	}
	cfg := r.ServerConfig()
	cfg.NextProtos = nil // NBD, not HTTP
	return cfg, r, mode == "require", nil
}

// serveNBD runs srv on listen (and /metrics on metricsListen, over TLS
// with cert when set) until ctx is done. With cert, SIGHUP reads its files
// again.
func (m *Main) serveNBD(ctx context.Context, log *slog.Logger, listen, metricsListen string, cert *tlsconf.Reloader, srv *nbd.Server, reg *meter.Registry, extra ...prometheus.Collector) error {
	if path, ok := strings.CutPrefix(listen, "unix:"); ok {
		// A socket in a missing directory (/run/usher): make it, open to
		// the local NBD clients (QEMU) that connect as other users.
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("--listen: %w", err)
		}
	}
	ln, err := nbd.Listen(listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	if m.Listening != nil {
		m.Listening("nbd", ln.Addr().String())
	}
	log.Info("nbd server listening", "addr", ln.Addr().String(), "tls", srv.TLS != nil, "require_tls", srv.RequireTLS,
		"client_certs", srv.TLS != nil && srv.TLS.ClientCAs != nil)
	if cert != nil {
		stop := m.hangups(ctx, log, cert.Reload)
		defer stop()
	}
	stopMetrics := func() {}
	if metricsListen != "" {
		mln, err := net.Listen("tcp", metricsListen)
		if err != nil {
			ln.Close()
			return err
		}
		pr := prometheus.NewRegistry()
		pr.MustRegister(reg,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "usher_nbd_bytes_in_flight", Help: "Bytes of NBD requests and replies the server holds."},
				func() float64 { return float64(srv.InFlight()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "usher_nbd_connections", Help: "NBD connections being served."},
				func() float64 { return float64(srv.Conns()) }))
		pr.MustRegister(extra...)
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(pr, promhttp.HandlerOpts{}))
		if m.Listening != nil {
			m.Listening("metrics", mln.Addr().String())
		}
		stopMetrics = serveMetrics(mln, mux, cert, log)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
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
	log.Info("nbd server stopped")
	return err
}
