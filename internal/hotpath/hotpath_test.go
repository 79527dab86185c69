package hotpath_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/usher-vdi/usher/internal/blob"

	"github.com/usher-vdi/usher/internal/hotpath"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// handler is what both servers of a comparison serve.
func handler() http.Handler {
	mux := http.NewServeMux()
	fixed := func(w http.ResponseWriter, r *http.Request) {
		body := []byte("fixed answer, in two writes\n")
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body[:5])
		w.Write(body[5:])
	}
	mux.HandleFunc("/hot/fixed", fixed)
	mux.HandleFunc("/cold", fixed)
	mux.HandleFunc("POST /hot/echo", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	})
	mux.HandleFunc("/hot/nolen", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		chunk := bytes.Repeat([]byte("0123456789"), 100)
		for n > 0 {
			k := min(n, len(chunk))
			w.Write(chunk[:k])
			n -= k
		}
	})
	mux.HandleFunc("/hot/flush", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("first part, "))
		w.(http.Flusher).Flush()
		w.Write([]byte("second part"))
	})
	mux.HandleFunc("/hot/empty", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/hot/nocontent", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		w.Write([]byte("not allowed"))
	})
	mux.HandleFunc("/hot/close", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.Write([]byte("bye"))
	})
	mux.HandleFunc("/hot/panic", func(w http.ResponseWriter, r *http.Request) { panic("handler bug") })
	mux.HandleFunc("/hot/inject", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Note", "a\r\nX-Evil: 1")
		w.Write([]byte("ok"))
	})
	mux.HandleFunc("/hot/sniff", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("<html><body>hi</body></html>"))
	})
	mux.HandleFunc("/hot/short", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		w.Write([]byte("short"))
	})
	mux.HandleFunc("/hot/request", func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprintf(w, "%s %s %s %q %q host=%s remote=%s length=%d close=%v a=%q local=%v\n",
			r.Method, r.RequestURI, r.Proto, r.URL.Path, r.URL.RawQuery, r.Host, host, r.ContentLength, r.Close,
			r.Header.Values("X-A"), r.Context().Value(http.LocalAddrContextKey) != nil)
	})
	return mux
}

// bothModes runs test on the event loop and on a goroutine per
// connection.
func bothModes(t *testing.T, test func(t *testing.T, goroutines bool)) {
	t.Run("loop", func(t *testing.T) { test(t, false) })
	t.Run("goroutines", func(t *testing.T) { test(t, true) })
}

func isHot(method, path string) bool { return strings.HasPrefix(path, "/hot/") }

// pair is a hotpath server and a plain net/http server of one handler.
type pair struct {
	hot       *hotpath.Server
	hotAddr   string
	plainAddr string
}

func startPair(t *testing.T, goroutines bool, tune func(*http.Server)) *pair {
	t.Helper()
	h := handler()
	fallback := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 10 * time.Second,
		MaxHeaderBytes: 16 << 10, ErrorLog: discardLog()}
	plain := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 10 * time.Second,
		MaxHeaderBytes: 16 << 10, ErrorLog: discardLog()}
	if tune != nil {
		tune(fallback)
		tune(plain)
	}
	hs, err := hotpath.New(hotpath.Config{Goroutines: goroutines, Handler: h, Hot: isHot, Fallback: fallback})
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{hot: hs, hotAddr: serve(t, hs.Serve), plainAddr: serve(t, plain.Serve)}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := hs.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		plain.Shutdown(ctx)
	})
	return p
}

func serve(t *testing.T, fn func(net.Listener) error) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go fn(ln)
	return ln.Addr().String()
}

// answer is a response as compared: framing and Date left out.
type answer struct {
	Status string
	Header http.Header
	Body   string
	Err    string
}

// exchange sends raw to addr and reads up to n answers, then whatever
// ends the connection.
func exchange(t *testing.T, addr, raw string, n int) []answer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite() // all sent: servers see the end at once
	br := bufio.NewReader(c)
	var out []answer
	for range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			out = append(out, answer{Err: "no answer"})
			break
		}
		body, err := io.ReadAll(resp.Body)
		a := answer{Status: resp.Status, Header: resp.Header, Body: string(body)}
		if err != nil {
			a.Err = "truncated body"
		}
		for _, k := range []string{"Date", "Content-Length", "Transfer-Encoding"} {
			delete(a.Header, k)
		}
		out = append(out, a)
	}
	return out
}

func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }

