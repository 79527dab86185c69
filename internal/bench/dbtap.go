package bench

import (
	"encoding/binary"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DBTap is a TCP relay in front of a PostgreSQL server that counts what
// goes through it: the round trips of every connection (a burst of the
// client's messages answered by the server; pipelined statements go in
// one), what each round trip asked for (its statements, read from the
// frontend protocol's Query, Parse and Bind messages), and how many
// connections were waiting for an answer at each moment. Put in front of
// the WAN, it sees the round trips as a pool on the far side of the WAN
// does: a connection waits from the client's burst to the server's
// answer, the RTT included.
//
// Connections over TLS are relayed and counted, but their statements are
// not read.
type DBTap struct {
	ln              net.Listener
	network, target string
	pool            int

	mu     sync.Mutex
	conns  map[*tapConn]struct{}
	closed bool
	t      DBTraffic // cumulative, integrated up to t.At
	busy   int       // connections waiting for an answer now
	wg     sync.WaitGroup
}

// DBTraffic is what a DBTap counted, cumulatively since it started (or,
// from Sub, between two readings).
type DBTraffic struct {
	// At is when it was read; Span, from Sub, the time between the two
	// readings.
	At   time.Time
	Span time.Duration
	// RoundTrips are the bursts of the clients' messages that the server
	// answered; ByKind splits them by what they asked for (Kind).
	RoundTrips int64
	ByKind     map[string]int64
	// Opened counts connections made; Open and MaxOpen are those open at
	// the reading and the most open at once since the last Mark.
	Opened        int64
	Open, MaxOpen int
	// Waiting is connection-time spent waiting for an answer; Full is the
	// wall time during which at least the pool size of connections were
	// waiting at once; MaxWaiting is the most at once since the last Mark.
	Waiting, Full time.Duration
	MaxWaiting    int
}

// Sub returns the traffic between an earlier reading o and t (Open,
// MaxOpen and MaxWaiting are t's).
func (t DBTraffic) Sub(o DBTraffic) DBTraffic {
	d := t
	d.Span = t.At.Sub(o.At)
	d.RoundTrips -= o.RoundTrips
	d.Opened -= o.Opened
	d.Waiting -= o.Waiting
	d.Full -= o.Full
	d.ByKind = map[string]int64{}
	for k, n := range t.ByKind {
		if n -= o.ByKind[k]; n != 0 {
			d.ByKind[k] = n
		}
	}
	return d
}

// Kinds of round trips that are not statements.
const (
	KindStartup   = "connection startup"
	KindTLS       = "over TLS (not read)"
	kindSSLAsk    = "SSL request"
	kindNoStmt    = "sync only"
	prepareMarker = "prepare: "
)

// StartDBTap relays connections on a loopback port to target, an address
// of network ("tcp": host:port, or "unix": a socket's path); pool is the
// client's pool size, for DBTraffic.Full.
func StartDBTap(network, target string, pool int) (*DBTap, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &DBTap{ln: ln, network: network, target: target, pool: pool, conns: map[*tapConn]struct{}{}}
	t.t.At = time.Now()
	t.t.ByKind = map[string]int64{}
	t.wg.Add(1)
	go t.accept()
	return t, nil
}

// Addr is the relay's address, host:port.
func (t *DBTap) Addr() string { return t.ln.Addr().String() }

// Close stops accepting, closes every connection and waits for the
// relay's goroutines.
func (t *DBTap) Close() error {
	err := t.ln.Close()
	t.mu.Lock()
	t.closed = true
	for c := range t.conns {
		c.client.Close()
		c.server.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
	return err
}

// Read returns the traffic so far.
func (t *DBTap) Read() DBTraffic {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.integrate(time.Now())
	r := t.t
	r.ByKind = maps.Clone(t.t.ByKind)
	return r
}

// Mark returns the traffic so far and starts MaxOpen and MaxWaiting
// again from the present.
func (t *DBTap) Mark() DBTraffic {
	r := t.Read()
	t.mu.Lock()
	t.t.MaxOpen, t.t.MaxWaiting = t.t.Open, t.busy
	t.mu.Unlock()
	return r
}

// integrate accounts the time since the last change; t.mu is held.
func (t *DBTap) integrate(now time.Time) {
	d := now.Sub(t.t.At)
	t.t.Waiting += time.Duration(t.busy) * d
	if t.pool > 0 && t.busy >= t.pool {
		t.t.Full += d
	}
	t.t.At = now
}

func (t *DBTap) accept() {
	defer t.wg.Done()
	for {
		client, err := t.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial(t.network, t.target)
		if err != nil {
			client.Close()
			continue
		}
		c := &tapConn{tap: t, client: client, server: server, stmts: map[string]string{}}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			client.Close()
			server.Close()
			return
		}
		t.conns[c] = struct{}{}
		t.t.Opened++
		t.t.Open++
		t.t.MaxOpen = max(t.t.MaxOpen, t.t.Open)
		t.mu.Unlock()
		t.wg.Add(2)
		go c.up()
		go c.down()
	}
}

// tapConn is one relayed connection.
type tapConn struct {
	tap            *DBTap
	client, server net.Conn

	// Owned by up: the frontend protocol's parser.
	started bool        // past the startup message
	tls     atomic.Bool // the server accepted SSL: nothing more is read
	hdr     [5]byte
	nhdr    int
	typ     byte
	left    int    // bytes of the current message still to come
	body    []byte // the current message, when it is read
	keep    bool
	stmts   map[string]string // prepared statements by name

	// Guarded by tap.mu: the burst waiting for its answer.
	waiting bool
	burst   burst
	once    sync.Once
}

// burst is what a client sent between two answers of the server.
type burst struct {
	startup, sslAsk bool
	// stmts ran (Bind, Query); parsed were only prepared (Parse).
	stmts, parsed []string
}

func (c *tapConn) up() {
	defer c.tap.wg.Done()
	defer c.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.client.Read(buf)
		if n > 0 {
			now := time.Now()
			var b burst
			c.parse(buf[:n], &b)
			c.tap.mu.Lock()
			if !c.waiting {
				c.tap.integrate(now)
				c.waiting = true
				c.burst = burst{}
				c.tap.busy++
				c.tap.t.MaxWaiting = max(c.tap.t.MaxWaiting, c.tap.busy)
			}
			c.burst.add(b)
			c.tap.mu.Unlock()
			if _, werr := c.server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (c *tapConn) down() {
	defer c.tap.wg.Done()
	defer c.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			c.answered(time.Now(), buf[:n])
			if _, werr := c.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// answered ends the burst waiting for an answer, if any, and counts it.
func (c *tapConn) answered(now time.Time, answer []byte) {
	c.tap.mu.Lock()
	defer c.tap.mu.Unlock()
	if !c.waiting {
		return // a notice or notification nobody asked for
	}
	c.tap.integrate(now)
	c.waiting = false
	c.tap.busy--
	c.tap.t.RoundTrips++
	c.tap.t.ByKind[c.burst.kind(c.tls.Load())]++
	if c.burst.sslAsk && len(answer) > 0 && answer[0] == 'S' {
		c.tls.Store(true)
	}
}

func (c *tapConn) close() {
	c.once.Do(func() {
		c.client.Close()
		c.server.Close()
		t := c.tap
		t.mu.Lock()
		defer t.mu.Unlock()
		if c.waiting { // never answered: a Terminate, or a cut connection
			t.integrate(time.Now())
			c.waiting = false
			t.busy--
		}
		delete(t.conns, c)
		t.t.Open--
	})
}

func (b *burst) add(o burst) {
	b.startup = b.startup || o.startup
	b.sslAsk = b.sslAsk || o.sslAsk
	b.stmts = append(b.stmts, o.stmts...)
	b.parsed = append(b.parsed, o.parsed...)
}

// kind names what a round trip asked for: its first two statements other
// than BEGIN, COMMIT and ROLLBACK, shortened, marked when the round trip
// began or ended the transaction, when it only prepared statements, and
// with how many other statements went with them.
func (b burst) kind(tls bool) string {
	switch {
	case tls:
		return KindTLS
	case b.sslAsk:
		return kindSSLAsk
	case b.startup:
		return KindStartup
	}
	stmts, prepare := b.stmts, false
	if len(stmts) == 0 && len(b.parsed) > 0 {
		stmts, prepare = b.parsed, true
	}
	var begin bool
	var end string
	var main []string
	for _, s := range stmts {
		switch u := strings.ToUpper(s); {
		case strings.HasPrefix(u, "BEGIN"), strings.HasPrefix(u, "START TRANSACTION"):
			begin = true
		case u == "COMMIT", u == "ROLLBACK", u == "END":
			end = u
		default:
			main = append(main, s)
		}
	}
	var k string
	switch {
	case len(main) > 0:
		k = shortSQL(main[0], 56)
		if len(main) > 1 {
			k += "; " + shortSQL(main[1], 40)
		}
		if len(main) > 2 {
			k += " (+" + strconv.Itoa(len(main)-2) + ")"
		}
	case end != "":
		k, end = end, ""
	case begin:
		k, begin = "BEGIN", false
	default:
		return kindNoStmt
	}
	if begin {
		k = "BEGIN; " + k
	}
	if end != "" {
		k += "; " + end
	}
	if prepare {
		k = prepareMarker + k
	}
	return k
}

// parse reads the frontend messages in p, which continue those of the
// earlier reads, into b.
func (c *tapConn) parse(p []byte, b *burst) {
	if c.tls.Load() {
		return
	}
	for len(p) > 0 {
		if c.left == 0 && c.nhdr < c.hdrLen() { // a header
			n := copy(c.hdr[c.nhdr:c.hdrLen()], p)
			c.nhdr += n
			p = p[n:]
			if c.nhdr < c.hdrLen() {
				return
			}
			if !c.started {
				c.typ = 0
				c.left = int(binary.BigEndian.Uint32(c.hdr[:4])) - 4
			} else {
				c.typ = c.hdr[0]
				c.left = int(binary.BigEndian.Uint32(c.hdr[1:5])) - 4
			}
			c.keep = c.typ == 0 || c.typ == 'Q' || c.typ == 'P' || c.typ == 'B'
			c.body = c.body[:0]
			if c.left <= 0 { // empty, or a length under its own four bytes
				c.left = 0
				c.message(b)
			}
			continue
		}
		n := min(c.left, len(p))
		if c.keep && len(c.body)+n <= 1<<20 {
			c.body = append(c.body, p[:n]...)
		} else {
			c.keep = false
		}
		c.left -= n
		p = p[n:]
		if c.left == 0 {
			c.message(b)
		}
	}
}

func (c *tapConn) hdrLen() int {
	if c.started {
		return 5
	}
	return 4
}

// Protocol codes of the startup packets that come before the startup
// message.
const (
	sslRequestCode    = 80877103
	gssencRequestCode = 80877104
)

// message takes in the message just read (c.typ, c.body when c.keep).
func (c *tapConn) message(b *burst) {
	c.nhdr = 0
	body := c.body
	if !c.keep && (c.typ == 'Q' || c.typ == 'P' || c.typ == 'B') {
		if c.typ == 'P' {
			b.parsed = append(b.parsed, "(a statement over 1 MiB)")
		} else {
			b.stmts = append(b.stmts, "(a statement over 1 MiB)")
		}
		return
	}
	switch c.typ {
	case 0: // a startup packet: its first four bytes say which
		if len(body) >= 4 {
			switch binary.BigEndian.Uint32(body[:4]) {
			case sslRequestCode, gssencRequestCode:
				b.sslAsk = true
				return
			}
		}
		b.startup = true
		c.started = true
	case 'Q':
		b.stmts = append(b.stmts, cstring(body))
	case 'P':
		name, rest := cstringRest(body)
		q := cstring(rest)
		c.stmts[name] = q
		b.parsed = append(b.parsed, q)
	case 'B':
		_, rest := cstringRest(body)
		q, ok := c.stmts[cstring(rest)]
		if !ok {
			q = "(a statement prepared before the tap)"
		}
		b.stmts = append(b.stmts, q)
	}
}

// cstring returns the NUL-terminated string at the start of b.
func cstring(b []byte) string {
	s, _ := cstringRest(b)
	return s
}

func cstringRest(b []byte) (string, []byte) {
	for i, x := range b {
		if x == 0 {
			return string(b[:i]), b[i+1:]
		}
	}
	return string(b), nil
}

// shortSQL collapses a statement's white space and cuts it at n runes.
func shortSQL(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
