package hotpath

import (
	"net/http"
	"strings"
	"testing"
)

// parsingConn is a loop connection with only what parse needs: a buffer
// and a server whose every path is hot.
func parsingConn() *lconn {
	s := &Server{cfg: Config{Hot: func(string, string) bool { return true }, Fallback: &http.Server{}}}
	c := &lconn{l: &loop{s: s}, buf: make([]byte, bufferSize)}
	c.head.header = http.Header{}
	return c
}

// arrive appends b to c's buffer, as a read would.
func (c *lconn) arrive(b string) { c.w += copy(c.buf[c.w:], b) }

// TestParseTrickledRequestOnce replays a slow-body attack on the parser:
// a head of many headers, then its body a byte at a time. Each read
// must not scan or parse the head again, or every byte the attacker
// sends costs the loop a parse of the whole head (150 µs for a 7 KB
// head, where net/http spends 9). The test spoils bytes it has already
// had scanned or parsed: looking at them again hands the connection
// over or refuses the head, and parse says so.
func TestParseTrickledRequestOnce(t *testing.T) {
	const body = "abcde"
	head := "POST /hot HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X-Pad: v\r\n", 500) + "Content-Length: 5\r\n\r\n"
	c := parsingConn()
	// The request starts near the buffer's end, so that parse moves it
	// to the start to make room for its body.
	c.r = bufferSize - len(head) - 2
	c.w = c.r
	half := len(head) / 2

	c.arrive(head[:half])
	if got := c.parse(); got != reqMore {
		t.Fatalf("half a head: parse = %d, want reqMore", got)
	}
	// A bare line feed where headEnd has looked: a rescan would take it
	// for a head for net/http.
	spoilAt := c.r + 10
	c.buf[spoilAt] = '\n'
	c.arrive(head[half : len(head)-4])
	if got := c.parse(); got != reqMore {
		t.Fatalf("all but the head's end, its start rescanned: parse = %d, want reqMore", got)
	}
	c.buf[spoilAt] = head[10]

	c.arrive(head[len(head)-4:] + body[:1])
	if got := c.parse(); got != reqBody {
		t.Fatalf("head and a byte of body: parse = %d, want reqBody", got)
	}
	if c.r != 0 {
		t.Fatalf("the request was left at %d, with no room for its body", c.r)
	}
	// The method spoiled: parsing the head again would refuse it.
	c.buf[c.r] = '('
	for i := 1; i < len(body); i++ {
		if got := c.parse(); got != reqBody {
			t.Fatalf("%d bytes of body, the head parsed again: parse = %d, want reqBody", i, got)
		}
		c.arrive(body[i : i+1])
	}
	if got := c.parse(); got != reqReady {
		t.Fatalf("whole request: parse = %d, want reqReady", got)
	}
	if h := &c.head; h.method != http.MethodPost || h.path != "/hot" || h.contentLength != int64(len(body)) || h.size != len(head) {
		t.Fatalf("head read as %s %s, length %d, size %d", h.method, h.path, h.contentLength, h.size)
	}
}