// Requests whose answers must not depend on which server took them.
var cases = map[string]struct {
	raw string
	n   int
}{
	"get":                  {"GET /hot/fixed HTTP/1.1\r\nHost: a\r\n\r\n", 1},
	"pipelined":            {"GET /hot/fixed HTTP/1.1\r\nHost: a\r\n\r\nPOST /hot/echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET /hot/request?x=1 HTTP/1.1\r\nHost: b\r\nX-A: 1\r\nX-A: 2\r\n\r\nGET /cold HTTP/1.1\r\nHost: a\r\n\r\nGET /hot/fixed HTTP/1.1\r\nHost: a\r\n\r\n", 5},
	"body left unread":     {"POST /hot/fixed HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello worldGET /hot/empty HTTP/1.1\r\nHost: a\r\n\r\n", 2},
	"request close":        {"GET /hot/fixed HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET /hot/fixed HTTP/1.1\r\nHost: a\r\n\r\n", 2},
	"handler close":        {"GET /hot/close HTTP/1.1\r\nHost: a\r\n\r\nGET /hot/fixed HTTP/1.1\r\nHost: a\r\n\r\n", 2},
	"small without length": {"GET /hot/nolen?n=1500 HTTP/1.1\r\nHost: a\r\n\r\nGET /hot/fixed HTTP/1.1\r\nHost: a\r\n\r\n", 2},
	"large without length": {"GET /hot/nolen?n=300000 HTTP/1.1\r\nHost: a\r\n\r\nGET /hot/fixed HTTP/1.1\r\nHost: a\r\n\r\n", 2},
	"flush":                {"GET /hot/flush HTTP/1.1\r\nHost: a\r\n\r\nGET /hot/fixed HTTP/1.1\r\nHost: a\r\n\r\n", 2},
	"empty":                {"GET /hot/empty HTTP/1.1\r\nHost: a\r\n\r\n", 1},
	"no content":           {"GET /hot/nocontent HTTP/1.1\r\nHost: a\r\n\r\nGET /hot/fixed HTTP/1.1\r\nHost: a\r\n\r\n", 2},
	"panic":                {"GET /hot/panic HTTP/1.1\r\nHost: a\r\n\r\n", 1},
	"header injection":     {"GET /hot/inject HTTP/1.1\r\nHost: a\r\n\r\n", 1},
	"sniffed type":         {"GET /hot/sniff HTTP/1.1\r\nHost: a\r\n\r\n", 1},
	"short body":           {"GET /hot/short HTTP/1.1\r\nHost: a\r\n\r\nGET /hot/fixed HTTP/1.1\r\nHost: a\r\n\r\n", 2},
	"chunked request":      {"POST /hot/echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /hot/fixed HTTP/1.1\r\nHost: a\r\n\r\n", 2},
	"expect continue":      {"POST /hot/echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi", 1},
	"bad length":           {"POST /hot/echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\n", 1},
	"two lengths":          {"POST /hot/echo HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi", 1},
	"length and chunked":   {"POST /hot/echo HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 1},
	"http/1.0":             {"GET /hot/request HTTP/1.0\r\n\r\n", 1},
	"no host":              {"GET /hot/fixed HTTP/1.1\r\n\r\n", 1},
	"folded header":        {"GET /hot/fixed HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n 2\r\n\r\n", 1},
	"bare line feeds":      {"GET /hot/request HTTP/1.1\nHost: a\n\n", 1},
	"escaped path":         {"GET /hot/%66ixed HTTP/1.1\r\nHost: a\r\n\r\n", 1},
	"dot segments":         {"GET /hot/../cold HTTP/1.1\r\nHost: a\r\n\r\n", 1},
	"long head":            {"GET /hot/request HTTP/1.1\r\nHost: a\r\nX-A: " + strings.Repeat("a", 10000) + "\r\n\r\n", 1},
	"oversize head":        {"GET /hot/request HTTP/1.1\r\nHost: a\r\nX-A: " + strings.Repeat("a", 40000) + "\r\n\r\n", 1},
	"head method":          {"HEAD /hot/fixed HTTP/1.1\r\nHost: a\r\n\r\n", 1},
	"truncated body":       {"POST /hot/echo HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhel", 1},
	"garbage":              {"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 1},
}

// TestSameAnswersAsNetHTTP sends each case to both servers and compares
// what comes back.
func TestSameAnswersAsNetHTTP(t *testing.T) { bothModes(t, testSameAnswersAsNetHTTP) }

func testSameAnswersAsNetHTTP(t *testing.T, goroutines bool) {
	p := startPair(t, goroutines, nil)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			hot := exchange(t, p.hotAddr, tc.raw, tc.n)
			plain := exchange(t, p.plainAddr, tc.raw, tc.n)
			// Differences in how a connection ends after a short body
			// are allowed; the answers before must agree.
			if fmt.Sprint(hot) != fmt.Sprint(plain) {
				t.Errorf("answers differ\nhotpath: %+v\nnet/http: %+v", hot, plain)
			}
		})
	}
	hot, handed := p.hot.Counts()
	if hot < 20 || handed < 12 {
		t.Errorf("loop took %d requests and handed %d connections over: the comparison did not exercise both", hot, handed)
	}
}

