package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeConnectionBounds: usher serve's --max-conns-per-client and
// --max-conns reach the listener. A third connection from one address is
// refused; with every connection taken, a newcomer gets the slot of the
// one idle longest; the bounds show in the metrics, and the open files
// limit in the debug log.
func TestServeConnectionBounds(t *testing.T) {
	s := startServe(t, "--data", t.TempDir(), "--max-conns-per-client", "2", "--max-conns", "3", "--log-level", "debug")
	addr := strings.TrimPrefix(s.url, "http://")
	dial := func(from string) (net.Conn, *bufio.Reader) {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(20 * time.Second))
		return c, bufio.NewReader(c)
	}
	ask := func(c net.Conn, br *bufio.Reader, path string) (int, string, error) {
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: usher\r\n\r\n", path); err != nil {
			return 0, "", err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, "", err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b), err
	}
	mustAsk := func(c net.Conn, br *bufio.Reader) {
		t.Helper()
		if code, _, err := ask(c, br, "/healthz"); code != http.StatusOK || err != nil {
			t.Fatalf("GET /healthz from %s: %d, %v", c.LocalAddr(), code, err)
		}
	}

	first, firstR := dial("127.0.0.1")
	mustAsk(first, firstR)
	second, secondR := dial("127.0.0.1")
	mustAsk(second, secondR)
	third, thirdR := dial("127.0.0.1")
	code, _, err := ask(third, thirdR, "/healthz")
	if code != http.StatusServiceUnavailable && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("a third connection from 127.0.0.1: %d, %v; want it refused", code, err)
	}
	other, otherR := dial("127.0.0.2")
	mustAsk(other, otherR)
	// Every connection is taken: the first, idle longest, makes room.
	last, lastR := dial("127.0.0.3")
	code, body, err := ask(last, lastR, "/metrics")
	if code != http.StatusOK || err != nil {
		t.Fatalf("GET /metrics with every connection taken: %d, %v", code, err)
	}
	for _, want := range []string{"usher_http_connections_max 3", "usher_http_connections_per_client_max 2",
		`usher_http_connections_refused_total{reason="per_client"} 1`, "usher_http_connections_evicted_total 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if _, err := firstR.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the connection idle longest: read %v, want it closed", err)
	}
	mustAsk(second, secondR)
	if log := s.stderr.String(); !strings.Contains(log, "open files limit") {
		t.Errorf("the debug log does not name the open files limit:\n%s", log)
	}
}

// TestServeHTTPServerFlag: usher serve --http-server net/http reaches
// the site, which says so, and serves the API and NFuse on net/http; an
// unknown server is a usage error.
func TestServeHTTPServerFlag(t *testing.T) {
	s := startServe(t, "--data", t.TempDir(), "--http-server", "net/http")
	if log := s.stderr.String(); !strings.Contains(log, "http_server=net/http") {
		t.Fatalf("the log does not say net/http serves:\n%s", log)
	}
	farm := `<?xml version="1.0"?><NFuseProtocol version="4.6"><RequestServerFarmData><Nil/></RequestServerFarmData></NFuseProtocol>`
	resp, err := http.Post(s.url+"/scripts/wpnbr.dll", "text/xml", strings.NewReader(farm))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "<ServerFarmName>") {
		t.Fatalf("NFuse: %d %.300s", resp.StatusCode, b)
	}
	if code, _ := get(t, s.url+"/healthz", "", ""); code != http.StatusOK {
		t.Fatalf("GET /healthz: %d", code)
	}
	code, _, stderr := run(t, "", "serve", "--data", t.TempDir(), "--http-server", "nginx")
	if want := `--http-server "nginx": want hotpath or net/http`; code != 2 || !strings.Contains(stderr, want) {
		t.Fatalf("--http-server nginx: exit %d, stderr %q; want 2 and %q", code, stderr, want)
	}
}
