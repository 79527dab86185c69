package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/usher-vdi/usher/internal/bytesize"
	"github.com/usher-vdi/usher/internal/targetrole"
	"github.com/usher-vdi/usher/internal/tlsconf"
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
	mode := fs.String("cache", targetrole.DefaultMode, "write cache: ram, ram-overflow or disk")
	ramSize := fs.String("ram", "512MiB", "RAM budget of the write cache (ram, ram-overflow)")
	overflow := fs.String("overflow", "", "overflow file (ram-overflow) or cache file (disk); a missing directory is created (0700); ram-overflow also takes a block device (a local disk, overwritten, its whole size the capacity)")
	overflowSize := fs.String("overflow-size", "", "overflow file capacity (default: the image size; a block device's is its size)")
	var persist persistFlag
	fs.Var(&persist, "persist", "disk mode: keep the cache across restarts while the upstream image version is the same, else discard it and say so; --persist=strict refuses to start instead (default: discard at each start, a new boot)")
	listen := fs.String("listen", targetrole.DefaultListen, "local NBD endpoint: unix:/path or 127.0.0.1:port")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus /metrics on this address (over TLS with --metrics-tls-cert)")
	metricsCert := fs.String("metrics-tls-cert", "", "PEM certificate (chain) that --metrics-listen serves TLS with, read again when it changes or on SIGHUP; with --metrics-tls-key")
	metricsKey := fs.String("metrics-tls-key", "", "PEM private key of --metrics-tls-cert")
	insecure := fs.Bool("insecure-listen", false, "allow a non-loopback --metrics-listen without --metrics-tls-cert (anyone who reaches it reads the metrics)")
	ready := fs.String("ready", "", "once the local endpoint serves, create this file (an initramfs waits for it before attaching the root disk)")
	reconnectWait := fs.Duration("reconnect-wait", targetrole.DefaultReconnectWait, "how long a read waits for a lost upstream to come back (the stream restarting) before the device gets an I/O error")
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
	var ofSize int64
	if *overflowSize != "" && *mode == "ram-overflow" {
		if ofSize, err = bytesize.Parse(*overflowSize); err != nil {
			return usageError{"--overflow-size: " + err.Error()}
		}
	}
	log, err := lf.logger(m.Stderr)
	if err != nil {
		return err
	}
	dialer, err := tf.dialer()
	if err != nil {
		return err
	}
	var metricsTLSCert *tlsconf.Reloader
	if *metricsListen != "" {
		if metricsTLSCert, err = metricsTLS(*metricsListen, *metricsCert, *metricsKey, *insecure, log, "--metrics-tls-cert"); err != nil {
			return err
		}
	} else if *metricsCert != "" || *metricsKey != "" {
		return usageError{"--metrics-tls-cert and --metrics-tls-key need --metrics-listen"}
	}
	t, err := targetrole.Open(ctx, targetrole.Config{Upstream: *upstream, Dialer: dialer,
		Cache: targetrole.CacheConfig{Mode: *mode, RAM: budget, Path: *overflow, PathSize: ofSize,
			Persist: *mode == "disk" && persist != "", Strict: persist == "strict"},
		Listen: *listen, MetricsListen: *metricsListen, MetricsCert: metricsTLSCert, Ready: *ready,
		ReconnectWait: *reconnectWait, Logger: log})
	var fe *targetrole.FieldError
	if errors.As(err, &fe) && fe.Field == "Cache.Persist" {
		return fmt.Errorf("--persist=strict: the cache %s does not belong to this upstream: %w", *overflow, fe.Err)
	}
	if err != nil {
		return roleFlagError(err, map[string]string{"Cache.Path": "--overflow", "Listen": "--listen", "Ready": "--ready"})
	}
	defer t.Close()
	return m.runNBDRole(ctx, log, t, metricsTLSCert != nil)
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
