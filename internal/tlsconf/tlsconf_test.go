package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/tlsconf/tlstest"
)

// writePair writes a self-signed pair for the loopback addresses.
func writePair(t *testing.T, dir, name string, notBefore, notAfter time.Time) (certFile, keyFile string) {
	return tlstest.WritePair(t, dir, name, notBefore, notAfter)
}

type server struct{ URL string }

// serveTLS serves h over TLS with r's certificate on a loopback port
// until the test ends. (httptest's server would put its own certificate
// first.)
func serveTLS(t *testing.T, r *Reloader, h http.Handler) server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, ErrorLog: nil}
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(tls.NewListener(ln, r.ServerConfig())) }()
	t.Cleanup(func() { hs.Close(); <-done })
	return server{URL: "https://" + ln.Addr().String()}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestNewReloaderRefusesBadPairs(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	goodCert, goodKey := writePair(t, dir, "good", now.Add(-time.Hour), now.Add(time.Hour))
	_, otherKey := writePair(t, dir, "other", now.Add(-time.Hour), now.Add(time.Hour))
	oldCert, oldKey := writePair(t, dir, "old", now.Add(-2*time.Hour), now.Add(-time.Hour))
	for _, c := range []struct {
		name, cert, key, want string
	}{
		{"mismatched key", goodCert, otherKey, "private key does not match"},
		{"expired", oldCert, oldKey, "expired at"},
		{"missing file", filepath.Join(dir, "none.crt"), goodKey, "none.crt"},
		{"no key", goodCert, "", "both"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewReloader(c.cert, c.key, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("NewReloader: %v, want an error saying %q", err, c.want)
			}
		})
	}
	if _, err := NewReloader(goodCert, goodKey, nil); err != nil {
		t.Fatal(err)
	}
}

// TestRotationKeepsConnections rotates the certificate under a running
// TLS server: a connection opened before the change stays up and keeps
// working, new handshakes get the new certificate, and a bad pair
// written over the files is refused while the last good one serves on.
func TestRotationKeepsConnections(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	aCert, aKey := writePair(t, dir, "a", now.Add(-time.Hour), now.Add(time.Hour))
	bCert, bKey := writePair(t, dir, "b", now.Add(-time.Hour), now.Add(time.Hour))
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	copyFile(t, aCert, certFile)
	copyFile(t, aKey, keyFile)
	r, err := NewReloader(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	clock := now
	r.now = func() time.Time { return clock }

	srv := serveTLS(t, r, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))

	subject := func(c *http.Client) string {
		t.Helper()
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.TLS.PeerCertificates[0].Subject.CommonName
	}
	insecure := &tls.Config{InsecureSkipVerify: true}
	kept := &http.Client{Transport: &http.Transport{TLSClientConfig: insecure}}
	if got := subject(kept); got != "a" {
		t.Fatalf("first certificate %q, want a", got)
	}

	copyFile(t, bCert, certFile)
	copyFile(t, bKey, keyFile)
	clock = clock.Add(2 * checkEvery)
	fresh := func() *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: insecure, DisableKeepAlives: true}}
	}
	if got := r.Current().Subject.CommonName; got != "b" {
		t.Fatalf("after the change, before a handshake: Current is %q, want b", got)
	}
	if got := subject(fresh()); got != "b" {
		t.Fatalf("after the change: certificate %q, want b", got)
	}
	// The connection of before is still the one in use, with its
	// handshake's certificate.
	var reused bool
	resp, err := kept.Get(srv.URL)
	if err != nil {
		t.Fatalf("the connection opened before the change: %v", err)
	}
	reused = resp.TLS.DidResume || resp.TLS.PeerCertificates[0].Subject.CommonName == "a"
	resp.Body.Close()
	if !reused {
		t.Fatal("the kept-alive connection was not the one opened before the change")
	}

	// A key that does not match, written over the key file: refused, the
	// good pair serves on.
	copyFile(t, aKey, keyFile)
	clock = clock.Add(2 * checkEvery)
	if got := subject(fresh()); got != "b" {
		t.Fatalf("after a bad change: certificate %q, want b kept", got)
	}
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("Reload of a mismatched pair: %v", err)
	}
}

