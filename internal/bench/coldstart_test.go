package bench

import (
	"context"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"
)

// TestColdStartClient: the cold start's client sends its requests at
// once, reads answers much longer than its buffer, and counts an NFuse
// error, however deep in the answer, or a failed status as an error.
func TestColdStartClient(t *testing.T) {
	long := "<NFuseProtocol>" + strings.Repeat("x", 300<<10) + "</NFuseProtocol>"
	var requests, short atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		requests.Add(1)
		switch string(b) {
		case "error":
			io.WriteString(w, "<NFuseProtocol><ErrorId>unspecified</ErrorId></NFuseProtocol>")
		case "late error":
			io.WriteString(w, long[:200<<10]+"<ErrorId>unspecified</ErrorId></NFuseProtocol>")
		case "status":
			http.Error(w, "no", http.StatusServiceUnavailable)
		default:
			if n, _ := io.WriteString(w, long); n != len(long) {
				short.Add(1)
			}
		}
	}))
	defer srv.Close()

	res := ColdStartClient(context.Background(), srv.URL, "", "enumerate", 20)
	if res.Errors != 0 || requests.Load() != 20 || short.Load() != 0 {
		t.Fatalf("%+v after %d requests (%d cut short)", res, requests.Load(), short.Load())
	}
	if res.P50 <= 0 || res.P99 < res.P50 {
		t.Errorf("p50 %v, p99 %v", res.P50, res.P99)
	}
	if res := ColdStartClient(context.Background(), "ftp://127.0.0.1/", "", "enumerate", 3); res.Errors != 3 || !strings.Contains(res.FirstError, "ftp") {
		t.Errorf("an ftp URL: %+v, want 3 errors naming the scheme", res)
	}
	// https is spoken: the test server's certificate is not trusted,
	// where plain HTTP would have read a malformed answer.
	tsrv := httptest.NewTLSServer(srv.Config.Handler)
	defer tsrv.Close()
	if res := ColdStartClient(context.Background(), tsrv.URL, "", "enumerate", 3); res.Errors != 3 || !strings.Contains(res.FirstError, "certificate") {
		t.Errorf("https: %+v, want 3 certificate errors", res)
	}
	// With the server's certificate as the CA: answered.
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tsrv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if res := ColdStartClient(context.Background(), tsrv.URL, ca, "enumerate", 3); res.Errors != 0 {
		t.Errorf("https with --ca: %+v, want no errors", res)
	}
	for _, body := range []string{"error", "late error", "status"} {
		if res := ColdStartClient(context.Background(), srv.URL, "", body, 3); res.Errors != 3 || res.FirstError == "" {
			t.Errorf("%s answers: %+v, want 3 errors", body, res)
		}
	}
}

// TestScanFor: a pattern is found wherever the reads cut it, and not
// found where it is not.
func TestScanFor(t *testing.T) {
	pat := []byte("<ErrorId>")
	text := strings.Repeat("a", 100) + "<ErrorId>" + strings.Repeat("b", 50)
	for _, chunk := range []int{1, 2, 5, 9, 10, 17, 64, 1000} {
		for _, tc := range []struct {
			text string
			want bool
		}{{text, true}, {strings.Replace(text, "<ErrorId>", "<ErrorIdx", 1), false}, {"<ErrorId", false}, {"", false}} {
			buf := make([]byte, 16)
			start, found, err := scanFor(iotest.HalfReader(&chunkReader{s: tc.text, n: chunk}), buf, pat)
			if err != nil || found != tc.want || string(start) != tc.text[:min(len(tc.text), len(start))] {
				t.Errorf("chunks of %d, %q: found %v, start %q, %v; want %v", chunk, tc.text, found, start, err, tc.want)
			}
		}
	}
}

// chunkReader reads s n bytes at a time.
type chunkReader struct {
	s string
	n int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), r.n)], r.s)
	r.s = r.s[k:]
	return k, nil
}

// TestColdStartRatios: the report gives the p99 in single checks, against
// the check timed alone and, when the site timed it, the run's own.
func TestColdStartRatios(t *testing.T) {
	c := ColdStart{Requests: 100, Checks: 1, P99: 90 * time.Millisecond, Check: 30 * time.Millisecond}
	if got, want := c.headline().Ratio, "p99 = 3.00 × one check"; got != want {
		t.Errorf("untimed: %q, want %q", got, want)
	}
	if row := c.table().Rows[0]; row[len(row)-1] != "-" {
		t.Errorf("untimed: the run's check %q, want -", row[len(row)-1])
	}
	c.RunCheck = 60 * time.Millisecond
	if got, want := c.headline().Ratio, "p99 = 3.00 × one check (1.50 × the run's own check)"; got != want {
		t.Errorf("timed: %q, want %q", got, want)
	}
	if row := c.table().Rows[0]; row[len(row)-1] != "60.0" {
		t.Errorf("timed: the run's check %q, want 60.0", row[len(row)-1])
	}
}
