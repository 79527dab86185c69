package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

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
	s.tls, s.tlsCert, s.trust = r, cert, pool
	leaf := r.Leaf()
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

// tlsListener serves TLS on ln with the current certificate, setting
// each connection's send buffer first (hotpath cannot reach a TLS
// connection's socket). Only HTTP/1.1 is offered: hotpath serves
// HTTP/1.1, and the connections it hands to net/http are no longer
// *tls.Conn, on which net/http would serve HTTP/2.
func (s *Server) tlsListener(ln net.Listener) net.Listener {
	cfg := s.tls.ServerConfig()
	cfg.NextProtos = []string{"http/1.1"}
	if n := s.cfg.SendBuffer; n > 0 {
		ln = sendBufferListener{Listener: ln, size: int(n)}
	}
	return tls.NewListener(ln, cfg)
}

// sendBufferListener sets the send buffer of the TCP connections it
// accepts.
type sendBufferListener struct {
	net.Listener
	size int
}

func (l sendBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(l.size)
	}
	return c, err
}

// overTLS is the handler of a TLS listener: every answer tells browsers
// to come back over TLS only (Strict-Transport-Security), and every
// request says it came over TLS (r.TLS), which hotpath's requests do
// not (neither on its loop nor handed to net/http), so that what depends
// on it (a Secure session cookie) holds.
func overTLS(h http.Handler) http.Handler {
	state := &tls.ConnectionState{HandshakeComplete: true}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Strict-Transport-Security", hstsHeader)
		if r.TLS == nil {
			r2 := *r
			r2.TLS = state
			r = &r2
		}
		h.ServeHTTP(w, r)
	})
}

// brokerClientTLS is the TLS configuration of this process's clients of
// the site's brokers. serverName, when set, is the name to verify in
// place of the dialled host's.
func (s *Server) brokerClientTLS(serverName string) *tls.Config {
	return &tls.Config{MinVersion: tlsconf.MinVersion, RootCAs: s.trust, ServerName: serverName}
}

// peerClient is what this broker reaches the site's other brokers with,
// and the scheme of their URLs: over TLS, verified with the trust pool,
// when this broker's listener speaks TLS.
func (s *Server) peerClient() (*http.Client, string) {
	if s.tls == nil {
		return &http.Client{Timeout: peerTimeout}, "http"
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = s.brokerClientTLS("")
	tr.ForceAttemptHTTP2 = false
	return &http.Client{Timeout: peerTimeout, Transport: tr}, "https"
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
	tr := vda.NewTransport(idle)
	tr.TLSClientConfig = s.brokerClientTLS(name)
	tr.ForceAttemptHTTP2 = false
	return &http.Client{Transport: tr}
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
