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
		{"GET /c HTTP/1.1\r\nHost: h\r\nX-Three: 3\r\nX-Two: 4\r\n\r\n", http.Header{"X-Three": {"3"}, "X-Two": {"4"}}},
	}
	for i, tc := range heads {
		if !parseHead([]byte(tc.raw), &h) {
			t.Fatalf("head %d refused", i)
		}
		if !reflect.DeepEqual(h.header, tc.want) {
			t.Fatalf("head %d: header %v, want %v", i, h.header, tc.want)
		}
		// A handler that appends to a value must not write into the
		// next request's values.
		for k := range h.header {
			h.header[k] = append(h.header[k], "added")
		}
	}
	if !parseHead([]byte(heads[0].raw), &h) || !reflect.DeepEqual(h.header, heads[0].want) || h.path != "/a" || h.query != "x=1" {
		t.Fatalf("first head again: %+v", h)
	}
}

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
