package hotpath

import (
	"bufio"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// FuzzParseHead holds the loop's parser to net/http's: a head the loop
// takes must be one that net/http reads without error, and read the same
// (method, target, path, query, host, headers, length, close). A head the
// loop declines costs nothing: net/http reads it after the hand-over.
func FuzzParseHead(f *testing.F) {
	for _, tc := range headSeeds {
		f.Add([]byte(tc))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, bare := headEnd(b, 0)
		if bare || n < 0 {
			return
		}
		var h head
		h.header = http.Header{}
		if !parseHead(b[:n], &h) {
			return
		}
		if h.size != n {
			t.Fatalf("size %d, want %d", h.size, n)
		}
		r, status := netHTTPReads(t, b[:n])
		if r == nil {
			t.Fatalf("the loop took a head net/http's server answers %s: %q", status, b[:n])
		}
		if r.Method != h.method || r.RequestURI != h.target || r.URL.Path != h.path || r.URL.RawQuery != h.query ||
			r.Host != h.host || r.ContentLength != h.contentLength || r.Close != h.close {
			t.Fatalf("read differently: net/http %s %q path %q query %q host %q length %d close %v; loop %s %q path %q query %q host %q length %d close %v",
				r.Method, r.RequestURI, r.URL.Path, r.URL.RawQuery, r.Host, r.ContentLength, r.Close,
				h.method, h.target, h.path, h.query, h.host, h.contentLength, h.close)
		}
		if !maps.EqualFunc(r.Header, h.header, slices.Equal) {
			t.Fatalf("headers differ: net/http %q, loop %q", r.Header, h.header)
		}
		// The same head again, after a handler changed the header, reads
		// as it did the first time.
		want := http.Header{}
		for k, vs := range h.header {
			want[k] = slices.Clone(vs)
		}
		for k, vs := range h.header {
			vs[0] = "changed"
			delete(h.header, k)
		}
		h.header["X-Handler"] = []string{"added"}
		if !parseHead(b[:n], &h) || h.size != n || h.method != r.Method || h.target != r.RequestURI || !maps.EqualFunc(want, h.header, slices.Equal) {
			t.Fatalf("read differently the second time: %+v, want header %q", h, want)
		}
	})
}

// netHTTPReads serves head on a real net/http server and returns the
// request its handler got, or nil and the status line it answered
// instead.
func netHTTPReads(t *testing.T, head []byte) (*http.Request, string) {
	t.Helper()
	got := make(chan *http.Request, 1)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Body = nil // the connection's: not read here
			got <- r
		}),
		ErrorLog: discard,
	}
	client, conn := net.Pipe()
	ln := &oneConn{c: conn, closed: make(chan struct{})}
	go srv.Serve(ln)
	defer srv.Close()
	defer client.Close()
	client.SetDeadline(time.Now().Add(10 * time.Second))
	go client.Write(head)
	status := make(chan string, 1)
	go func() {
		line, err := bufio.NewReader(client).ReadString('\n')
		if err != nil {
			line = err.Error()
		}
		status <- line
	}()
	select {
	case r := <-got:
		return r, ""
	case s := <-status:
		// The handler hands the request over before it returns, and
		// net/http answers only after that: an answer that came first
		// in this select may be the handler's own.
		select {
		case r := <-got:
			return r, ""
		default:
			return nil, s
		}
	}
}

var discard = log.New(io.Discard, "", 0)

// oneConn is a listener that accepts one connection.
type oneConn struct {
	c      net.Conn
	once   sync.Once
	closed chan struct{}
	taken  bool
	mu     sync.Mutex
}

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	taken := l.taken
	l.taken = true
	l.mu.Unlock()
	if !taken {
		return l.c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error   { l.once.Do(func() { close(l.closed) }); return nil }
func (l *oneConn) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// headSeeds seed the fuzzer with heads the loop takes and heads it must not.
var headSeeds = []string{
	"GET /api/v1/resources HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer x\r\n\r\n",
	"POST /scripts/wpnbr.dll HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: text/xml\r\nContent-Length: 12\r\n\r\n",
	"GET /a?b=c&d HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nx-a: 2\r\nConnection: close\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: a\r\nContent-Length: 01\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: a b\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: [::1]:80\r\nConnection: Keep-Alive\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: a\r\nX: \t v \t\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: a\r\nX:\x80\xff\r\n\r\n",
	"GET * HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET http://a/b HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /a HTTP/1.1\r\nhost: a\r\ncontent-length: 3\r\n\r\n",
}

// FuzzHeadEnd: a head scanned in two parts, the second resuming where the
// first left off, ends where the whole scanned at once does.
func FuzzHeadEnd(f *testing.F) {
	for _, tc := range headSeeds {
		f.Add([]byte(tc), uint16(len(tc)/2))
	}
	f.Fuzz(func(t *testing.T, b []byte, k uint16) {
		cut := int(k) % (len(b) + 1)
		if n, bare := headEnd(b[:cut], 0); n >= 0 || bare {
			return // the first part was enough: nothing to resume
		}
		wantN, wantBare := headEnd(b, 0)
		if n, bare := headEnd(b, cut); n != wantN || bare != wantBare {
			t.Fatalf("resumed at %d: (%d, %v), scanned whole: (%d, %v), in %q", cut, n, bare, wantN, wantBare, b)
		}
	})
}