// TestFraming checks what a comparison leaves out: answers without a
// declared length get one when they fit the buffer, else go chunked.
func TestFraming(t *testing.T) { bothModes(t, testFraming) }

func testFraming(t *testing.T, goroutines bool) {
	p := startPair(t, goroutines, nil)
	for _, tc := range []struct {
		n             int
		length, chunk bool
	}{{0, true, false}, {1500, true, false}, {64 << 10, true, false}, {64<<10 + 1, false, true}, {300000, false, true}} {
		c, err := net.Dial("tcp", p.hotAddr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /hot/nolen?n=%d HTTP/1.1\r\nHost: a\r\n\r\n", tc.n)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		c.Close()
		if err != nil || len(body) != tc.n {
			t.Errorf("n=%d: read %d bytes, %v", tc.n, len(body), err)
		}
		if got := resp.ContentLength == int64(tc.n); got != tc.length {
			t.Errorf("n=%d: Content-Length %d", tc.n, resp.ContentLength)
		}
		if got := slices.Equal(resp.TransferEncoding, []string{"chunked"}); got != tc.chunk {
			t.Errorf("n=%d: Transfer-Encoding %v", tc.n, resp.TransferEncoding)
		}
	}
}

// TestHeadTimeout replays a slow client that never finishes its head: the
// loop drops it at the head's timeout.
func TestHeadTimeout(t *testing.T) { bothModes(t, testHeadTimeout) }

func testHeadTimeout(t *testing.T, goroutines bool) {
	p := startPair(t, goroutines, func(s *http.Server) { s.ReadHeaderTimeout = 200 * time.Millisecond })
	for _, raw := range []string{"", "GET /hot/fixed HTTP/1.1\r\nHost: a\r\n"} {
		c, err := net.Dial("tcp", p.hotAddr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, raw)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		_, err = c.Read(make([]byte, 1))
		c.Close()
		if err == nil || errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 3*time.Second {
			t.Errorf("head %q: read %v after %s, want the server to close at once", raw, err, time.Since(start))
		}
	}
}

// TestBodyTimeout: a request whose head came in time has ReadTimeout,
// counted from its start, for its body, as net/http gives it; a body that
// never comes whole is dropped then. (The loop once held the body to the
// head's timeout.)
func TestBodyTimeout(t *testing.T) { bothModes(t, testBodyTimeout) }

func testBodyTimeout(t *testing.T, goroutines bool) {
	const headTimeout, readTimeout = 200 * time.Millisecond, 3 * time.Second
	p := startPair(t, goroutines, func(s *http.Server) {
		s.ReadHeaderTimeout, s.ReadTimeout = headTimeout, readTimeout
	})
	const head = "POST /hot/echo HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\n"
	// A body slower than the head's timeout, within ReadTimeout: answered,
	// by usher as by net/http.
	for _, addr := range []string{p.hotAddr, p.plainAddr} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, head+"ab")
		time.Sleep(3 * headTimeout) // time passing is the test: a body slower than the head's timeout
		io.WriteString(c, "cd")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: slow body: %v", addr, err)
		}
		body, err := io.ReadAll(resp.Body)
		c.Close()
		if err != nil || string(body) != "abcd" {
			t.Errorf("%s: slow body: answer %q, %v", addr, body, err)
		}
	}
	// A body that never comes whole: at ReadTimeout, not before, the
	// connection is dropped (the loop reads a body before its handler
	// runs) or the handler's read fails and it answers so (goroutines).
	c, err := net.Dial("tcp", p.hotAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	io.WriteString(c, head+"ab")
	c.SetReadDeadline(start.Add(4 * readTimeout))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	took := time.Since(start)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.Errorf("unfinished body: still open after %s, want the server to end it at ReadTimeout (%s)", took, readTimeout)
	case took < readTimeout-headTimeout:
		t.Errorf("unfinished body: ended after %s, before ReadTimeout (%s)", took, readTimeout)
	case err == nil && resp.StatusCode != http.StatusBadRequest:
		t.Errorf("unfinished body: answered %s", resp.Status)
	}
}

// TestIdleTimeout: a kept-alive connection that sends nothing more is
// closed at the idle timeout.
func TestIdleTimeout(t *testing.T) { bothModes(t, testIdleTimeout) }

