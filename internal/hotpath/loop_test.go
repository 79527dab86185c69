package hotpath_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/blob"
	"github.com/usher-vdi/usher/internal/hotpath"
)

type loopKey struct{}

// deferring answers /hot/id?n=N with its N, on the loop, and
// /hot/wait?n=N with its N after waiting for release, off the loop: it
// defers itself when it finds it runs where it must not wait.
// /hot/big?n=N answers N bytes and "END", with no Content-Length.
type deferring struct {
	release  chan struct{}
	waiting  atomic.Int32
	deferred atomic.Int32
	onLoop   atomic.Int32
}

func (d *deferring) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := r.URL.Query().Get("n")
	loop := r.Context().Value(loopKey{}) != nil
	if loop {
		d.onLoop.Add(1)
	}
	if r.URL.Path == "/hot/big" {
		size, _ := strconv.Atoi(n)
		for chunk := []byte(strings.Repeat("x", 4096)); size > 0; size -= len(chunk) {
			w.Write(chunk[:min(size, len(chunk))])
		}
		io.WriteString(w, "END")
		return
	}
	if r.URL.Path == "/hot/wait" {
		if hotpath.Defer(w) {
			d.deferred.Add(1)
			w.Write([]byte("dropped")) // what a deferred handler writes is dropped
			return
		}
		if loop {
			panic("a request ran on the loop after Defer said it could not")
		}
		d.waiting.Add(1)
		<-d.release
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(n)))
	io.WriteString(w, n)
}

func startDeferring(t *testing.T, d *deferring, tune func(*hotpath.Config)) (*hotpath.Server, string) {
	t.Helper()
	cfg := hotpath.Config{Handler: d, Hot: isHot, Fallback: &http.Server{Handler: d},
		LoopContext: func(ctx context.Context) context.Context { return context.WithValue(ctx, loopKey{}, true) }}
	if tune != nil {
		tune(&cfg)
	}
	hs, err := hotpath.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, hs.Serve)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := hs.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return hs, addr
}

// waitFor polls cond until it holds, failing the test after 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // a poll interval
	}
}

// waitClosed waits until ch is closed, failing the test after 10 seconds.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func readBodies(t *testing.T, br *bufio.Reader, n int) []string {
	t.Helper()
	var out []string
	for i := range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		out = append(out, string(b))
	}
	return out
}

// TestDeferredRequest: a request whose handler defers runs again off the
// loop; the requests pipelined behind it wait for it and are answered in
// order, and meanwhile the loop goes on serving other connections.
func TestDeferredRequest(t *testing.T) {
	d := &deferring{release: make(chan struct{})}
	_, addr := startDeferring(t, d, nil)

	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	slow.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(slow, "GET /hot/id?n=1 HTTP/1.1\r\nHost: a\r\n\r\nGET /hot/wait?n=2 HTTP/1.1\r\nHost: a\r\n\r\nGET /hot/id?n=3 HTTP/1.1\r\nHost: a\r\n\r\n")
	waitFor(t, "the deferred request to wait", func() bool { return d.waiting.Load() > 0 })

	// The deferred handler waits; another connection is answered.
	other, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(other, "GET /hot/id?n=9 HTTP/1.1\r\nHost: a\r\n\r\n")
	if got := readBodies(t, bufio.NewReader(other), 1); got[0] != "9" {
		t.Errorf("other connection: %q", got)
	}

	close(d.release)
	if got := strings.Join(readBodies(t, bufio.NewReader(slow), 3), ","); got != "1,2,3" {
		t.Errorf("answers %s, want 1,2,3", got)
	}
	if d.deferred.Load() != 1 {
		t.Errorf("%d deferrals, want 1", d.deferred.Load())
	}
	if d.onLoop.Load() < 4 {
		t.Errorf("%d requests ran on the loop, want at least 4", d.onLoop.Load())
	}
}

// TestLoopUnderConcurrency: many connections, each pipelining requests
// that name themselves, some deferred; every answer must be its own
// request's, in order, none lost or doubled.
func TestLoopUnderConcurrency(t *testing.T) {
	d := &deferring{release: make(chan struct{})}
	close(d.release)
	hs, addr := startDeferring(t, d, nil)
	const conns, rounds, depth = 64, 20, 4
	eachConn(t, addr, conns, nil, func(c int, nc net.Conn, br *bufio.Reader) error {
		for r := range rounds {
			var sb strings.Builder
			for k := range depth {
				path := "id"
				if (c+r+k)%5 == 0 {
					path = "wait"
				}
				fmt.Fprintf(&sb, "GET /hot/%s?n=%d-%d-%d HTTP/1.1\r\nHost: a\r\n\r\n", path, c, r, k)
			}
			if _, err := io.WriteString(nc, sb.String()); err != nil {
				return err
			}
			for k := range depth {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					return fmt.Errorf("conn %d round %d answer %d: %v", c, r, k, err)
				}
				b, _ := io.ReadAll(resp.Body)
				if want := fmt.Sprintf("%d-%d-%d", c, r, k); string(b) != want {
					return fmt.Errorf("conn %d: answer %q, want %q", c, b, want)
				}
			}
		}
		return nil
	})
	if hot, handed := hs.Counts(); hot < conns*rounds*depth || handed != 0 {
		t.Errorf("loop took %d requests (want at least %d), handed %d connections over", hot, conns*rounds*depth, handed)
	}
}

