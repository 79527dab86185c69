package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/lhc/peer"
	"github.com/usher-vdi/usher/internal/tlsconf"
	"github.com/usher-vdi/usher/internal/vda"
)

// checkTLS checks the TLS part of a Config and applies the listener
// rule: off loopback, TLS or InsecureListen.
func (c Config) checkTLS() error {
	switch {
	case c.TLSCert == TLSAuto && c.TLSKey != "":
		return errors.New("server: a self-signed certificate (TLS certificate auto) takes no key file")
	case c.TLSCert != TLSAuto && (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("server: TLS needs both a certificate file and a key file (--tls-cert and --tls-key)")
	case c.PeerCA != "" && c.TLSCert == "":
		return errors.New("server: a peer CA (--peer-ca) needs TLS on the listener (--tls-cert)")
	}
	hasTLS := c.TLSCert != ""
	if err := tlsconf.CheckListen("--listen", c.Listen, hasTLS, c.InsecureListen); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	if c.NFuseListen != "" {
		if err := tlsconf.CheckListen("--nfuse-listen", c.NFuseListen, hasTLS, c.InsecureListen); err != nil {
			return fmt.Errorf("server: %w", err)
		}
	}
	return nil
}

// openTLS loads the listeners' certificate (making the self-signed one
// in the data directory when asked) and the pool that this broker's
// clients of the site's brokers (its peers, its simulated VDAs) verify
// them with. Without TLS it does nothing; a clear listener off loopback
// gets a warning.
func (s *Server) openTLS() error {
	cfg := s.cfg
	if cfg.TLSCert == "" {
		for _, addr := range []string{cfg.Listen, cfg.NFuseListen} {
			if addr != "" && !tlsconf.LoopbackAddr(addr) {
				s.log.Warn("INSECURE: this listener is off loopback and speaks clear HTTP (--insecure-listen): "+
					"anyone on the network reads and changes passwords, tickets and machine credentials",
					"addr", addr)
			}
		}
		return nil
	}
	cert, key := cfg.TLSCert, cfg.TLSKey
	if cert == TLSAuto {
		var err error
		if cert, key, err = tlsconf.SelfSigned(s.dataDir, certHosts(cfg)); err != nil {
			return err
		}
	}
	r, err := tlsconf.NewReloader(cert, key, s.log.With("component", "tls"))
	if err != nil {
		return err
	}
	pool, err := tlsconf.TrustPool("peer CA", cfg.PeerCA, cert)
	if err != nil {
		return err
	}
	leaf := r.Leaf()
	s.tls, s.tlsCert = r, cert
	s.trust = &trust{pool: pool, leaf: leaf}
	s.log.Info("tls certificate loaded", "cert", cert, "subject", leaf.Subject.String(),
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "sha256", tlsconf.Fingerprint(leaf.Raw))
	return nil
}

// certHosts are the names a self-signed certificate is made for, besides
// localhost and the loopback addresses: this host's name and the hosts
// of the listeners and of the advertised address.
func certHosts(cfg Config) []string {
	var hosts []string
	if name, err := os.Hostname(); err == nil {
		hosts = append(hosts, name)
	}
	for _, addr := range []string{cfg.Listen, cfg.NFuseListen, cfg.Advertise} {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || host == "" {
			continue
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			continue
		}
		hosts = append(hosts, host)
	}
	return hosts
}

// tlsListener serves TLS on ln with the current certificate. Only
// HTTP/1.1 is offered: hotpath serves HTTP/1.1, and the connections it
// hands to net/http are no longer *tls.Conn, on which net/http would
// serve HTTP/2. (hotpath sets the send buffer of the TCP connection
// under each.)
func (s *Server) tlsListener(ln net.Listener) net.Listener {
	cfg := s.tls.ServerConfig()
	cfg.NextProtos = []string{"http/1.1"}
	return tls.NewListener(ln, cfg)
}

// trust is the pool that this process's clients of the site's brokers
// verify them with: the peer CA (or the system roots) and this broker's
// own certificate file, read again when the listeners' certificate
// changes, so that brokers sharing a certificate that is rotated go on
// trusting each other.
type trust struct {
	mu   sync.Mutex
	pool *x509.CertPool
	leaf *x509.Certificate // the listeners' certificate when pool was made
}

// roots returns the pool, made again first when the listeners'
// certificate is no longer the one it was made with.
func (s *Server) roots() *x509.CertPool {
	t := s.trust
	leaf := s.tls.Leaf()
	t.mu.Lock()
	defer t.mu.Unlock()
	if !leaf.Equal(t.leaf) {
		if pool, err := tlsconf.TrustPool("peer CA", s.cfg.PeerCA, s.tlsCert); err == nil {
			t.pool = pool
		} else {
			s.log.Error("peer trust not updated for the new certificate", "err", err)
		}
		t.leaf = leaf
	}
	return t.pool
}

// brokerTransport makes tr an HTTP/1.1 transport to the site's brokers
// over TLS, each handshake verifying them with the current roots.
// serverName, when set, is the name to verify in place of the dialled
// host's.
func (s *Server) brokerTransport(tr *http.Transport, serverName string) *http.Transport {
	tr.ForceAttemptHTTP2 = false
	dial := tr.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	// Through a proxy, where DialTLSContext is not used, the roots of
	// the start verify.
	tr.TLSClientConfig = &tls.Config{MinVersion: tlsconf.MinVersion, RootCAs: s.roots(), ServerName: serverName}
	tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		name := serverName
		if name == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			name = host
		}
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// The transport's handshake timeout, which it applies to its own
		// handshakes only.
		if d := tr.TLSHandshakeTimeout; d > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		conn := tls.Client(raw, &tls.Config{MinVersion: tlsconf.MinVersion, RootCAs: s.roots(), ServerName: name,
			NextProtos: []string{"http/1.1"}})
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return conn, nil
	}
	return tr
}

