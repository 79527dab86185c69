package dirservertest

import (
	"bytes"
	"net"
	"sync"
)

// Recorder is a TCP listener on 127.0.0.1 that keeps whatever its
// connections send and never answers: what a "directory server" that
// someone points a site at learns, such as the service account's bind
// password when the site binds there in clear.
type Recorder struct {
	l      net.Listener
	needle []byte
	seen   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup

	mu    sync.Mutex
	got   bytes.Buffer
	conns []net.Conn
}

// Record starts a Recorder whose Seen is closed once what arrived holds
// needle. The test's cleanup closes it.
func Record(tb TB, needle string) *Recorder {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	r := &Recorder{l: l, needle: []byte(needle), seen: make(chan struct{})}
	r.wg.Add(1)
	go r.accept()
	tb.Cleanup(r.close)
	return r
}

func (r *Recorder) accept() {
	defer r.wg.Done()
	for {
		c, err := r.l.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		r.conns = append(r.conns, c)
		r.mu.Unlock()
		r.wg.Add(1)
		go r.read(c)
	}
}

func (r *Recorder) read(c net.Conn) {
	defer r.wg.Done()
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			r.mu.Lock()
			r.got.Write(buf[:n])
			if bytes.Contains(r.got.Bytes(), r.needle) {
				r.once.Do(func() { close(r.seen) })
			}
			r.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

func (r *Recorder) close() {
	r.l.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// URL is the recorder as a plain LDAP server: ldap://127.0.0.1:PORT.
func (r *Recorder) URL() string { return "ldap://" + r.l.Addr().String() }

// Seen is closed once the needle arrived.
func (r *Recorder) Seen() <-chan struct{} { return r.seen }

// Received returns what arrived, over how many connections.
func (r *Recorder) Received() ([]byte, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.got.Bytes()), len(r.conns)
}