// TestLoopWriteTimeout: a client that stops reading a large answer is
// dropped once the write timeout passes, and the loop serves others
// meanwhile.
func TestLoopWriteTimeout(t *testing.T) {
	data := make([]byte, 8<<20)
	b := blob.New(data)
	written := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hot/small" {
			w.Write([]byte("small"))
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
		blob.Write(w, b)
		close(written)
	})
	hs, err := hotpath.New(hotpath.Config{Handler: h, Hot: isHot, SendBuffer: 16 << 10,
		Fallback: &http.Server{Handler: h, WriteTimeout: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, hs.Serve)
	t.Cleanup(func() { hs.Close() })
	stuck, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	stuck.(*net.TCPConn).SetReadBuffer(16 << 10)
	io.WriteString(stuck, "GET /hot/blob HTTP/1.1\r\nHost: a\r\n\r\n")
	waitClosed(t, written, "the blob's answer to be under way")

	servesSmall(t, addr)

	time.Sleep(time.Second) // time passing, not a condition: past the write timeout, with the loop's sweep
	stuck.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := io.Copy(io.Discard, stuck)
	if err == nil && n >= int64(len(data)) {
		t.Fatalf("the stuck client got the whole answer (%d bytes): not dropped", n)
	}
	if ne, isNet := err.(net.Error); isNet && ne.Timeout() {
		t.Fatalf("the stuck connection is still open after %d bytes", n)
	}
}

// TestLoopBoundsQueuedCopies: an answer written from memory (not a blob)
// that the client does not read is copied only up to a bound; past it
// the connection is closed rather than the server holding the rest.
func TestLoopBoundsQueuedCopies(t *testing.T) {
	big := make([]byte, 8<<20)
	written := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hot/small" {
			w.Write([]byte("small"))
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(big)))
		w.Write(big)
		close(written)
	})
	hs, err := hotpath.New(hotpath.Config{Handler: h, Hot: isHot, SendBuffer: 16 << 10, Fallback: &http.Server{Handler: h}})
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
	io.WriteString(c, "GET /hot/big HTTP/1.1\r\nHost: a\r\n\r\n")
	waitClosed(t, written, "the handler to write the answer") // the rest is queued or refused
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the connection stayed open after %d bytes", n)
	}
	if n >= int64(len(big)) {
		t.Fatalf("the whole %d-byte answer came (%d bytes): nothing bounded it", len(big), n)
	}
	if n > 4<<20 {
		t.Errorf("%d bytes came before the close: more than the bound and the socket buffers", n)
	}
	// The loop goes on serving others.
	servesSmall(t, addr)
}

// servesSmall checks that the server at addr answers /hot/small on a new
// connection: its loop is not stuck on another.
func servesSmall(t *testing.T, addr string) {
	t.Helper()
	ok, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	ok.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(ok, "GET /hot/small HTTP/1.1\r\nHost: a\r\n\r\n")
	if got := readBodies(t, bufio.NewReader(ok), 1); got[0] != "small" {
		t.Errorf("answer %q", got)
	}
}

