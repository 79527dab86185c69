package hotpath_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/hotpath"
)

// serveMode sets how a Server serves its connections.
type serveMode func(*hotpath.Config)

// allModes runs test on the event loop, on a goroutine per connection,
// and with net/http alone (Config.NetHTTP).
func allModes(t *testing.T, test func(t *testing.T, mode serveMode)) {
	t.Run("loop", func(t *testing.T) { test(t, func(*hotpath.Config) {}) })
	t.Run("goroutines", func(t *testing.T) { test(t, func(c *hotpath.Config) { c.Goroutines = true }) })
	t.Run("net/http", func(t *testing.T) { test(t, func(c *hotpath.Config) { c.NetHTTP = true }) })
}

// limited is a hotpath server with a Limiter, whose handler answers
// /hot/fixed on the loop, /cold on net/http, and /cold/slow on net/http
// once it receives from release (telling entered first).
type limited struct {
	lim     *hotpath.Limiter
	srv     *hotpath.Server
	addr    string
	entered chan struct{}
	release chan struct{}
}

func startLimited(t *testing.T, mode serveMode, cfg hotpath.LimitConfig) *limited {
	t.Helper()
	return startLimitedTuned(t, mode, cfg, nil)
}

func startLimitedTuned(t *testing.T, mode serveMode, cfg hotpath.LimitConfig, tune func(*http.Server)) *limited {
	t.Helper()
	ls := &limited{lim: hotpath.NewLimiter(cfg), entered: make(chan struct{}, 100), release: make(chan struct{})}
	mux := http.NewServeMux()
	fixed := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "3")
		io.WriteString(w, "ok\n")
	}
	mux.HandleFunc("/hot/fixed", fixed)
	mux.HandleFunc("/cold", fixed)
	mux.HandleFunc("/cold/slow", func(w http.ResponseWriter, r *http.Request) {
		ls.entered <- struct{}{}
		<-ls.release
		fixed(w, r)
	})
	fallback := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute, ErrorLog: discardLog()}
	if tune != nil {
		tune(fallback)
	}
	hc := hotpath.Config{Handler: mux, Hot: isHot, Fallback: fallback, Limiter: ls.lim}
	mode(&hc)
	srv, err := hotpath.New(hc)
	if err != nil {
		t.Fatal(err)
	}
	ls.srv, ls.addr = srv, serve(t, srv.Serve)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return ls
}

// wait waits, at most 20 seconds, until cond holds of the Limiter.
func (ls *limited) wait(t *testing.T, what string, cond func(st hotpath.LimitStats, idle int) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := hotpath.WaitLimiter(ctx, ls.lim, cond); err != nil {
		t.Fatalf("waiting for %s: %v (counts %+v)", what, err, ls.lim.Stats())
	}
}

// client is a connection from a given loopback address.
type client struct {
	net.Conn
	br *bufio.Reader
}

func dialFrom(from, addr string) (*client, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	return &client{Conn: nc, br: bufio.NewReader(nc)}, nil
}

