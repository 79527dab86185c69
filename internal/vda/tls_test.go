package vda_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/tlsconf"
	"github.com/usher-vdi/usher/internal/tlsconf/tlstest"
	"github.com/usher-vdi/usher/internal/vda"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// tlsBroker serves the machines call over TLS with pair's certificate,
// answering with its name.
func tlsBroker(t *testing.T, name string, pair tlstest.Pair) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"machines":[%q]}`, name)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.TLS = pair.TLSConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// TestClientRefusesBrokerCertificates: a broker whose certificate is
// self-signed and not trusted, issued for another host or expired is
// refused at once, with an error that names the broker and says why, and
// the client goes on to the next broker of its list, whose certificate
// the site's CA signed.
func TestClientRefusesBrokerCertificates(t *testing.T) {
	ca := tlstest.NewCA(t, "site")
	now := time.Now()
	good := tlsBroker(t, "good", ca.Valid(t, "good", "127.0.0.1"))
	cfg, err := tlsconf.ClientConfig("--broker-ca", ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		pair tlstest.Pair
		want string
	}{
		{"self-signed", tlstest.SelfSigned(t, t.TempDir(), "stranger", "127.0.0.1"), "not signed by a trusted CA"},
		{"wrong host", ca.Valid(t, "elsewhere", "broker.elsewhere.test"), "issued for another host name"},
		{"expired", ca.Issue(t, "old", []string{"127.0.0.1"}, now.Add(-48*time.Hour), now.Add(-time.Hour)), "expired"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := tlsBroker(t, c.name, c.pair)
			alone, err := vda.NewClient(vda.ClientConfig{BrokerURL: bad.URL, TLS: cfg, Attempts: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer alone.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err = alone.Machines(ctx, vdaproto.MachinesRequest{Secret: "s"})
			var cerr *vda.CertificateError
			if !errors.As(err, &cerr) || cerr.Broker != bad.URL {
				t.Fatalf("a broker with a bad certificate: %v, want a CertificateError naming %s", err, bad.URL)
			}
			t.Logf("refused: %v", err)
			if msg := err.Error(); !strings.Contains(msg, bad.URL) || !strings.Contains(msg, c.want) {
				t.Fatalf("error %q does not name the broker and say %q", msg, c.want)
			}

			both, err := vda.NewClient(vda.ClientConfig{BrokerURL: bad.URL + "," + good.URL, TLS: cfg,
				MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer both.CloseIdleConnections()
			if got := ask(t, both); got != "good" {
				t.Fatalf("answered by %q, want the next broker, good", got)
			}
			if both.Broker() != good.URL {
				t.Fatalf("the client uses %s, want %s", both.Broker(), good.URL)
			}
		})
	}
}

// TestClientRefusesPlainBrokerOffLoopback: an http:// broker URL off
// loopback is refused unless InsecureBroker.
func TestClientRefusesPlainBrokerOffLoopback(t *testing.T) {
	_, err := vda.NewClient(vda.ClientConfig{BrokerURL: "http://broker.example:8080"})
	if !errors.Is(err, vda.ErrPlainBroker) || !strings.Contains(err.Error(), "--insecure-broker") {
		t.Fatalf("a clear broker off loopback: %v, want ErrPlainBroker saying what to pass", err)
	}
	for _, u := range []string{"http://127.0.0.1:8080", "http://[::1]:8080", "http://localhost:8080", "https://broker.example"} {
		if _, err := vda.NewClient(vda.ClientConfig{BrokerURL: u}); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	if _, err := vda.NewClient(vda.ClientConfig{BrokerURL: "http://broker.example:8080", InsecureBroker: true}); err != nil {
		t.Fatalf("with InsecureBroker: %v", err)
	}
}
