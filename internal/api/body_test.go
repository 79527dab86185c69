package api_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// TestSlowBodyTimesOut: a client that sends the headers of a login and
// then stalls gets 408 once BodyTimeout has passed, well before the HTTP
// server's own ReadTimeout, and its connection is closed.
func TestSlowBodyTimesOut(t *testing.T) {
	s := sitetest.New(t, sitetest.Options{})
	signer, err := auth.NewSigner([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Config{Store: s.Store, Signer: signer, PasswordParams: cheap, Broker: s.Broker,
		EnrolmentSecret: enrolmentSecret, BodyTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(a)
	srv.Config.ReadTimeout = time.Minute
	srv.Start()
	defer srv.Close()

	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	start := time.Now()
	fmt.Fprintf(c, "POST /api/v1/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
		t.Fatalf("stalled body: %d, close %v; want 408 and close", resp.StatusCode, resp.Close)
	}
	if waited := time.Since(start); waited > 20*time.Second {
		t.Fatalf("answered after %s", waited)
	}
}

// TestBodiesMustBeJSON: a body of another type, or of none, is refused
// before it reaches a handler, on the user API as on the admin API.
func TestBodiesMustBeJSON(t *testing.T) {
	f := newFixture(t)
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/json-seq"} {
		req, _ := http.NewRequest("POST", f.srv.URL+"/api/v1/login", strings.NewReader(`{"username":"user0001","password":"x"}`))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		req.ContentLength = -1 // chunked: the type is checked once the body is in
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Errorf("login as %q: %d, want 415", ct, resp.StatusCode)
		}
	}
}