func mustDial(t *testing.T, from, addr string) *client {
	t.Helper()
	c, err := dialFrom(from, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// send writes a keep-alive GET of path.
func (c *client) send(path string) error {
	_, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: a\r\n\r\n", path)
	return err
}

// answer reads an answer's status, its body read whole.
func (c *client) answer() (int, error) {
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}

func (c *client) get(path string) (int, error) {
	if err := c.send(path); err != nil {
		return 0, err
	}
	return c.answer()
}

func mustGet(t *testing.T, c *client, path string) {
	t.Helper()
	if code, err := c.get(path); err != nil || code != http.StatusOK {
		t.Fatalf("GET %s from %s: %d, %v", path, c.LocalAddr(), code, err)
	}
}

// refused reports whether a connection's answer was a refusal: a 503,
// or the connection closed or reset before any answer.
func refused(code int, err error) bool {
	return code == http.StatusServiceUnavailable ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// mustBeClosed fails unless the server closed c.
func mustBeClosed(t *testing.T, c *client, why string) {
	t.Helper()
	if _, err := c.br.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("%s: read %v, want the connection closed", why, err)
	}
}

// TestConnsPerClient replays the finding against a running server: 5,000
// idle keep-alive connections from one address (127.0.0.1) held the
// broker's descriptors and nobody could log on. The first 256 are served
// and kept; the others are refused at once; another address (127.0.0.2)
// is still served, on the loop and by net/http.
func TestConnsPerClient(t *testing.T) { allModes(t, testConnsPerClient) }

func testConnsPerClient(t *testing.T, mode serveMode) {
	const perClient = 256
	flood := 5000
	// The test holds each kept connection's two ends and, for a moment,
	// a refused one's client end per worker.
	if n, ok := hotpath.FileLimit(); ok && n < flood+2*perClient+200 {
		flood = n - 2*perClient - 200
		t.Logf("open files limit %d: %d connections in the flood", n, flood)
		if flood <= perClient {
			t.Skipf("open files limit %d is too low for the flood", n)
		}
	}
	ls := startLimited(t, mode, hotpath.LimitConfig{MaxConns: 10000, MaxConnsPerClient: perClient})

	var kept, refusals atomic.Int64
	var mu sync.Mutex
	var held []*client
	var wg sync.WaitGroup
	next := make(chan struct{})
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				c, err := dialFrom("127.0.0.1", ls.addr)
				if err != nil {
					errs <- err
					return
				}
				code, err := c.get("/hot/fixed")
				switch {
				case err == nil && code == http.StatusOK:
					kept.Add(1)
					mu.Lock()
					held = append(held, c)
					mu.Unlock()
					continue
				case refused(code, err):
					refusals.Add(1)
				default:
					errs <- fmt.Errorf("flood connection: %d, %v", code, err)
				}
				c.Close()
			}
		}()
	}
	for range flood {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	if got, want := kept.Load(), int64(perClient); got != want {
		t.Fatalf("connections kept from 127.0.0.1: %d, want %d", got, want)
	}
	if got, want := refusals.Load(), int64(flood-perClient); got != want {
		t.Fatalf("connections refused: %d, want %d", got, want)
	}

	// Another client logs on (net/http) and enumerates (the loop).
	start := time.Now()
	other := mustDial(t, "127.0.0.2", ls.addr)
	mustGet(t, other, "/cold")
	mustGet(t, other, "/hot/fixed")
	t.Logf("127.0.0.2 served in %v beside %d idle connections from 127.0.0.1", time.Since(start), perClient)

	st := ls.lim.Stats()
	if st.Conns != perClient+1 || st.RefusedPerClient != int64(flood-perClient) || st.RefusedTotal != 0 {
		t.Fatalf("counts %+v, want %d connections, %d refused per client", st, perClient+1, flood-perClient)
	}
	// The idle ones still work.
	mustGet(t, held[0], "/hot/fixed")
	for _, c := range held {
		c.Close()
	}
	other.Close()
	ls.wait(t, "every slot given back", func(st hotpath.LimitStats, _ int) bool { return st.Conns == 0 })
}

// TestConnsTotalClosesIdleFirst: with every slot taken, a new connection
// gets the slot of the connection idle the longest (one in net/http,
// then one on the loop), never a busy one's; with none idle, it is
// refused.
func TestConnsTotalClosesIdleFirst(t *testing.T) { allModes(t, testConnsTotalClosesIdleFirst) }

func testConnsTotalClosesIdleFirst(t *testing.T, mode serveMode) {
	ls := startLimited(t, mode, hotpath.LimitConfig{MaxConns: 3, MaxConnsPerClient: -1})
	idle := func(n int) func(hotpath.LimitStats, int) bool {
		return func(_ hotpath.LimitStats, idle int) bool { return idle == n }
	}

	// busy is the oldest connection, its request still running.
	busy := mustDial(t, "127.0.0.1", ls.addr)
	if err := busy.send("/cold/slow"); err != nil {
		t.Fatal(err)
	}
	<-ls.entered
	cold := mustDial(t, "127.0.0.2", ls.addr)
	mustGet(t, cold, "/cold")
	ls.wait(t, "the net/http connection idle", idle(1))
	hot := mustDial(t, "127.0.0.3", ls.addr)
	mustGet(t, hot, "/hot/fixed")
	ls.wait(t, "the loop's connection idle", idle(2))

	late := mustDial(t, "127.0.0.4", ls.addr)
	mustGet(t, late, "/hot/fixed")
	mustBeClosed(t, cold, "the connection idle the longest")
	ls.wait(t, "the first newcomer idle", idle(2))
	later := mustDial(t, "127.0.0.5", ls.addr)
	mustGet(t, later, "/cold")
	mustBeClosed(t, hot, "the connection idle the longest then")

	ls.release <- struct{}{}
	if code, err := busy.answer(); err != nil || code != http.StatusOK {
		t.Fatalf("the busy connection's answer: %d, %v", code, err)
	}
	mustGet(t, late, "/hot/fixed")
	st := ls.lim.Stats()
	if st.Conns != 3 || st.Peak != 3 || st.Evicted != 2 || st.RefusedTotal != 0 {
		t.Fatalf("counts %+v, want 3 connections at most, 2 evicted", st)
	}

	// Every slot busy: a newcomer is refused.
	for _, c := range []*client{busy, late, later} {
		c.Close()
	}
	ls.wait(t, "every slot given back", func(st hotpath.LimitStats, _ int) bool { return st.Conns == 0 })
	var slow []*client
	for range 3 {
		c := mustDial(t, "127.0.0.1", ls.addr)
		if err := c.send("/cold/slow"); err != nil {
			t.Fatal(err)
		}
		<-ls.entered
		slow = append(slow, c)
	}
	if code, err := mustDial(t, "127.0.0.6", ls.addr).get("/hot/fixed"); !refused(code, err) {
		t.Fatalf("a connection beyond the total with none idle: %d, %v; want refused", code, err)
	}
	for range slow {
		ls.release <- struct{}{}
	}
	for _, c := range slow {
		if code, err := c.answer(); err != nil || code != http.StatusOK {
			t.Fatalf("a busy connection's answer: %d, %v", code, err)
		}
	}
	if st := ls.lim.Stats(); st.RefusedTotal != 1 || st.Peak != 3 {
		t.Fatalf("counts %+v, want one refused for the total", st)
	}
}

