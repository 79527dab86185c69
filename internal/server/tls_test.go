package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/tlsconf"
	"github.com/usher-vdi/usher/internal/tlsconf/tlstest"
)

const farmData = `<?xml version="1.0"?><NFuseProtocol version="4.6"><RequestServerFarmData><Nil/></RequestServerFarmData></NFuseProtocol>`

// tlsClient trusts exactly the certificates of pool, HTTP/1.1 with
// keep-alive.
func tlsClient(pool *x509.CertPool) *http.Client {
	return &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
}

// tcall sends a request and returns the answer's status, header and body,
// and whether it came on a reused connection.
func tcall(t *testing.T, c *http.Client, method, url, body string) (*http.Response, string, bool) {
	t.Helper()
	var reused bool
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused }})
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case strings.HasPrefix(body, "{"):
		req.Header.Set("Content-Type", "application/json")
	case body != "":
		req.Header.Set("Content-Type", "text/xml")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b), reused
}

// TestOpenTLS serves a demo site's listeners over TLS with a self-signed
// certificate made in the data directory: the simulated VDAs register
// through it, verifying it; a client trusting it gets the portal, the
// REST API and NFuse (on the loop and handed over, on one kept-alive
// connection) with HSTS and a Secure session cookie; a client that does
// not trust it gets a certificate error at once; a peer that goes away
// mid-handshake leaves the listener serving.
func TestOpenTLS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	data := t.TempDir()
	s, err := server.Open(ctx, server.Config{DataDir: data, Listen: "127.0.0.1:0", NFuseListen: "127.0.0.1:0",
		TLSCert: server.TLSAuto, Demo: true, DemoPassword: "pw-1234", SimVDAs: 4, SimLogonDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !strings.HasPrefix(s.URL(), "https://") || !strings.HasPrefix(s.NFuseURL(), "https://") {
		t.Fatalf("URLs %s and %s, want https", s.URL(), s.NFuseURL())
	}
	if got, want := s.TLSCertFile(), filepath.Join(s.DataDir(), tlsconf.SelfSignedCert); got != want {
		t.Fatalf("certificate file %s, want %s", got, want)
	}
	if reg, total := s.WaitSimulated(ctx, time.Minute); reg != total || total != 4 {
		t.Fatalf("%d of %d simulated VDAs registered over TLS", reg, total)
	}

	c := tlsClient(tlstest.Pool(t, s.TLSCertFile()))
	for i, r := range []struct{ method, url, body, want string }{
		{"POST", s.URL() + "/scripts/wpnbr.dll", farmData, "<ServerFarmName>"},
		{"POST", s.URL() + "/Scripts/WPnBr.dll", farmData, "<ServerFarmName>"}, // hot loop, kept alive
		{"GET", s.URL() + "/", "", "/portal/portal.js"},                        // handed to net/http
		{"GET", s.URL() + "/healthz", "", "ok"},
		{"GET", s.URL() + "/api/openapi.json", "", "openapi"},
		{"POST", s.NFuseURL() + "/scripts/wpnbr.dll", farmData, "<ServerFarmName>"},
	} {
		resp, body, reused := tcall(t, c, r.method, r.url, r.body)
		if resp.StatusCode != 200 || !strings.Contains(body, r.want) {
			t.Fatalf("%s %s: %d, want 200 with %q: %.300s", r.method, r.url, resp.StatusCode, r.want, body)
		}
		if got := resp.Header.Get("Strict-Transport-Security"); !strings.HasPrefix(got, "max-age=") {
			t.Errorf("%s %s: Strict-Transport-Security %q", r.method, r.url, got)
		}
		if resp.Proto != "HTTP/1.1" || resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
			t.Errorf("%s %s: %s over %v", r.method, r.url, resp.Proto, resp.TLS)
		}
		if (i == 1 || i == 2) && !reused {
			t.Errorf("%s %s: not on the kept-alive connection", r.method, r.url)
		}
	}

	t.Run("session cookie is Secure", func(t *testing.T) {
		resp, body, _ := tcall(t, c, "POST", s.URL()+"/api/v1/login", `{"username":"user0001","password":"pw-1234","session_cookie":true}`)
		if resp.StatusCode != 200 {
			t.Fatalf("login: %d %s", resp.StatusCode, body)
		}
		cookies := resp.Cookies()
		if len(cookies) == 0 || !cookies[0].Secure {
			t.Fatalf("cookies %v: want a Secure session cookie", cookies)
		}
	})

	t.Run("untrusted client", func(t *testing.T) {
		for _, url := range []string{s.URL() + "/healthz", s.NFuseURL() + "/scripts/wpnbr.dll"} {
			start := time.Now()
			c := &http.Client{Timeout: 20 * time.Second}
			_, err := c.Get(url)
			var unknown x509.UnknownAuthorityError
			if !errors.As(err, &unknown) {
				t.Fatalf("GET %s with the system roots: %v, want an unknown authority error", url, err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("the certificate error took %s", d)
			}
		}
	})

	t.Run("clear HTTP to the TLS port", func(t *testing.T) {
		c := &http.Client{Timeout: 20 * time.Second}
		if _, err := c.Get("http://" + s.Addr() + "/healthz"); err == nil {
			t.Fatal("a clear request was answered")
		}
	})

	t.Run("peer gone mid-handshake", func(t *testing.T) {
		hello := clientHello(t)
		for _, n := range []int{0, 3, 5, len(hello) / 2, len(hello)} {
			conn, err := net.Dial("tcp", s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			conn.Write(hello[:n])
			conn.Close()
		}
		if resp, body, _ := tcall(t, tlsClient(tlstest.Pool(t, s.TLSCertFile())), "GET", s.URL()+"/healthz", ""); resp.StatusCode != 200 {
			t.Fatalf("after broken handshakes: %d %s", resp.StatusCode, body)
		}
	})
}

// clientHello returns the first flight of a real TLS client.
func clientHello(t *testing.T) []byte {
	t.Helper()
	a, b := net.Pipe()
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		p := make([]byte, 4096)
		n, _ := b.Read(p)
		buf.Write(p[:n])
		b.Close()
	}()
	tls.Client(a, &tls.Config{ServerName: "localhost"}).Handshake()
	<-done
	a.Close()
	return buf.Bytes()
}

// TestOpenTLSRotation rotates the listener's certificate under load:
// files replaced (seen on their own) and files replaced then ReloadTLS
// (SIGHUP's path). A kept-alive connection opened before keeps working
// on its handshake; new handshakes get the new certificate; a pair that
// does not match is refused and the last good one serves on.
func TestOpenTLSRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	aCert, aKey := tlstest.Valid(t, dir, "a")
	bCert, bKey := tlstest.Valid(t, dir, "b")
	cCert, cKey := tlstest.Valid(t, dir, "c")
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	tlstest.Replace(t, aCert, aKey, cert, key)
	s, err := server.Open(ctx, server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", TLSCert: cert, TLSKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	pool := x509.NewCertPool()
	for _, f := range []string{aCert, bCert, cCert} {
		pool.AppendCertsFromPEM(must(t, f))
	}
	kept := tlsClient(pool)
	subject := func(c *http.Client) (string, bool) {
		t.Helper()
		resp, _, reused := tcall(t, c, "GET", s.URL()+"/healthz", "")
		return resp.TLS.PeerCertificates[0].Subject.CommonName, reused
	}
	fresh := func() string {
		c := tlsClient(pool)
		defer c.CloseIdleConnections()
		got, _ := subject(c)
		return got
	}
	if got, _ := subject(kept); got != "a" {
		t.Fatalf("first certificate %q, want a", got)
	}

	// SIGHUP's path: the files replaced, then reloaded at once.
	tlstest.Replace(t, bCert, bKey, cert, key)
	if err := s.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	if got := fresh(); got != "b" {
		t.Fatalf("after ReloadTLS: certificate %q, want b", got)
	}
	if got, reused := subject(kept); got != "a" || !reused {
		t.Fatalf("the connection of before: certificate %q, reused %v; want a on the same connection", got, reused)
	}

	// The files replaced alone: seen within a second or so.
	tlstest.Replace(t, cCert, cKey, cert, key)
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for fresh() != "c" {
		if time.Now().After(deadline) {
			t.Fatal("the replaced files were not loaded within 10s")
		}
		<-tick.C
	}
	if got, reused := subject(kept); got != "a" || !reused {
		t.Fatalf("the connection of before, after the second rotation: %q, reused %v", got, reused)
	}

	// A key that does not match: refused, naming the files; c serves on.
	tlstest.Replace(t, cCert, aKey, cert, key)
	if err := s.ReloadTLS(); err == nil || !strings.Contains(err.Error(), cert) || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("ReloadTLS of a mismatched pair: %v", err)
	}
	if got := fresh(); got != "c" {
		t.Fatalf("after a refused pair: certificate %q, want c", got)
	}
}

