package bench

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/benchkit"
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
	want := "wrk.method = [[POST]]\nwrk.headers[\"Content-Type\"] = [[text/xml]]\nwrk.body = [=[<a>]]</a>]=]\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	got = WrkRequest{Header: map[string]string{"B": "2", "A": "x]"}, Delay: 5 * time.Millisecond}.Script()
	want = "wrk.method = [[GET]]\nwrk.headers[ [[A]] ] = [=[x]]=]\nwrk.headers[ [[B]] ] = [[2]]\nfunction delay() return 5 end\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestWrkTableMarksClientBound(t *testing.T) {
	rs := func(rps ...float64) []WrkResult {
		var out []WrkResult
		for _, r := range rps {
			out = append(out, WrkResult{RPS: r})
		}
		return out
	}
	wu, wn, wc := rs(500, 950, 500, 950), rs(800, 800, 900, 990), rs(1000, 1000, 1000, 1000)
	wn[0].Non2xx, wn[0].SocketErrors = 2, 1
	var levels []wrkLevel
	for i, c := range []int{10, 20, 40, 80} {
		levels = append(levels, wrkLevel{conns: c, usher: wu[i], nginx: wn[i], null: wc[i]})
	}
	tb := WrkTable("NFuse", levels)
	last := slices.Index(tb.Header, "usher / nginx")
	for i, want := range []string{"0.62", "client-bound (usher)", "client-bound (yardstick)", "client-bound"} {
		if got := tb.Rows[i][last]; got != want {
			t.Errorf("level %d: %q, want %q", levels[i].conns, got, want)
		}
	}
	if got := tb.Rows[0][8]; tb.Header[8] != "nginx errors" || got != "3" {
		t.Errorf("nginx errors: %s = %q", tb.Header[8], got)
	}
}

// TestSlowClientIsMarkedBound drives nginx with a deliberately slow wrk
// (each connection waits 20 ms between requests): the server's answer
// and the do-nothing answer run at the same rate, the client's, and the
// comparison says so instead of printing a ratio.
func TestSlowClientIsMarkedBound(t *testing.T) {
	if _, err := os.Stat(DefaultWrk); err != nil {
		t.Skip("wrk is not installed (scripts/test installs it)")
	}
	body := []byte(strings.Repeat("<AppData/>", 1000))
	n, err := StartTunedNginx(t.Context(), DefaultNginx, NginxTuning{Workers: 1, NoPush: true, NullPath: NullPath}, NFusePath, body, "text/xml")
	if errors.Is(err, ErrNoNginx) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	w := Wrk{Binary: DefaultWrk, Plan: benchkit.PlanCPUs()}
	slow := WrkRequest{Delay: 20 * time.Millisecond}
	srv, err := w.Run(t.Context(), n.URL, slow, 4, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ceil, err := w.Run(t.Context(), strings.TrimSuffix(n.URL, NFusePath)+NullPath, slow, 4, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// 4 connections, one request per 20 ms each: at most 200/s.
	if srv.RPS > 250 || ceil.RPS > 250 || srv.RPS < 50 {
		t.Fatalf("slow client: %.0f and %.0f req/s, want about 200", srv.RPS, ceil.RPS)
	}
	s := benchkit.Step{Rate: srv.RPS, Ceiling: ceil.RPS}
	if got := benchkit.Compare(s, s, 1); got != "client-bound" {
		t.Fatalf("a slow client's figures compare as %q", got)
	}
	if srv.Client.Wall < time.Second {
		t.Errorf("wrk's usage not measured: %+v", srv.Client)
	}
}