// TestConnsCountedUnderConcurrency: clients from a few addresses connect,
// ask (on the loop or net/http) or not, and close, at once and far beyond
// the bounds; every slot comes back, once (a lost or a double release
// would leave the count off zero), and the total never went over.
func TestConnsCountedUnderConcurrency(t *testing.T) { allModes(t, testConnsCountedUnderConcurrency) }

func testConnsCountedUnderConcurrency(t *testing.T, mode serveMode) {
	const total = 12
	ls := startLimited(t, mode, hotpath.LimitConfig{MaxConns: total, MaxConnsPerClient: 5})
	var wg sync.WaitGroup
	var served atomic.Int64
	errs := make(chan error, 32)
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			from := "127.0.0." + strconv.Itoa(1+g%4)
			for i := range 25 {
				c, err := dialFrom(from, ls.addr)
				if err != nil {
					errs <- err
					return
				}
				switch (g + i) % 4 {
				case 0: // connect and go
				case 1, 2:
					path := "/hot/fixed"
					if i%2 == 1 {
						path = "/cold"
					}
					for range 1 + i%3 {
						code, err := c.get(path)
						if code == http.StatusOK && err == nil {
							served.Add(1)
							continue
						}
						if !refused(code, err) {
							errs <- fmt.Errorf("GET %s: %d, %v", path, code, err)
						}
						break
					}
				case 3: // a request cut short
					io.WriteString(c, "GET /hot/fixed HTTP/1.1\r\nHo")
				}
				c.Close()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ls.wait(t, "every slot given back", func(st hotpath.LimitStats, _ int) bool { return st.Conns == 0 })
	st := ls.lim.Stats()
	if st.Peak > total || served.Load() == 0 {
		t.Fatalf("counts %+v after %d answers: the total went over %d, or nothing was served", st, served.Load(), total)
	}
	t.Logf("%d answers; counts %+v", served.Load(), st)
}

// TestConnsReleasedAtShutdown: the slots of idle connections, on the loop
// and in net/http, come back when the server shuts down.
func TestConnsReleasedAtShutdown(t *testing.T) { allModes(t, testConnsReleasedAtShutdown) }

func testConnsReleasedAtShutdown(t *testing.T, mode serveMode) {
	ls := startLimited(t, mode, hotpath.LimitConfig{MaxConns: 100, MaxConnsPerClient: 100})
	for i := range 6 {
		c := mustDial(t, "127.0.0.1", ls.addr)
		if i%2 == 0 {
			mustGet(t, c, "/hot/fixed")
		} else {
			mustGet(t, c, "/cold")
		}
	}
	mustDial(t, "127.0.0.1", ls.addr) // and one that never asks
	ls.wait(t, "seven connections", func(st hotpath.LimitStats, _ int) bool { return st.Conns == 7 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ls.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	ls.wait(t, "every slot given back", func(st hotpath.LimitStats, _ int) bool { return st.Conns == 0 })
}

// TestConnsReleasedAtTimeout: the slots of connections closed for their
// idle or head timeout, on the loop and in net/http, come back.
func TestConnsReleasedAtTimeout(t *testing.T) { allModes(t, testConnsReleasedAtTimeout) }

func testConnsReleasedAtTimeout(t *testing.T, mode serveMode) {
	ls := startLimitedTuned(t, mode, hotpath.LimitConfig{MaxConns: 100, MaxConnsPerClient: 100}, func(s *http.Server) {
		s.ReadHeaderTimeout, s.IdleTimeout = 300*time.Millisecond, 300*time.Millisecond
	})
	hot, cold, cut, mute := mustDial(t, "127.0.0.1", ls.addr), mustDial(t, "127.0.0.1", ls.addr), mustDial(t, "127.0.0.1", ls.addr), mustDial(t, "127.0.0.1", ls.addr)
	mustGet(t, hot, "/hot/fixed")
	mustGet(t, cold, "/cold")
	io.WriteString(cut, "GET /hot/fixed HTTP/1.1\r\nHo") // a head cut short; mute asks nothing
	for _, c := range []*client{hot, cold, cut, mute} {
		if _, err := io.Copy(io.Discard, c.br); err != nil {
			t.Fatalf("waiting for the server to close a connection: %v", err)
		}
	}
	ls.wait(t, "every slot given back", func(st hotpath.LimitStats, _ int) bool { return st.Conns == 0 })
	if st := ls.lim.Stats(); st.Peak == 0 {
		t.Fatalf("counts %+v: no connection was counted", st)
	}
}
