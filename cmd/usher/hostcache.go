package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net/url"
	"strings"

	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/bytesize"
	"github.com/usher-vdi/usher/internal/hostcacherole"
	"github.com/usher-vdi/usher/internal/tlsconf"
)

// vmFlag is --vm NAME=IMAGE, repeated.
type vmFlag map[string]string

func (v vmFlag) String() string { return "" }

func (v vmFlag) Set(s string) error {
	name, image, ok := strings.Cut(s, "=")
	switch {
	case !ok || name == "" || image == "":
		return fmt.Errorf("%q is not NAME=IMAGE", s)
	case strings.Contains(name, "/"):
		return fmt.Errorf("VM name %q has a '/'", name)
	case v[name] != "":
		return fmt.Errorf("VM %q named twice", name)
	}
	v[name] = image
	return nil
}

// upstreamTLSFlags are the flags of a client of the stream over TLS.
type upstreamTLSFlags struct {
	ca, serverName, cert, key *string
}

func (f *upstreamTLSFlags) register(fs *flag.FlagSet) {
	f.ca = fs.String("tls-ca", "", "PEM CA certificates that sign the upstream's certificate (implies TLS; default for nbds://: the system's roots)")
	f.serverName = fs.String("tls-server-name", "", "name to verify in the upstream's certificate (default: the upstream host)")
	f.cert = fs.String("tls-cert", "", "PEM client certificate (chain) presented to the upstream (implies TLS); with --tls-key")
	f.key = fs.String("tls-key", "", "PEM private key of --tls-cert")
}

// dialer returns an NBD dialer with the flags' TLS configuration.
func (f *upstreamTLSFlags) dialer() (nbd.Dialer, error) {
	var d nbd.Dialer
	if (*f.cert == "") != (*f.key == "") {
		return d, usageError{"--tls-cert and --tls-key go together"}
	}
	if *f.ca == "" && *f.serverName == "" && *f.cert == "" {
		return d, nil
	}
	d.TLS = &tls.Config{ServerName: *f.serverName, MinVersion: tls.VersionTLS12}
	if *f.ca != "" {
		var err error
		if d.TLS.RootCAs, err = loadCAs("--tls-ca", *f.ca); err != nil {
			return d, err
		}
	}
	if *f.cert != "" {
		pair, err := tls.LoadX509KeyPair(*f.cert, *f.key)
		if err != nil {
			return d, fmt.Errorf("--tls-cert: %w", err)
		}
		d.TLS.Certificates = []tls.Certificate{pair}
	}
	return d, nil
}