// TestLoopSharedBlobs: many connections, on every loop, ask for a few
// large blobs again and again, with heads that vary, so that the blobs'
// files are sent from by several loops at once; some clients hang up
// mid-answer. Every answer read whole is the blob asked for, and no
// memory file is open but the blobs' own.
func TestLoopSharedBlobs(t *testing.T) {
	// Earlier tests' garbage blobs may still hold files: a collection
	// and their finalizers' turn close most, and the rest are counted.
	runtime.GC()
	time.Sleep(10 * time.Millisecond) // the finalizers' turn, not a condition: what stays open is counted in before
	before := openMemFiles(t)
	// No collection meanwhile: it would close files that something
	// forgot to close, and hide the leak.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	blobs := make([]*blob.Blob, 3)
	for i := range blobs {
		data := make([]byte, 256<<10+i)
		for j := range data {
			data[j] = byte(j*(i+3) + i)
		}
		blobs[i] = blob.New(data)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.URL.Query().Get("b"))
		b := blobs[i%len(blobs)]
		w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
		if r.URL.Query().Get("v") != "" {
			w.Header().Set("X-Variant", r.URL.Query().Get("v")) // another head
		}
		blob.Write(w, b)
	})
	// Small socket buffers, so that an answer is still being sent when
	// its client hangs up.
	hs, err := hotpath.New(hotpath.Config{Handler: h, Hot: isHot, Fallback: &http.Server{Handler: h}, SendBuffer: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, hs.Serve)
	const conns, rounds = 32, 20
	small := func(nc net.Conn) { nc.(*net.TCPConn).SetReadBuffer(16 << 10) }
	eachConn(t, addr, conns, small, func(c int, nc net.Conn, br *bufio.Reader) error {
		for r := range rounds {
			i, v := (c+r)%len(blobs), ""
			if r%7 == 3 {
				v = strconv.Itoa(c)
			}
			fmt.Fprintf(nc, "GET /hot/b?b=%d&v=%s HTTP/1.1\r\nHost: a\r\n\r\n", i, v)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return fmt.Errorf("conn %d round %d: %v", c, r, err)
			}
			if c%2 == 1 && r == rounds-2 { // a plain head, past the variants
				io.CopyN(io.Discard, resp.Body, 1000)
				return nil // hangs up mid-answer
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil || string(got) != string(blobs[i].Bytes()) {
				return fmt.Errorf("conn %d round %d: %d bytes (%v), not blob %d", c, r, len(got), err, i)
			}
		}
		return nil
	})
	if err := hs.Close(); err != nil {
		t.Fatal(err)
	}
	if n := openMemFiles(t); n > before+len(blobs) {
		t.Errorf("%d memory files open, want at most the blobs' %d and the %d open before", n, len(blobs), before)
	}
}

// openMemFiles counts the process's open memory files of blobs.
func openMemFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "/memfd:usher-blob") {
			n++
		}
	}
	return n
}