func must(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOpenTLSRefuses checks the start's refusals: a pair that has
// expired or whose key does not match (naming the files), a clear
// listener off loopback (naming the flag); and that InsecureListen lets
// one start, with a warning.
func TestOpenTLSRefuses(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	goodCert, _ := tlstest.Valid(t, dir, "good")
	_, otherKey := tlstest.Valid(t, dir, "other")
	oldCert, oldKey := tlstest.WritePair(t, dir, "old", now.Add(-48*time.Hour), now.Add(-time.Hour))
	for _, c := range []struct {
		name string
		cfg  server.Config
		want []string
	}{
		{"expired", server.Config{TLSCert: oldCert, TLSKey: oldKey}, []string{oldCert, "expired at"}},
		{"key does not match", server.Config{TLSCert: goodCert, TLSKey: otherKey}, []string{goodCert, otherKey, "does not match"}},
		{"missing key", server.Config{TLSCert: goodCert}, []string{"--tls-key"}},
		{"clear off loopback", server.Config{Listen: "0.0.0.0:0"}, []string{"--listen 0.0.0.0:0", "--insecure-listen"}},
		{"clear NFuse off loopback", server.Config{NFuseListen: ":0"}, []string{"--nfuse-listen :0", "--insecure-listen"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.DataDir = t.TempDir()
			if c.cfg.Listen == "" {
				c.cfg.Listen = "127.0.0.1:0"
			}
			s, err := server.Open(context.Background(), c.cfg)
			if err == nil {
				s.Close()
				t.Fatal("Open accepted it")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Open: %v; want it to say %q", err, w)
				}
			}
		})
	}
	t.Run("insecure listen", func(t *testing.T) {
		var logs syncBuffer
		s, err := server.Open(context.Background(), server.Config{DataDir: t.TempDir(), Listen: "0.0.0.0:0", InsecureListen: true,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if !strings.Contains(logs.String(), "INSECURE") {
			t.Fatalf("no warning in the log:\n%s", logs.String())
		}
		_, port, _ := net.SplitHostPort(s.Addr())
		if code, _ := get(t, "http://127.0.0.1:"+port+"/healthz"); code != 200 {
			t.Fatalf("/healthz: %d", code)
		}
	})
}

// TestZoneLeaderOverTLS: two brokers of a zone, each with a certificate
// of its own and the other's as its peer CA, lose their site DB; the
// second hands its zone, and its sessions, to the first over https,
// verifying its certificate.
func TestZoneLeaderOverTLS(t *testing.T) {
	t.Parallel()
	cs := newCutSite(t)
	dir := t.TempDir()
	aCert, aKey := tlstest.Valid(t, dir, "a")
	bCert, bKey := tlstest.Valid(t, dir, "b")
	cfgA := cs.lhcConfig(t, t.TempDir())
	cfgA.Name, cfgA.SimVDAs = "lhc-a", 4
	cfgA.TLSCert, cfgA.TLSKey, cfgA.PeerCA = aCert, aKey, bCert
	a, err := server.Open(context.Background(), cfgA)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	cfgB := cfgA
	cfgB.DataDir, cfgB.Name, cfgB.Demo, cfgB.DemoPassword, cfgB.SimVDAs = t.TempDir(), "lhc-b", false, "", 0
	cfgB.TLSCert, cfgB.TLSKey, cfgB.PeerCA = bCert, bKey, aCert
	b, err := server.Open(context.Background(), cfgB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if reg, total := a.WaitSimulated(context.Background(), time.Minute); reg != total {
		t.Fatalf("%d of %d simulated VDAs registered over TLS", reg, total)
	}
	for _, s := range []*server.Server{a, b} {
		waitFor(t, 30*time.Second, "the first local copy", func() bool { return !s.LHC().Status().CopyAt.IsZero() })
	}
	cs.wan.Cut()
	waitFor(t, 30*time.Second, "broker b handing its zone to a over https", func() bool {
		leader, elsewhere := b.Broker().Leader()
		return elsewhere && leader == "lhc-a"
	})
	waitFor(t, 30*time.Second, "broker b handing its sessions to a over https", b.HandedOver)
	cs.restore(t)
}