// peerClient is what this broker reaches the site's other brokers with,
// and the scheme of their URLs: over TLS, verified with the trust pool,
// when this broker's listener speaks TLS.
func (s *Server) peerClient() (*http.Client, string) {
	if s.tls == nil {
		return nil, "http" // the peer package's default client
	}
	return &http.Client{Timeout: peer.DefaultTimeout, Transport: s.brokerTransport(http.DefaultTransport.(*http.Transport).Clone(), "")}, "https"
}

// simClient is the simulated VDAs' client of this broker, nil without
// TLS (the simulator's own). It verifies the broker's certificate; as
// the simulator dials the listener's address, a certificate issued for
// a name alone is verified for its first name.
func (s *Server) simClient(idle int) *http.Client {
	if s.tls == nil {
		return nil
	}
	name := ""
	leaf := s.tls.Leaf()
	if host, _, err := net.SplitHostPort(s.addr); err == nil && leaf.VerifyHostname(host) != nil && len(leaf.DNSNames) > 0 {
		name = leaf.DNSNames[0]
	}
	return &http.Client{Transport: s.brokerTransport(vda.NewTransport(idle), name)}
}

// ReloadTLS loads the listeners' certificate files again, as SIGHUP
// asks: new handshakes get the new pair, connections up keep theirs. On
// error (a pair that does not load, match or is expired) the last good
// one stays in use. Without TLS it does nothing.
func (s *Server) ReloadTLS() error {
	if s.tls == nil {
		return nil
	}
	return s.tls.Reload()
}

// TLSCertFile is the listeners' certificate file ("" without TLS): the
// one given, or the self-signed one made in the data directory.
func (s *Server) TLSCertFile() string { return s.tlsCert }

// Certificate is the listeners' certificate in use, nil without TLS.
func (s *Server) Certificate() *x509.Certificate {
	if s.tls == nil {
		return nil
	}
	return s.tls.Leaf()
}