// eachConn runs talk on conns connections to addr at once, each with a
// 30-second deadline, and fails the test with what they returned.
func eachConn(t *testing.T, addr string, conns int, setup func(net.Conn), talk func(c int, nc net.Conn, br *bufio.Reader) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer nc.Close()
			if setup != nil {
				setup(nc)
			}
			// A guard against a hang, not a speed check: a loaded CI
			// machine under -race ran TestLoopSharedBlobs into a 30 s one.
			nc.SetDeadline(time.Now().Add(2 * time.Minute))
			if err := talk(c, nc, bufio.NewReader(nc)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestLoopSplitRequests: connections whose requests come in pieces, cut
// anywhere (in the request line, a header, between pipelined requests),
// their pieces interleaved with the other connections'. A loop reads
// every connection into one buffer and keeps only an unfinished
// request's bytes for the connection: each answer must still be its own
// request's, in order, with deferred requests among them.
func TestLoopSplitRequests(t *testing.T) {
	d := &deferring{release: make(chan struct{})}
	close(d.release)
	_, addr := startDeferring(t, d, nil)
	const conns, requests = 8, 12
	type stream struct {
		nc     net.Conn
		br     *bufio.Reader
		rest   string
		pieces int
	}
	rng := rand.New(rand.NewPCG(1, 2))
	streams := make([]*stream, conns)
	for c := range streams {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(30 * time.Second))
		var sb strings.Builder
		for k := range requests {
			path := "id"
			if (c+k)%4 == 0 {
				path = "wait"
			}
			fmt.Fprintf(&sb, "GET /hot/%s?n=%d-%d HTTP/1.1\r\nHost: a\r\nX-Pad: %s\r\n\r\n", path, c, k, strings.Repeat("p", rng.IntN(200)))
		}
		streams[c] = &stream{nc: nc, br: bufio.NewReader(nc), rest: sb.String()}
	}
	for left := conns; left > 0; {
		left = 0
		for _, s := range streams {
			if s.rest == "" {
				continue
			}
			n := min(len(s.rest), 1+rng.IntN(90))
			if _, err := io.WriteString(s.nc, s.rest[:n]); err != nil {
				t.Fatal(err)
			}
			s.rest, s.pieces = s.rest[n:], s.pieces+1
			left++
			time.Sleep(200 * time.Microsecond) // pacing, not a condition: the loop reads each piece on its own
		}
	}
	for c, s := range streams {
		got := readBodies(t, s.br, requests)
		for k, b := range got {
			if want := fmt.Sprintf("%d-%d", c, k); b != want {
				t.Fatalf("connection %d (sent in %d pieces), answer %d: %q, want %q", c, s.pieces, k, b, want)
			}
		}
	}
	if d.deferred.Load() == 0 {
		t.Error("no request was deferred")
	}
}

// TestLoopTrickledRequest sends requests with long heads a byte at a
// time, bodies included, as a slow-body attacker does: the loop, which
// parses such a head once and then only counts the body's bytes, must
// still frame each request right, on the loop and deferred.
func TestLoopTrickledRequest(t *testing.T) {
	d := &deferring{release: make(chan struct{})}
	close(d.release)
	_, addr := startDeferring(t, d, nil)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(nc)
	pad := strings.Repeat("X-Pad: v\r\n", 300)
	for i, path := range []string{"id", "wait", "id"} {
		body := strings.Repeat("b", 10+i)
		req := fmt.Sprintf("POST /hot/%s?n=%d HTTP/1.1\r\nHost: a\r\n%sContent-Length: %d\r\n\r\n%s", path, i, pad, len(body), body)
		// The head in a few parts, the body a byte at a time.
		for len(req) > len(body) {
			n := min(len(req)-len(body), 1000)
			if _, err := io.WriteString(nc, req[:n]); err != nil {
				t.Fatal(err)
			}
			req = req[n:]
			time.Sleep(time.Millisecond) // pacing, not a condition: a trickle is what is tested
		}
		for j := range len(req) {
			if _, err := io.WriteString(nc, req[j:j+1]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond) // pacing, as above
		}
		if got := readBodies(t, br, 1); got[0] != strconv.Itoa(i) {
			t.Fatalf("request %d (%s): answer %q", i, path, got[0])
		}
	}
	if d.deferred.Load() != 1 {
		t.Errorf("%d requests deferred, want 1", d.deferred.Load())
	}
}

// TestLoopIdleConnectionMemory: a connection waiting between requests
// holds no read buffer, whether its last request came whole or in
// parts, nor a large answer's buffers. The heap it takes, client side
// included, was 14.7 KiB with a read buffer per connection and is 6.5 KiB
// without; a request in parts left 14.3 KiB, and a 60 KB answer the
// socket could not take at once 68.1 KiB, until an idle connection gave
// its buffers back. The bound is one read buffer's size.
func TestLoopIdleConnectionMemory(t *testing.T) {
	send := func(t *testing.T, nc net.Conn, parts ...string) {
		for i, p := range parts {
			if i > 0 {
				time.Sleep(5 * time.Millisecond) // pacing, not a condition: the loop reads each part on its own
			}
			if _, err := io.WriteString(nc, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	answer := make([]byte, 4096)
	readUntil := func(t *testing.T, nc net.Conn, end string) {
		tail := ""
		for !strings.HasSuffix(tail, end) {
			n, err := nc.Read(answer)
			if err != nil {
				t.Fatalf("answer ending %q: %v", tail, err)
			}
			tail += string(answer[:n])
			tail = tail[max(0, len(tail)-64):]
		}
	}
	for _, tc := range []struct {
		name  string
		conns int
		talk  func(*testing.T, net.Conn)
	}{
		{"whole request", 400, func(t *testing.T, nc net.Conn) {
			send(t, nc, "GET /hot/id?n=1 HTTP/1.1\r\nHost: a\r\n\r\n")
			readUntil(t, nc, "\r\n\r\n1")
		}},
		{"request in parts", 400, func(t *testing.T, nc net.Conn) {
			send(t, nc, "GET /hot/id?n=1 HTTP/1.1\r\nHo", "st: a\r\n\r\n")
			readUntil(t, nc, "\r\n\r\n1")
		}},
		{"answer the socket did not take", 3, func(t *testing.T, nc net.Conn) {
			send(t, nc, "GET /hot/big?n=60000 HTTP/1.1\r\nHost: a\r\n\r\n")
			time.Sleep(5 * time.Millisecond) // pacing, not a condition: the loop finds the socket full
			readUntil(t, nc, "END")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &deferring{release: make(chan struct{})}
			close(d.release)
			_, addr := startDeferring(t, d, func(cfg *hotpath.Config) { cfg.SendBuffer = 4096 })
			ncs := make([]net.Conn, 0, tc.conns)
			defer func() {
				for _, nc := range ncs {
					nc.Close()
				}
			}()
			dial := func() net.Conn {
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				nc.(*net.TCPConn).SetReadBuffer(16 << 10)
				nc.SetDeadline(time.Now().Add(20 * time.Second))
				return nc
			}
			heap := func() uint64 {
				// Idle connections give their buffers back at the loop's
				// next sweep, a quarter of a second at most: time passing,
				// the sweep's period, not a condition.
				time.Sleep(600 * time.Millisecond)
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				return ms.HeapAlloc
			}
			warm := dial()
			tc.talk(t, warm)
			warm.Close()
			before := heap()
			for range tc.conns {
				nc := dial()
				ncs = append(ncs, nc)
				tc.talk(t, nc)
			}
			per := (int64(heap()) - int64(before)) / int64(tc.conns)
			t.Logf("%d bytes of heap per idle connection, client's included", per)
			if per > 8<<10 {
				t.Errorf("%d bytes of heap per idle connection, want under 8 KiB", per)
			}
		})
	}
}
