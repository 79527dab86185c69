package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseWrk(t *testing.T) {
	for _, tc := range []struct {
		file string
		want WrkResult
	}{
		{"ok.txt", WrkResult{Requests: 47345, RPS: 15780.12, P50: 0.6, P90: 0.8, P99: 1.2}},
		{"non2xx.txt", WrkResult{Requests: 2874, RPS: 1434.25, P50: 3.94, P90: 8.24, P99: 695.02, Non2xx: 2874}},
		{"socket-errors.txt", WrkResult{Requests: 5579, RPS: 2782.92, P50: 2.21, P90: 2.68, P99: 4.54, Non2xx: 2789, SocketErrors: 8369}},
		{"seconds.txt", WrkResult{Requests: 120, RPS: 39.9, P50: 1500, P90: 2500, P99: 60000, SocketErrors: 7}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "wrk", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseWrk(string(b))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if _, err := ParseWrk("unable to connect to 127.0.0.1:1 Connection refused\n"); err == nil || !strings.Contains(err.Error(), "no Requests/sec") {
		t.Errorf("no figures: %v", err)
	}
	if _, err := ParseWrk("    50%    3.94xs\nRequests/sec: 1\n"); err == nil {
		t.Error("a time without a known unit parsed")
	}
}

func TestWrkScript(t *testing.T) {
	got := WrkScript(`<a>]]</a>`)
	want := "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"text/xml\"\nwrk.body = [=[<a>]]</a>]=]\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestWrkTableMarksClientBound(t *testing.T) {
	levels := []int{10, 20, 40, 80}
	wu := []WrkResult{{RPS: 500}, {RPS: 950}, {RPS: 500}, {RPS: 950}}
	wn := []WrkResult{{RPS: 800, Non2xx: 2, SocketErrors: 1}, {RPS: 800}, {RPS: 900}, {RPS: 990}}
	wc := []WrkResult{{RPS: 1000}, {RPS: 1000}, {RPS: 1000}, {RPS: 1000}}
	tb := WrkTable(levels, nil, nil, wu, wn, wc)
	last := len(tb.Header) - 1
	for i, want := range []string{"0.62", "client-bound (usher)", "client-bound (nginx)", "client-bound"} {
		if got := tb.Rows[i][last]; got != want {
			t.Errorf("level %d: %q, want %q", levels[i], got, want)
		}
	}
	if got := tb.Rows[0][9]; tb.Header[9] != "nginx errors" || got != "3" {
		t.Errorf("nginx errors: %s = %q", tb.Header[9], got)
	}
}