// hostcacheCmd runs a host's cache: every VM of the host reads its image
// through one persistent read cache on local disk, and writes to an
// overlay of its own.
func (m *Main) hostcacheCmd(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "warm" {
		return m.hostcacheWarm(ctx, args[1:])
	}
	fs := m.flagSet("hostcache", "--upstream nbd://HOST:PORT --dir DIR --vm NAME=IMAGE [--vm ...] [flags]\n"+
		"       usher hostcache warm IMAGE [--trace FILE] [flags]\n\n"+
		"A host's read cache (IntelliCache): every VM of the host is an export of this\n"+
		"daemon, named as the VM, serving its image from --upstream through one cache of\n"+
		"blocks in --dir, kept across restarts. A VM's connection is a new boot: of the\n"+
		"image's version in production at that moment, with its writes in an overlay file\n"+
		"of its own under --dir, discarded at its next boot (--writes local), or kept by\n"+
		"the stream's server-side write cache (--writes upstream).\n\n"+
		"Blocks are keyed by the digests the stream serves for each version\n"+
		"(IMAGE@N/digests): a new version fetches only the blocks it changed, and images\n"+
		"share the blocks they hold in common. In front of an upstream without digests\n"+
		"(nbdkit, qemu-nbd) blocks are keyed by position under the version's identity.\n"+
		"While upstream is unreachable, cached blocks are served, misses fail with EIO,\n"+
		"and it is dialled again with backoff; a daemon started then serves the versions it\n"+
		"last saw (kept in --dir) from the cache.")
	var lf logFlags
	lf.register(fs)
	upstream := fs.String("upstream", "", "the stream: nbd://HOST[:PORT] or nbd+unix:///?socket=PATH (nbds:// for TLS); each image is its export (required)")
	var tf upstreamTLSFlags
	tf.register(fs)
	dir := fs.String("dir", "", "the cache directory on local disk (required); a second daemon on it is refused")
	size := fs.String("size", "10GiB", "bytes of blocks the cache keeps; past it, blocks are evicted (empty slots first, then CLOCK)")
	blockSize := fs.String("block-size", "64KiB", "the unit fetched from upstream and kept; digests are used only when it is the stream's (64KiB)")
	vms := vmFlag{}
	fs.Var(vms, "vm", "NAME=IMAGE: export NAME serves IMAGE (IMAGE, its production version at each boot, or IMAGE@VERSION); repeat for each VM")
	writes := fs.String("writes", hostcacherole.WritesLocal, "where VM writes go: local (an overlay under --dir, discarded at each boot) or upstream (the stream's server-side write cache: usher stream --write-cache)")
	timeout := fs.Duration("upstream-timeout", hostcacherole.DefaultUpstreamTimeout, "give up an upstream read after this long and dial again")
	record := fs.String("record-boots", "", "record each VM boot's reads of its image (its first --record-for) in DIR/VM.trace, for 'usher hostcache warm --trace' on other hosts")
	recordFor := fs.Duration("record-for", hostcacherole.DefaultRecordFor, "how long of each boot --record-boots records")
	listen := fs.String("listen", hostcacherole.DefaultListen, "local NBD endpoint: unix:/path or 127.0.0.1:port")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus /metrics on this address (over TLS with --metrics-tls-cert)")
	metricsCert := fs.String("metrics-tls-cert", "", "PEM certificate (chain) that --metrics-listen serves TLS with, read again when it changes or on SIGHUP; with --metrics-tls-key")
	metricsKey := fs.String("metrics-tls-key", "", "PEM private key of --metrics-tls-cert")
	insecure := fs.Bool("insecure-listen", false, "allow a non-loopback --metrics-listen without --metrics-tls-cert (anyone who reaches it reads the metrics)")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	switch {
	case *upstream == "":
		return usageError{"--upstream is required"}
	case *dir == "":
		return usageError{"--dir is required"}
	case len(vms) == 0:
		return usageError{"--vm NAME=IMAGE is required, once per VM"}
	case *writes != hostcacherole.WritesLocal && *writes != hostcacherole.WritesUpstream:
		return usageError{fmt.Sprintf("--writes %q is not local or upstream", *writes)}
	case *timeout <= 0:
		return usageError{"--upstream-timeout must be positive"}
	}
	u, err := url.Parse(*upstream)
	if err != nil || !strings.HasPrefix(u.Scheme, "nbd") || strings.Trim(u.Path, "/") != "" {
		return usageError{fmt.Sprintf("--upstream %q: want nbd://HOST[:PORT] or nbd+unix:///?socket=PATH (or nbds), without an export: each --vm names its image", *upstream)}
	}
	capacity, err := bytesize.Parse(*size)
	if err != nil {
		return usageError{"--size: " + err.Error()}
	}
	bs, err := bytesize.Parse(*blockSize)
	if err != nil {
		return usageError{"--block-size: " + err.Error()}
	}
	dialer, err := tf.dialer()
	if err != nil {
		return err
	}
	log, err := lf.logger(m.Stderr)
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
	h, err := hostcacherole.Open(ctx, hostcacherole.Config{Upstream: *upstream, Dialer: dialer, Dir: *dir, Size: capacity, BlockSize: bs,
		VMs: vms, Writes: *writes, UpstreamTimeout: *timeout, RecordDir: *record, RecordFor: *recordFor,
		Listen: *listen, MetricsListen: *metricsListen, MetricsCert: metricsTLSCert, Logger: log})
	if err != nil {
		return roleFlagError(err, map[string]string{"Dir": "--dir", "RecordDir": "--record-boots", "Listen": "--listen"})
	}
	defer h.Close()
	return m.runNBDRole(ctx, log, h, metricsTLSCert != nil)
}
