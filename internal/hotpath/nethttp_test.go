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

// TestNetHTTPServesEverything: with Config.NetHTTP, net/http answers
// every request, hot paths included, over clear TCP and over TLS (with
// r.TLS set); nothing runs in the loop's context and Defer reports false,
// so a handler that would defer runs where it is and may wait.
func TestNetHTTPServesEverything(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "tls"}[overTLS], func(t *testing.T) {
			var deferred, onLoop int
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Context().Value(loopKey{}) != nil {
					onLoop++
				}
				if hotpath.Defer(w) {
					deferred++
				}
				state := "clear"
				if r.TLS != nil {
					state = fmt.Sprintf("tls %x %v", r.TLS.Version, r.TLS.HandshakeComplete)
				}
				fmt.Fprintf(w, "%s %s", r.URL.Path, state)
			})
			hs, err := hotpath.New(hotpath.Config{NetHTTP: true, Handler: h, Hot: isHot,
				LoopContext: func(ctx context.Context) context.Context { return context.WithValue(ctx, loopKey{}, true) },
				Fallback:    &http.Server{Handler: h, ErrorLog: discardLog()}})
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var client *http.Client
			scheme, want := "http", "clear"
			if overTLS {
				dir := t.TempDir()
				certFile, keyFile := tlstest.Valid(t, dir, "hot")
				r, err := tlsconf.NewReloader(certFile, keyFile, nil)
				if err != nil {
					t.Fatal(err)
				}
				cfg := r.ServerConfig()
				cfg.NextProtos = []string{"http/1.1"}
				ln = tls.NewListener(ln, cfg)
				tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tlstest.Pool(t, certFile)}}
				client, scheme, want = &http.Client{Transport: tr}, "https", fmt.Sprintf("tls %x true", tls.VersionTLS13)
			} else {
				client = &http.Client{Transport: &http.Transport{}}
			}
			done := make(chan error, 1)
			go func() { done <- hs.Serve(ln) }()
			paths := []string{"/hot/a", "/cold/b", "/hot/c", "/cold/d"}
			for i, path := range paths {
				resp, err := client.Get(scheme + "://" + ln.Addr().String() + path)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if got, want := string(body), path+" "+want; got != want {
					t.Errorf("request %d: %q, want %q", i, got, want)
				}
				if i == 1 {
					client.CloseIdleConnections()
				}
			}
			client.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := hs.Shutdown(ctx); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			if err := <-done; err != http.ErrServerClosed {
				t.Fatalf("serve: %v, want http.ErrServerClosed", err)
			}
			if onLoop != 0 || deferred != 0 {
				t.Errorf("%d requests in the loop's context, %d deferred: want none", onLoop, deferred)
			}
			if hot, handed := hs.Counts(); hot != 0 || handed != 2 {
				t.Errorf("%d answered by the loop, %d connections to net/http: want 0 and 2", hot, handed)
			}
		})
	}
}