func TestCheckListen(t *testing.T) {
	for _, c := range []struct {
		addr             string
		hasTLS, insecure bool
		wantErr          bool
	}{
		{"127.0.0.1:8080", false, false, false},
		{"[::1]:8080", false, false, false},
		{"localhost:8080", false, false, false},
		{"unix:/run/x.sock", false, false, false},
		{":8080", false, false, true},
		{"0.0.0.0:8080", false, false, true},
		{"192.0.2.1:8080", false, false, true},
		{":8080", true, false, false},
		{":8080", false, true, false},
	} {
		err := CheckListen("--listen", c.addr, c.hasTLS, c.insecure)
		if (err != nil) != c.wantErr {
			t.Errorf("CheckListen(%q, tls=%v, insecure=%v) = %v, want error %v", c.addr, c.hasTLS, c.insecure, err, c.wantErr)
		}
		if err != nil && (!errors.Is(err, ErrPlainListener) || !strings.Contains(err.Error(), "--listen "+c.addr)) {
			t.Errorf("error %q does not name the listener or is not ErrPlainListener", err)
		}
	}
}

func TestPinnedConfig(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	cert, key := writePair(t, dir, "pinned", now.Add(-time.Hour), now.Add(time.Hour))
	r, err := NewReloader(cert, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveTLS(t, r, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	get := func(pin string) error {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: PinnedConfig(pin), DisableKeepAlives: true}}
		resp, err := c.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(Fingerprint(r.Leaf().Raw)); err != nil {
		t.Fatalf("the pinned certificate: %v", err)
	}
	if err := get(strings.Repeat("0", 64)); err == nil || !strings.Contains(err.Error(), "not the one pinned") {
		t.Fatalf("another pin: %v, want a pin mismatch", err)
	}
}

func TestSelfSigned(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, err := SelfSigned(dir, []string{"broker.test"})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(keyFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	r, err := NewReloader(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := Fingerprint(r.Leaf().Raw)
	if err := r.Leaf().VerifyHostname("broker.test"); err != nil {
		t.Fatal(err)
	}
	if err := r.Leaf().VerifyHostname("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	// Made once: a second call keeps it.
	if _, _, err := SelfSigned(dir, nil); err != nil {
		t.Fatal(err)
	}
	r2, err := NewReloader(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	if Fingerprint(r2.Leaf().Raw) != first {
		t.Fatal("a second SelfSigned replaced a valid certificate")
	}
	// A client that trusts it as a CA file verifies a server serving it.
	cfg, err := ClientConfig("--broker-ca", certFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveTLS(t, r, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatalf("a client trusting the self-signed certificate: %v", err)
	}
	resp.Body.Close()
	// One that does not, names the certificate's problem.
	resp, err = http.Get(srv.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatal("a client with the system roots accepted a self-signed certificate")
	}
	if !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("untrusted: %v, want a certificate error", err)
	}
}

// TestTrustPool trusts a server whose certificate is in also, with the
// system roots or with a CA bundle, and names a file that holds none.
func TestTrustPool(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	cert, key := writePair(t, dir, "own", now.Add(-time.Hour), now.Add(time.Hour))
	caCert, _ := writePair(t, dir, "ca", now.Add(-time.Hour), now.Add(time.Hour))
	r, err := NewReloader(cert, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveTLS(t, r, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	get := func(pool *x509.CertPool) error {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
		resp, err := c.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for _, ca := range []string{"", caCert} {
		pool, err := TrustPool("--peer-ca", ca, cert)
		if err != nil {
			t.Fatal(err)
		}
		if err := get(pool); err != nil {
			t.Fatalf("with CA file %q and the server's own certificate: %v", ca, err)
		}
	}
	pool, err := TrustPool("--peer-ca", caCert)
	if err != nil {
		t.Fatal(err)
	}
	if err := get(pool); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the server's certificate: %v, want a certificate error", err)
	}
	if _, err := TrustPool("--peer-ca", "", key); err == nil || !strings.Contains(err.Error(), key) {
		t.Fatalf("a key file as a certificate: %v, want an error naming it", err)
	}
}
