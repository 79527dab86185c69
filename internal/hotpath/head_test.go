package hotpath

import (
	"net/http"
	"reflect"
	"testing"
)

// TestParseHeadReused parses heads one after another into one head, as a
// connection does: each request's header is its own, whatever the one
// before had or a handler did to it.
func TestParseHeadReused(t *testing.T) {
	h := head{header: http.Header{}}
	heads := []struct {
		raw  string
		want http.Header
	}{
		{"POST /a?x=1 HTTP/1.1\r\nHost: h\r\nX-One: 1\r\nX-Two: 2\r\nX-Two: 3\r\nContent-Length: 0\r\n\r\n",
			http.Header{"X-One": {"1"}, "X-Two": {"2", "3"}, "Content-Length": {"0"}}},
		{"GET /b HTTP/1.1\r\nHost: h\r\nX-Two: 2\r\n\r\n", http.Header{"X-Two": {"2"}}},
		{"GET /b HTTP/1.1\r\nHost: h\r\nX-Two: 2\r\n\r\n", http.Header{"X-Two": {"2"}}},
		{"GET /b HTTP/1.1\r\nHost: h\r\nX-Two: 2\r\n\r\n", http.Header{"X-Two": {"2"}}},
		{"GET /b HTTP/1.1\r\nHost: h\r\nX-Two: 5\r\n\r\n", http.Header{"X-Two": {"5"}}},
		{"GET /c HTTP/1.1\r\nHost: h\r\nX-Three: 3\r\nX-Two: 4\r\n\r\n", http.Header{"X-Three": {"3"}, "X-Two": {"4"}}},
	}
	for i, tc := range heads {
		if !parseHead([]byte(tc.raw), &h) {
			t.Fatalf("head %d refused", i)
		}
		if !reflect.DeepEqual(h.header, tc.want) {
			t.Fatalf("head %d: header %v, want %v", i, h.header, tc.want)
		}
		// A handler that appends to a value, writes one in place, or
		// adds and removes headers must not change the next request's
		// header, even a repeat of this head.
		for k := range h.header {
			h.header[k] = append(h.header[k], "added")
		}
		h.header["X-Added"] = []string{"x"}
		if i%2 == 1 {
			for k := range h.header {
				if k != "X-Added" {
					delete(h.header, k)
				}
			}
		}
		if vs := h.vals; len(vs) > 0 {
			vs[len(vs)-1] = "written in place"
		}
	}
	if !parseHead([]byte(heads[0].raw), &h) || !reflect.DeepEqual(h.header, heads[0].want) || h.path != "/a" || h.query != "x=1" {
		t.Fatalf("first head again: %+v", h)
	}
}

// BenchmarkParseHead parses a connection's repeated head, which is not
// parsed again; BenchmarkParseHeadNew parses heads that differ.
func BenchmarkParseHead(b *testing.B) {
	req := []byte("POST /scripts/wpnbr.dll HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: text/xml\r\nContent-Length: 512\r\n\r\n")
	h := head{header: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		if !parseHead(req, &h) {
			b.Fatal("refused")
		}
	}
}

func BenchmarkParseHeadNew(b *testing.B) {
	reqs := [][]byte{
		[]byte("POST /scripts/wpnbr.dll HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: text/xml\r\nContent-Length: 512\r\n\r\n"),
		[]byte("POST /scripts/wpnbr.dll HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: text/xml\r\nContent-Length: 513\r\n\r\n"),
	}
	h := head{header: http.Header{}}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if !parseHead(reqs[i&1], &h) {
			b.Fatal("refused")
		}
		i++
	}
}
