package server

import (
	"context"
	"crypto/x509"
	"errors"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/usher-vdi/usher/internal/tlsconf/tlstest"
)

// TestPeerClientTrust: a broker's peer client speaks https, trusts a
// broker serving its own certificate (also once that is rotated: the
// site's brokers share it), refuses one it has no CA for, and trusts
// that one given its certificate as the peer CA.
func TestPeerClientTrust(t *testing.T) {
	dir := t.TempDir()
	aCert, aKey := tlstest.Valid(t, dir, "a")
	bCert, bKey := tlstest.Valid(t, dir, "b")
	cCert, cKey := tlstest.Valid(t, dir, "c")
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	tlstest.Replace(t, aCert, aKey, cert, key)
	open := func(cfg Config) *Server {
		t.Helper()
		cfg.DataDir, cfg.Listen = t.TempDir(), "127.0.0.1:0"
		s, err := Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	get := func(c *http.Client, url string) error {
		t.Helper()
		defer c.CloseIdleConnections()
		resp, err := c.Get(url + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s/healthz: %s", url, resp.Status)
		}
		return nil
	}
	a := open(Config{TLSCert: cert, TLSKey: key})
	peer, scheme := a.peerClient()
	if scheme != "https" {
		t.Fatalf("peer scheme %q", scheme)
	}
	if err := get(peer, a.URL()); err != nil {
		t.Fatalf("a broker with the shared certificate: %v", err)
	}
	tlstest.Replace(t, bCert, bKey, cert, key)
	if err := a.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	if err := get(peer, a.URL()); err != nil {
		t.Fatalf("after the shared certificate's rotation: %v", err)
	}

	other := open(Config{TLSCert: cCert, TLSKey: cKey})
	peer, _ = other.peerClient()
	var unknown x509.UnknownAuthorityError
	if err := get(peer, a.URL()); !errors.As(err, &unknown) {
		t.Fatalf("a broker with another certificate and no peer CA: %v, want an unknown authority", err)
	}
	withCA := open(Config{TLSCert: cCert, TLSKey: cKey, PeerCA: bCert})
	peer, _ = withCA.peerClient()
	if err := get(peer, a.URL()); err != nil {
		t.Fatalf("with the other's certificate as peer CA: %v", err)
	}
}