func testIdleTimeout(t *testing.T, goroutines bool) {
	p := startPair(t, goroutines, func(s *http.Server) { s.IdleTimeout = 200 * time.Millisecond })
	c, err := net.Dial("tcp", p.hotAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /hot/fixed HTTP/1.1\r\nHost: a\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	start := time.Now()
	if _, err := br.ReadByte(); err != io.EOF || time.Since(start) > 3*time.Second {
		t.Errorf("idle connection: %v after %s, want EOF at the idle timeout", err, time.Since(start))
	}
}

// TestShutdownFinishesActive: Shutdown closes idle connections at once and
// lets a request being answered finish.
func TestShutdownFinishesActive(t *testing.T) { bothModes(t, testShutdownFinishesActive) }

func testShutdownFinishesActive(t *testing.T, goroutines bool) {
	release := make(chan struct{})
	started := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hot/slow" {
			// A handler that waits must not wait on the event loop.
			if hotpath.Defer(w) {
				return
			}
			close(started)
			<-release
		}
		w.Write([]byte("done"))
	})
	hs, err := hotpath.New(hotpath.Config{Goroutines: goroutines, Handler: h, Hot: isHot, Fallback: &http.Server{Handler: h}})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, hs.Serve)
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	io.WriteString(idle, "GET /hot/x HTTP/1.1\r\nHost: a\r\n\r\n")
	idleBr := bufio.NewReader(idle)
	if resp, err := http.ReadResponse(idleBr, nil); err != nil {
		t.Fatal(err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	busy, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	io.WriteString(busy, "GET /hot/slow HTTP/1.1\r\nHost: a\r\n\r\n")
	<-started
	done := make(chan error)
	go func() { done <- hs.Shutdown(context.Background()) }()
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idleBr.ReadByte(); err != io.EOF {
		t.Errorf("idle connection after Shutdown: %v, want EOF", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v while a request was being answered", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	busy.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil {
		t.Fatalf("the request in flight got no answer: %v", err)
	}
	if body, _ := io.ReadAll(resp.Body); string(body) != "done" {
		t.Errorf("answer %q", body)
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestStopRacesServe: Shutdown or Close called while Serve is starting, as
// a site that fails to open does, returns and stops everything.
func TestStopRacesServe(t *testing.T) { bothModes(t, testStopRacesServe) }

func testStopRacesServe(t *testing.T, goroutines bool) {
	h := handler()
	for i := range 200 {
		hs, err := hotpath.New(hotpath.Config{Goroutines: goroutines, Handler: h, Hot: isHot, Fallback: &http.Server{Handler: h}})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- hs.Serve(ln) }()
		done := make(chan error, 1)
		go func() {
			if i%2 == 0 {
				done <- hs.Shutdown(context.Background())
			} else {
				done <- hs.Close()
			}
		}()
		for _, ch := range []chan error{done, served} {
			select {
			case <-ch:
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: Serve and a stop racing hang", i)
			}
		}
	}
}

// TestBlobsGoOutWhole sends large blobs (sendfile(2) on Linux) to a
// client that reads slowly, so that the socket fills and the loop waits
// for it, then a small answer on the same connection: every byte arrives,
// in order.
func TestBlobsGoOutWhole(t *testing.T) { bothModes(t, testBlobsGoOutWhole) }

func testBlobsGoOutWhole(t *testing.T, goroutines bool) {
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i * 7 / 5)
	}
	b := blob.New(data)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hot/small" {
			w.Write([]byte("small"))
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
		if n, err := blob.Write(w, b); n != b.Len() || err != nil {
			t.Errorf("WriteBlob: %d, %v", n, err)
		}
	})
	hs, err := hotpath.New(hotpath.Config{Goroutines: goroutines, Handler: h, Hot: isHot, Fallback: &http.Server{Handler: h}, SendBuffer: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, hs.Serve)
	t.Cleanup(func() { hs.Close() })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(16 << 10)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(c, "GET /hot/blob HTTP/1.1\r\nHost: a\r\n\r\nGET /hot/blob HTTP/1.1\r\nHost: a\r\n\r\nGET /hot/small HTTP/1.1\r\nHost: a\r\n\r\n")
	br := bufio.NewReaderSize(c, 4096)
	for i, want := range [][]byte{data, data, []byte("small")} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		var got bytes.Buffer
		for {
			// Slow: a few KiB at a time with pauses while the first
			// answer is read, so that the server meets a full socket.
			n, err := io.CopyN(&got, resp.Body, 64<<10)
			if i == 0 && n > 0 {
				time.Sleep(time.Millisecond) // pacing, not a condition: a slow reader
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("answer %d: %v", i, err)
			}
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("answer %d: %d bytes that differ from the %d sent", i, got.Len(), len(want))
		}
	}
}
