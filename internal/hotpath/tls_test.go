package hotpath_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/hotpath"
	"github.com/usher-vdi/usher/internal/tlsconf"
	"github.com/usher-vdi/usher/internal/tlsconf/tlstest"
)

// TestTLSState: over a TLS listener (Goroutines mode), every request
// knows it came over TLS, with the connection's real state: those the
// server answers itself and those it hands to net/http, which sets
// r.TLS only for its own *tls.Conn. (A handler that sets a Secure
// cookie, or reads a client certificate, depends on it.)
func TestTLSState(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := tlstest.Valid(t, dir, "hot")
	r, err := tlsconf.NewReloader(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.TLS == nil {
			io.WriteString(w, "clear")
			return
		}
		fmt.Fprintf(w, "tls %x %v", req.TLS.Version, req.TLS.HandshakeComplete)
	})
	hs, err := hotpath.New(hotpath.Config{Goroutines: true, Handler: h, Hot: isHot,
		Fallback: &http.Server{Handler: h, ErrorLog: discardLog()}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := r.ServerConfig()
	cfg.NextProtos = []string{"http/1.1"}
	go hs.Serve(tls.NewListener(ln, cfg))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
	})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tlstest.Pool(t, certFile)}}}
	want := fmt.Sprintf("tls %x true", tls.VersionTLS13)
	// Hot and handed over, each on a connection of its own and then on
	// one kept alive.
	for i, path := range []string{"/hot/a", "/cold/b", "/hot/c", "/cold/d"} {
		resp, err := client.Get("https://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != want {
			t.Errorf("request %d (%s): %q, want %q", i, path, body, want)
		}
		if i == 1 {
			client.CloseIdleConnections()
		}
	}
	if hot, handed := hs.Counts(); hot == 0 || handed == 0 {
		t.Fatalf("%d hot, %d handed over: both paths should have served", hot, handed)
	}
}
