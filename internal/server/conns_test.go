package server_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/server"
)

// TestIdleConnectionsFromOneHostCannotStopLogons replays the finding
// against a running site with its default bounds: 5,000 idle keep-alive
// connections from one host (127.0.0.1) used up the broker's descriptors
// and nobody could log on. The host keeps DefaultMaxConnsPerClient of
// them, the rest are refused at once, and another host (127.0.0.2) logs
// on and enumerates over REST and NFuse as usual.
func TestIdleConnectionsFromOneHostCannotStopLogons(t *testing.T) {
	flood := 5000
	const perClient = server.DefaultMaxConnsPerClient
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < uint64(flood+2*perClient+500) {
		flood = int(lim.Cur) - 2*perClient - 500
		t.Logf("open files limit %d: %d connections in the flood", lim.Cur, flood)
		if flood <= perClient {
			t.Skipf("open files limit %d is too low for the flood", lim.Cur)
		}
	}
	s, _ := openSite(t, nil)

	var mu sync.Mutex
	var held []net.Conn
	refused := 0
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	next := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				c, err := net.Dial("tcp", s.Addr())
				if err != nil {
					errs <- err
					return
				}
				c.SetDeadline(time.Now().Add(20 * time.Second))
				// Half ask net/http (health), half the loop (an
				// enumeration without credentials).
				path := "/healthz"
				if i%2 == 1 {
					path = "/api/v1/resources"
				}
				code, err := exchangeOnce(c, path)
				mu.Lock()
				switch {
				case err == nil && code != http.StatusServiceUnavailable:
					held = append(held, c)
					mu.Unlock()
					continue
				case err == nil || isRefusal(err):
					refused++
				default:
					errs <- fmt.Errorf("GET %s: %v", path, err)
				}
				mu.Unlock()
				c.Close()
			}
		}()
	}
	for i := range flood {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(held) != perClient || refused != flood-perClient {
		t.Fatalf("127.0.0.1 holds %d connections and had %d refused, want %d and %d", len(held), refused, perClient, flood-perClient)
	}

	start := time.Now()
	other := client("127.0.0.2")
	a := restLogon(t, other, s, "user0001", demoPassword)
	if a.status != http.StatusOK {
		t.Fatalf("REST logon from 127.0.0.2: %d %s", a.status, a.body)
	}
	var lr struct{ Token string }
	json.Unmarshal([]byte(a.body), &lr)
	req, _ := http.NewRequest("GET", s.URL()+"/api/v1/resources", nil)
	req.Header.Set("Authorization", "Bearer "+lr.Token)
	resp, err := other.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"resources"`) {
		t.Fatalf("enumeration from 127.0.0.2: %d %.200s", resp.StatusCode, body)
	}
	if a := nfuseLogon(t, other, s, "user0001", demoPassword); !nfuseOK(a) {
		t.Fatalf("NFuse logon from 127.0.0.2: %d %.300s", a.status, a.body)
	}
	t.Logf("127.0.0.2 logged on and enumerated in %v beside %d idle connections from 127.0.0.1", time.Since(start), len(held))

	metrics := get2(t, other, s.URL()+"/metrics", nil)
	for _, want := range []string{
		fmt.Sprintf(`usher_http_connections_refused_total{reason="per_client"} %d`, flood-perClient),
		`usher_http_connections_refused_total{reason="total"} 0`,
		fmt.Sprintf("usher_http_connections_per_client_max %d", perClient),
	} {
		if !strings.Contains(metrics.body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	other.CloseIdleConnections()
}

// exchangeOnce sends a keep-alive GET of path on c and reads the answer's
// status, its body read whole.
func exchangeOnce(c net.Conn, path string) (int, error) {
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: usher\r\n\r\n", path); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// isRefusal reports an error from a connection closed or reset before
// its answer.
func isRefusal(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
