package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/usher-vdi/usher/internal/bytesize"
	"github.com/usher-vdi/usher/internal/streamrole"
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
	listen := fs.String("listen", streamrole.DefaultListen, "NBD listen address: host:port or unix:/path")
	insecure := fs.Bool("insecure-listen", false, "allow a non-loopback --listen without --tls require, and a non-loopback --metrics-listen without --tls-cert (anyone who reaches them reads every image, or the metrics)")
	ramCache := fs.String("ram-cache", "1GiB", "server RAM cache of image blocks shared by every target (0 to disable)")
	writeCache := fs.String("write-cache", "", "directory for per-target server-disk write caches; empty: exports are read-only (targets cache on the device)")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus /metrics on this address (over TLS with --tls-cert)")
	workers := fs.Int("workers", streamrole.DefaultWorkers, "requests in progress per connection")
	tlsCert := fs.String("tls-cert", "", "PEM certificate (chain) for NBD_OPT_STARTTLS and the --metrics-listen listener, read again when it changes or on SIGHUP; with --tls-key")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert")
	tlsMode := fs.String("tls", "", "off, on (clients may upgrade with STARTTLS) or require (refuse every option before STARTTLS); default on with --tls-cert, else off")
	clientCA := fs.String("tls-client-ca", "", "PEM CA certificates that sign the client certificates which authenticate targets and writers")
	auth := fs.String("auth", streamrole.AuthWrites, "who needs a verified client certificate: writes (maintenance versions), all (every export), none (nobody)")
	wcMax := fs.String("write-cache-max", "32GiB", "bytes the server-disk write caches may hold together; a write past it gets ENOSPC")
	wcMaxTarget := fs.String("write-cache-max-target", "2GiB", "bytes one connection's server-disk write cache may hold")
	maxConns := fs.Int("max-connections", streamrole.DefaultMaxConnections, "connections served at once; more are closed as they arrive (0: no bound)")
	inFlight := fs.String("max-in-flight", "64MiB", "bytes of requests and replies one connection may hold; past it the server stops reading its requests")
	totalInFlight := fs.String("max-total-in-flight", "1GiB", "bytes of requests and replies every connection together may hold")
	writeTimeout := fs.Duration("write-timeout", streamrole.DefaultWriteTimeout, "drop a client whose replies cannot be written for this long")
	configFlag(fs)
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
	if cacheSize == 0 {
		cacheSize = -1 // streamrole: none
	}
	maxConnections := *maxConns
	if maxConnections == 0 {
		maxConnections = -1 // streamrole: no bound
	}
	authMode := map[string]string{"writes": streamrole.AuthWrites, "all": streamrole.AuthAll, "none": streamrole.AuthNone}[*auth]
	s, err := streamrole.Open(ctx, streamrole.Config{Store: st, Listen: *listen, MetricsListen: *metricsListen, InsecureListen: *insecure,
		RAMCache: cacheSize, WriteCacheDir: *writeCache, WriteCacheMax: wcTotal, WriteCacheMaxTarget: wcTarget,
		TLS: tlsConfig, RequireTLS: requireTLS, Cert: cert, Auth: authMode, Workers: *workers,
		MaxConnections: maxConnections, MaxInFlight: perConn, MaxTotalInFlight: total, WriteTimeout: *writeTimeout, Logger: log})
	if err != nil {
		return roleFlagError(err, map[string]string{"Listen": "--listen", "WriteCacheDir": "--write-cache"})
	}
	defer s.Close()
	return m.runNBDRole(ctx, log, s, cert != nil)
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

// nbdRole is a block role opened from its Config (streamrole,
// targetrole, hostcacherole).
type nbdRole interface {
	Addr() string
	MetricsAddr() string // "": none
	Run(ctx context.Context) error
	ReloadTLS() error
}

// runNBDRole announces r's listeners (Main.Listening) and runs it until
// ctx is done; with reload, SIGHUP reads its certificate files again.
func (m *Main) runNBDRole(ctx context.Context, log *slog.Logger, r nbdRole, reload bool) error {
	if m.Listening != nil {
		m.Listening("nbd", r.Addr())
		if a := r.MetricsAddr(); a != "" {
			m.Listening("metrics", a)
		}
	}
	if reload {
		stop := m.hangups(ctx, log, r.ReloadTLS)
		defer stop()
	}
	return r.Run(ctx)
}

// roleFlagError names the flag of a role's Config field in err (flags maps
// the fields to their flags).
func roleFlagError(err error, flags map[string]string) error {
	var fe *streamrole.FieldError // every role's
	if errors.As(err, &fe) {
		if flag, ok := flags[fe.Field]; ok {
			return fmt.Errorf("%s: %w", flag, fe.Err)
		}
	}
	return err
}
