package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/datadir"
	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/site"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestOpenDemoWithSimulator starts a demo site from a Config holding only
// what a bench sets, so that every other field takes its default, and
// checks that the whole site is assembled: every machine registers, and
// the health, readiness, index, metrics and NFuse endpoints answer.
func TestOpenDemoWithSimulator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := server.Open(ctx, server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Demo: true,
		DemoPassword: "pw-1234", SimVDAs: -1, SimLogonDelay: -1, HeartbeatInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.WaitRegistered(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, want := len(s.Broker().Snapshot().MachineNames()), 57; got != want {
		t.Fatalf("machines: got %d, want %d", got, want)
	}
	for path, want := range map[string]string{
		"/healthz": "ok", "/readyz": "ready", "/site": "configuration version", "/": "/portal/portal.js",
		"/metrics": `usher_machines{state="registered",zone="primary"} 57`,
	} {
		if code, body := get(t, s.URL()+path); code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, want 200 with %q:\n%.300s", path, code, want, body)
		}
	}
	resp, err := http.Post(s.URL()+"/Scripts/WPnBr.dll", "text/xml", strings.NewReader(`<?xml version="1.0"?><NFuseProtocol version="4.6"><RequestServerFarmData><Nil/></RequestServerFarmData></NFuseProtocol>`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "<ServerFarmName>") {
		t.Errorf("NFuse on the main listener: %s", b)
	}
	if secret, path := s.EnrolmentSecret(); len(secret) < 16 || filepath.Dir(path) != s.DataDir() {
		t.Errorf("enrolment secret %d chars in %s", len(secret), path)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := net.Dial("tcp", s.Addr()); err == nil {
		t.Error("the listener still accepts after Close")
	}
}

// TestOpenBindsFirst checks that a taken port fails Open before the data
// directory is touched: no site DB is created, nothing is loaded.
func TestOpenBindsFirst(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := filepath.Join(t.TempDir(), "data")
	_, err = server.Open(context.Background(), server.Config{DataDir: dir, Listen: ln.Addr().String(), Demo: true})
	if err == nil || !strings.Contains(err.Error(), "listen on") {
		t.Fatalf("Open on a taken port: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the data directory was made before the bind failed: %v", err)
	}
}

func TestOpenRefusesBadConfig(t *testing.T) {
	for name, cfg := range map[string]server.Config{
		"no data directory":        {Listen: "127.0.0.1:0"},
		"demo password, no demo":   {DataDir: t.TempDir(), Listen: "127.0.0.1:0", DemoPassword: "x"},
		"send buffer over the cap": {DataDir: t.TempDir(), Listen: "127.0.0.1:0", SendBuffer: server.MaxSendBuffer + 1},
		"unknown HTTP server":      {DataDir: t.TempDir(), Listen: "127.0.0.1:0", HTTPServer: "nginx"},
	} {
		t.Run(name, func(t *testing.T) {
			if s, err := server.Open(context.Background(), cfg); err == nil {
				s.Close()
				t.Fatal("Open accepted it")
			}
		})
	}
}

// TestOpenLocksDataDir checks that a second site on one data directory is
// refused while the first runs, and allowed once it has closed.
func TestOpenLocksDataDir(t *testing.T) {
	dir := t.TempDir()
	cfg := server.Config{DataDir: dir, Listen: "127.0.0.1:0"}
	s, err := server.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.Open(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "in use by another usher serve") {
		t.Fatalf("second Open: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, datadir.SiteDBFile)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = server.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	s.Close()
}

// TestRunStopsOnCancel checks that Run returns nil once its context is
// cancelled and that the site is closed then.
func TestRunStopsOnCancel(t *testing.T) {
	s, err := server.Open(context.Background(), server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	if code, _ := get(t, s.URL()+"/healthz"); code != 200 {
		t.Fatalf("healthz: %d", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := net.Dial("tcp", s.Addr()); err == nil {
		t.Error("the listener still accepts after Run returned")
	}
}

// TestDemoLoadedOnce checks that a restart with the demo keeps the site
// as it was changed and its passwords, that a demo password given at a
// restart sets the demo accounts' password and nothing else, and that a
// reset reloads the demo site.
func TestDemoLoadedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	open := func(cfg server.Config) *server.Server {
		t.Helper()
		cfg.DataDir, cfg.Listen, cfg.Demo = dir, "127.0.0.1:0", true
		s, err := server.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	adminOK := func(s *server.Server, password string) bool {
		req, _ := http.NewRequest("GET", s.URL()+"/api/v1/admin/site", nil)
		req.SetBasicAuth("admin", password)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	disabled := func(s *server.Server) bool {
		var u site.User
		s.Store().View(ctx, func(tx site.Tx) (err error) { u, err = tx.Users().Get(ctx, "user0007"); return err })
		return u.Disabled
	}

	s := open(server.Config{})
	first := s.DemoPassword()
	if first == "" || !adminOK(s, first) {
		t.Fatalf("first start: password %q", first)
	}
	err := s.Store().Update(ctx, func(tx site.Tx) error {
		_, err := site.Mutate(ctx, tx, func(c *site.Config) error {
			for i := range c.Users {
				if c.Users[i].Name == "user0007" {
					c.Users[i].Disabled = true
				}
			}
			return nil
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = open(server.Config{})
	if s.DemoPassword() != "" || !adminOK(s, first) || !disabled(s) {
		t.Fatalf("restart: password %q, first password works %v, change kept %v", s.DemoPassword(), adminOK(s, first), disabled(s))
	}
	s.Close()

	s = open(server.Config{DemoPassword: "second-pw"})
	if !adminOK(s, "second-pw") || adminOK(s, first) || !disabled(s) {
		t.Fatalf("restart with a password: new works %v, old works %v, change kept %v", adminOK(s, "second-pw"), adminOK(s, first), disabled(s))
	}
	s.Close()

	s = open(server.Config{DemoReset: true, DemoPassword: "third-pw"})
	defer s.Close()
	if !adminOK(s, "third-pw") || disabled(s) {
		t.Fatalf("reset: password works %v, change undone %v", adminOK(s, "third-pw"), !disabled(s))
	}
}
