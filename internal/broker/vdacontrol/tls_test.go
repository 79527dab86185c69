package vdacontrol_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/broker/vdacontrol"
	"github.com/usher-vdi/usher/internal/tlsconf"
	"github.com/usher-vdi/usher/internal/tlsconf/tlstest"
)

// controlListener is a VDA's control listener over TLS, serving the
// certificate in its files, that counts connections and remembers the
// tokens presented to it.
type controlListener struct {
	URL               string
	certFile, keyFile string
	certs             *tlsconf.Reloader

	mu     sync.Mutex
	conns  int
	tokens []string
}

func newControlListener(t *testing.T, first tlstest.Pair) *controlListener {
	t.Helper()
	dir := t.TempDir()
	l := &controlListener{certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem")}
	first.Install(t, l.certFile, l.keyFile)
	var err error
	if l.certs, err = tlsconf.NewReloader(l.certFile, l.keyFile, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.URL = "https://" + ln.Addr().String()
	srv := &http.Server{
		ErrorLog: log.New(io.Discard, "", 0), // the refused handshakes
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l.mu.Lock()
			l.tokens = append(l.tokens, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
			l.mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		}),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				l.mu.Lock()
				l.conns++
				l.mu.Unlock()
			}
		},
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(tls.NewListener(ln, l.certs.ServerConfig())) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return l
}

func (l *controlListener) seen() (conns int, tokens []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conns, append([]string(nil), l.tokens...)
}

func pin(p tlstest.Pair) string { return tlsconf.Fingerprint(p.Leaf.Raw) }

// TestPinnedControlRefusesAStranger: the broker sends the control token to
// the listener that shows the pinned certificate, and refuses one that
// shows another (a stranger at the machine's control address, whatever
// CA signed its certificate): that one gets no token, and the error names
// the machine.
func TestPinnedControlRefusesAStranger(t *testing.T) {
	ca := tlstest.NewCA(t, "site")
	vda := ca.Valid(t, "vda-1", "127.0.0.1")
	stranger := newControlListener(t, ca.Valid(t, "stranger", "127.0.0.1"))
	real := newControlListener(t, vda)
	c := vdacontrol.NewWith(vdacontrol.Options{CAs: mustPool(t, ca.CertFile)})
	defer c.CloseIdleConnections()
	ctx := context.Background()

	if err := c.Logoff(ctx, broker.Control{Machine: "vda-1", URL: real.URL, Token: "the-token", Pin: pin(vda)}, "s1"); err != nil {
		t.Fatalf("the pinned listener: %v", err)
	}
	if _, tokens := real.seen(); len(tokens) != 1 || tokens[0] != "the-token" {
		t.Fatalf("the pinned listener got tokens %q", tokens)
	}

	err := c.Logoff(ctx, broker.Control{Machine: "vda-1", URL: stranger.URL, Token: "the-token", Pin: pin(vda)}, "s1")
	if !errors.Is(err, vdacontrol.ErrWrongCertificate) || !errors.Is(err, tlsconf.ErrPinMismatch) {
		t.Fatalf("a stranger's listener: %v, want ErrWrongCertificate", err)
	}
	if !strings.Contains(err.Error(), `machine "vda-1"`) || !strings.Contains(err.Error(), stranger.URL) {
		t.Fatalf("error %q does not name the machine and its control URL", err)
	}
	if _, tokens := stranger.seen(); len(tokens) != 0 {
		t.Fatalf("the stranger got tokens %q", tokens)
	}

	// Without a pin, the site's CA verifies the listener's name: both are
	// signed by it, so either is accepted.
	if err := c.Logoff(ctx, broker.Control{Machine: "vda-1", URL: real.URL, Token: "the-token"}, "s1"); err != nil {
		t.Fatalf("no pin, a certificate of the site's CA: %v", err)
	}
	// And without the site's CA, the system roots refuse them.
	plain := vdacontrol.New()
	defer plain.CloseIdleConnections()
	if err := plain.Logoff(ctx, broker.Control{Machine: "vda-1", URL: real.URL, Token: "the-token"}, "s1"); err == nil {
		t.Fatal("no pin and no site CA: a certificate of an unknown CA was accepted")
	}
}

// TestPlainControlOffLoopback: no control token goes to an http:// control
// URL off loopback unless the site allows it; loopback ones (simulated
// VDAs) are always allowed, and a pin needs https.
func TestPlainControlOffLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	off := broker.Control{Machine: "vda-9", URL: "http://192.0.2.9:8490", Token: "the-token"}
	err := vdacontrol.New().Disconnect(ctx, off, "s1")
	if !errors.Is(err, vdacontrol.ErrPlainControl) || !strings.Contains(err.Error(), `machine "vda-9"`) {
		t.Fatalf("a clear control URL off loopback: %v, want ErrPlainControl naming the machine", err)
	}
	allowed := vdacontrol.NewWith(vdacontrol.Options{AllowPlain: true, Timeout: 50 * time.Millisecond})
	defer allowed.CloseIdleConnections()
	if err := allowed.Disconnect(ctx, off, "s1"); errors.Is(err, vdacontrol.ErrPlainControl) {
		t.Fatalf("allowed by the site: %v", err)
	}
	pinned := off
	pinned.Pin = strings.Repeat("ab", 32)
	if err := allowed.Disconnect(ctx, pinned, "s1"); err == nil || !strings.Contains(err.Error(), "pin") {
		t.Fatalf("a pin with a clear control URL: %v", err)
	}
}

// TestRotatedCertificateKeepsTheConnection: the VDA's certificate is
// rotated under a connection the broker keeps: that connection goes on
// carrying calls for the old pin; once the VDA registered the new pin,
// calls go on a new connection that shows the new certificate; and a new
// connection for the old pin is refused.
func TestRotatedCertificateKeepsTheConnection(t *testing.T) {
	ca := tlstest.NewCA(t, "site")
	old, fresh := ca.Valid(t, "vda-1-old", "127.0.0.1"), ca.Valid(t, "vda-1-new", "127.0.0.1")
	l := newControlListener(t, old)
	c := vdacontrol.New()
	defer c.CloseIdleConnections()
	ctx := context.Background()
	call := func(p tlstest.Pair) error {
		return c.Logoff(ctx, broker.Control{Machine: "vda-1", URL: l.URL, Token: "the-token", Pin: pin(p)}, "s1")
	}
	if err := call(old); err != nil {
		t.Fatal(err)
	}
	fresh.Install(t, l.certFile, l.keyFile)
	if err := l.certs.Reload(); err != nil { // as SIGHUP does
		t.Fatal(err)
	}
	if err := call(old); err != nil {
		t.Fatalf("the kept connection after the rotation: %v", err)
	}
	if conns, _ := l.seen(); conns != 1 {
		t.Fatalf("%d connections after the rotation, want the first kept", conns)
	}
	if err := call(fresh); err != nil {
		t.Fatalf("the new pin: %v", err)
	}
	if conns, _ := l.seen(); conns != 2 {
		t.Fatalf("%d connections, want a new one for the new pin", conns)
	}
	c.CloseIdleConnections()
	if err := call(old); !errors.Is(err, vdacontrol.ErrWrongCertificate) {
		t.Fatalf("a new connection for the old pin: %v, want ErrWrongCertificate", err)
	}
}

func mustPool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	pool, err := tlsconf.LoadCAs("site CA", file)
	if err != nil {
		t.Fatal(err)
	}
	return pool
}
