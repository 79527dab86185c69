package benchkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
)

// procServerEnv makes the test binary a server for the Proc tests: it
// listens at the address the variable holds, says so on stderr, and
// exits 0 on SIGTERM; "exit" makes it fail at once instead.
const procServerEnv = "USHER_BENCHKIT_PROC_SERVER"

func procServer(addr string) {
	if addr == "exit" {
		fmt.Fprintln(os.Stderr, "no configuration")
		os.Exit(3)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Fprintln(os.Stderr, "listening at", addr)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	<-term
	os.Exit(0)
}

func startServer(t *testing.T, addr string, ready func(context.Context) error) (*Proc, error) {
	t.Helper()
	return StartProc(context.Background(), ProcSpec{
		Name: "test server", Argv: []string{os.Args[0], "-test.run=^$"}, Env: []string{procServerEnv + "=" + addr},
		Addr: addr, Ready: ready,
	})
}

func TestStartProcWaitsAndStops(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	asked := 0
	p, err := startServer(t, addr, func(context.Context) error {
		if asked++; asked < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if asked != 3 {
		t.Errorf("Ready asked %d times, want until it said yes (3)", asked)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("StartProc returned before the server listened: %v", err)
	}
	c.Close()
	if err := p.Alive(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Output(), "listening at") {
		t.Errorf("Output %q lacks what the server wrote", p.Output())
	}
	if _, err := p.CPU()(); err != nil {
		t.Errorf("CPU: %v", err)
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop of a server that exits 0 on SIGTERM: %v", err)
	}
	if err := p.Alive(); err == nil {
		t.Fatal("Alive after Stop")
	}
	if err := p.Stop(); err == nil {
		t.Fatal("a second Stop did not say the server had exited")
	}
}

func TestStartProcReportsAnEarlyExit(t *testing.T) {
	_, err := startServer(t, "exit", nil)
	if err == nil || !strings.Contains(err.Error(), "no configuration") || !strings.Contains(err.Error(), "test server exited") {
		t.Fatalf("StartProc of a server that fails at once returned %v, want its exit with what it wrote", err)
	}
}

func TestStartProcCancelled(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	_, err = StartProc(ctx, ProcSpec{
		Name: "test server", Argv: []string{os.Args[0], "-test.run=^$"}, Env: []string{procServerEnv + "=" + addr},
		Addr: addr, Ready: func(context.Context) error { cancel(); return errors.New("never") },
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("StartProc with its context cancelled returned %v", err)
	}
}

func TestTailKeepsTheEnd(t *testing.T) {
	tl := &Tail{Max: 4}
	fmt.Fprint(tl, "abc")
	fmt.Fprint(tl, "defg")
	if got := tl.String(); got != "defg" {
		t.Fatalf("Tail holds %q, want defg", got)
	}
}

func TestParseMetrics(t *testing.T) {
	page := `# HELP usher_block_ops_total Block operations.
# TYPE usher_block_ops_total counter
usher_block_ops_total{layer="upstream",op="read"} 42
usher_nbd_connections 3

usher_nfuse_transactions_total{error_id="",request="a,b \"q\" \\ x"} 7 1700000000000
usher_broker_transaction_duration_seconds_sum{operation="launch"} 1.5e-3
`
	var got []string
	err := ParseMetrics(strings.NewReader(page), func(s Sample) {
		got = append(got, fmt.Sprintf("%s %v %g", s.Name, s.Labels, s.Value))
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"usher_block_ops_total map[layer:upstream op:read] 42",
		"usher_nbd_connections map[] 3",
		`usher_nfuse_transactions_total map[error_id: request:a,b "q" \ x] 7`,
		"usher_broker_transaction_duration_seconds_sum map[operation:launch] 0.0015",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("samples\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, bad := range []string{
		`usher_block_ops_total{layer="x",op="read"} many`,
		`usher_block_ops_total{layer="x" 1`,
		`usher_block_ops_total{layer=x} 1`,
		`usher_block_ops_total`,
	} {
		if err := ParseMetrics(strings.NewReader(bad+"\n"), func(Sample) {}); err == nil {
			t.Errorf("ParseMetrics(%q) returned no error", bad)
		}
	}
}

func TestScrape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, `usher_sessions{state="active",zone=""} 2`)
	}))
	defer srv.Close()
	var n float64
	if err := Scrape(context.Background(), srv.Client(), srv.URL+"/metrics", func(s Sample) { n += s.Value }); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("Scrape saw %g sessions, want 2", n)
	}
	if err := Scrape(context.Background(), srv.Client(), srv.URL+"/nothing", func(Sample) {}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("Scrape of a missing page returned %v, want its status", err)
	}
}
