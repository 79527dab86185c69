package nfuse_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/nfuse"
)

// discard is a ResponseWriter that keeps nothing but the answer's size.
type discard struct {
	header http.Header
	n      int
}

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }

// SetReadDeadline and SetWriteDeadline do nothing, as net/http's do
// little: they are there so that the handler finds them.
func (d *discard) SetReadDeadline(time.Time) error  { return nil }
func (d *discard) SetWriteDeadline(time.Time) error { return nil }

// benchHandler posts body to the handler b.N times in process, reusing
// the request, and reports the answer's size.
func benchHandler(b *testing.B, h http.Handler, body string) {
	b.Helper()
	rd := strings.NewReader(body)
	req := httptest.NewRequest("POST", "http://xml.example"+nfuse.Path, rd)
	w := &discard{header: http.Header{}}
	h.ServeHTTP(w, req) // warm the caches
	answer := w.n
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rd.Reset(body)
		w.n = 0
		h.ServeHTTP(w, req)
	}
	b.ReportMetric(float64(answer), "B/answer")
}

func BenchmarkAppData400(b *testing.B) {
	f := newFixture(b, options{})
	benchHandler(b, f.handler, seed004For(financeUser, userPassword, "DEMO"))
}

// BenchmarkAppData400OnLoop is BenchmarkAppData400 as an event loop runs
// it: answered from memory (broker.NoWait).
func BenchmarkAppData400OnLoop(b *testing.B) {
	f := newFixture(b, options{})
	body := seed004For(financeUser, userPassword, "DEMO")
	f.post(body) // the first check, off the loop
	rd := strings.NewReader(body)
	req := httptest.NewRequest("POST", "http://xml.example"+nfuse.Path, rd)
	req = req.WithContext(broker.NoWait(req.Context()))
	w := &discard{header: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(body)
		w.n = 0
		f.handler.ServeHTTP(w, req)
	}
	if w.n < 100_000 {
		b.Fatalf("answered %d bytes: not the applications", w.n)
	}
}

func BenchmarkAppData400Parallel(b *testing.B) {
	f := newFixture(b, options{brokerConfig: func(c *broker.Config) { c.MaxConcurrent = -1 }})
	body := seed004For(financeUser, userPassword, "DEMO")
	f.post(body)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		rd := strings.NewReader(body)
		req := httptest.NewRequest("POST", "http://xml.example"+nfuse.Path, rd)
		w := &discard{header: http.Header{}}
		for pb.Next() {
			rd.Reset(body)
			f.handler.ServeHTTP(w, req)
		}
	})
}

// BenchmarkAppData400HTTP enumerates over a loopback HTTP connection with
// keep-alive, as a load generator would.
func BenchmarkAppData400HTTP(b *testing.B) {
	f := newFixture(b, options{})
	srv := httptest.NewServer(f.handler)
	b.Cleanup(srv.Close)
	body := []byte(seed004For(financeUser, userPassword, "DEMO"))
	client := srv.Client()
	var n int64
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Post(srv.URL+nfuse.Path, "text/xml", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		n, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	b.ReportMetric(float64(n), "B/answer")
}

func BenchmarkAppDataFailedCredentials(b *testing.B) {
	f := newFixture(b, options{})
	benchHandler(b, f.handler, seed004)
}

func BenchmarkAppDataIcons(b *testing.B) {
	f := newFixture(b, options{})
	benchHandler(b, f.handler, strings.Replace(seed004For(financeUser, userPassword, "DEMO"),
		"<DesiredDetails>permissions</DesiredDetails>", `<DesiredDetails>permissions</DesiredDetails><DesiredDetails>icon</DesiredDetails><DesiredIconData size="32" bpp="32" format="png"/>`, 1))
}

func BenchmarkValidateCredentials(b *testing.B) {
	f := newFixture(b, options{})
	benchHandler(b, f.handler, requestWith("RequestValidateCredentials", credentials(financeUser, userPassword, "DEMO")))
}

func BenchmarkServerFarmData(b *testing.B) {
	f := newFixture(b, options{})
	benchHandler(b, f.handler, request(`<RequestServerFarmData/>`))
}

// BenchmarkAddress launches an application again and again for one user:
// after the first, each returns to the user's session (one site DB read
// and a VDA prepare).
func BenchmarkAddress(b *testing.B) {
	f := newFixture(b, options{})
	benchHandler(b, f.handler, requestWith("RequestAddress", `<Name><AppName>office-writer-001</AppName></Name>`+credentials(financeUser, userPassword, "DEMO")))
}

func BenchmarkDecodeSeed004(b *testing.B) {
	body := []byte(seed004)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := nfuse.Decode(body, nfuse.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}
