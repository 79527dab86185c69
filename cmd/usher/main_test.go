package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/siteyaml"
)

// syncBuffer is a bytes.Buffer safe for a server goroutine and a test.
type syncBuffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	grew chan struct{} // closed at the next write; nil until asked for
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grew != nil {
		close(s.grew)
		s.grew = nil
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// changed returns a channel that is closed at the next write: ask for it
// before reading String, so that no write between the two goes unseen.
func (s *syncBuffer) changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grew == nil {
		s.grew = make(chan struct{})
	}
	return s.grew
}

// run runs usher with args to completion.
func run(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb syncBuffer
	m := &Main{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }, Self: testSelf}
	code = m.Run(context.Background(), args)
	return code, out.String(), errb.String()
}

// serveProc is an usher serve running in the test process.
type serveProc struct {
	url    string
	stdout *syncBuffer
	stderr *syncBuffer
	stop   func() int
}

func startServe(t *testing.T, args ...string) *serveProc {
	t.Helper()
	// The demo's desktop host (on by default) is for the tests that ask
	// for it with --demo-desktop: the others are about the demo's
	// simulated machines, and their launches of a pooled desktop would
	// each start a real Xvnc.
	if slices.Contains(args, "--demo") && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--demo-desktop") }) {
		args = append(args[:len(args):len(args)], "--demo-desktop=false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &serveProc{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	addr := make(chan string, 1)
	m := &Main{Stdin: strings.NewReader(""), Stdout: s.stdout, Stderr: s.stderr, Getenv: func(string) string { return "" },
		Listening: func(_, a string) { addr <- a }}
	done := make(chan int, 1)
	go func() { done <- m.Run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)) }()
	select {
	case a := <-addr:
		s.url = "http://" + a
	case code := <-done:
		cancel()
		t.Fatalf("serve exited with %d before listening: %s", code, s.stderr.String())
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("serve did not start listening in 60s")
	}
	var once sync.Once
	var code int
	s.stop = func() int {
		once.Do(func() {
			cancel()
			select {
			case code = <-done:
			case <-time.After(30 * time.Second):
				t.Error("serve did not stop within 30s of cancellation")
			}
		})
		return code
	}
	t.Cleanup(func() { s.stop() })
	return s
}

func get(t *testing.T, url, user, password string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestServeDemo(t *testing.T) {
	data := t.TempDir()
	s := startServe(t, "--demo", "--demo-password", "demo-pass-1", "--data", data)

	out := s.stdout.String()
	for _, want := range []string{s.url + "/api/v1/admin/", s.url + "/api/openapi.json", "demo-pass-1", "user0001", "admin"} {
		if !strings.Contains(out, want) {
			t.Errorf("banner lacks %q:\n%s", want, out)
		}
	}
	if code, body := get(t, s.url+"/healthz", "", ""); code != 200 || strings.TrimSpace(string(body)) != "ok" {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	if code, _ := get(t, s.url+"/readyz", "", ""); code != 200 {
		t.Fatalf("/readyz: %d", code)
	}
	code, body := get(t, s.url+"/site", "", "")
	if code != 200 || !strings.Contains(string(body), "usher demo") || !strings.Contains(string(body), "400") {
		t.Fatalf("site page: %d %s", code, body)
	}
	if code, body := get(t, s.url+"/", "", ""); code != 200 || !strings.Contains(string(body), `src="/portal/portal.js"`) {
		t.Fatalf("portal page: %d %.300s", code, body)
	}
	code, body = get(t, s.url+"/api/v1/admin/applications?limit=10", "admin", "demo-pass-1")
	var page struct {
		Items []json.RawMessage `json:"items"`
		Total int               `json:"total"`
	}
	if err := json.Unmarshal(body, &page); code != 200 || err != nil || page.Total != 400 || len(page.Items) != 10 {
		t.Fatalf("applications: %d %s", code, body)
	}
	if code, _ := get(t, s.url+"/api/v1/admin/site", "admin", "wrong"); code != 401 {
		t.Fatalf("wrong admin password: %d, want 401", code)
	}
	if strings.Contains(s.stderr.String(), "demo-pass-1") {
		t.Fatal("the password appears in the logs")
	}

	t.Run("second server on the same data directory", func(t *testing.T) {
		code, _, stderr := run(t, "", "serve", "--listen", "127.0.0.1:0", "--data", data)
		if code != 1 || !strings.Contains(stderr, "in use by another usher serve") {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
	})

	if code := s.stop(); code != 0 {
		t.Fatalf("serve exited with %d after cancellation: %s", code, s.stderr.String())
	}
	if !strings.Contains(s.stderr.String(), "stopped") {
		t.Fatalf("no clean shutdown in the log: %s", s.stderr.String())
	}

	t.Run("restart keeps the site and the password", func(t *testing.T) {
		s := startServe(t, "--demo", "--demo-password", "demo-pass-1", "--data", data, "--log-format", "json")
		if code, _ := get(t, s.url+"/api/v1/admin/site", "admin", "demo-pass-1"); code != 200 {
			t.Fatalf("after restart: %d", code)
		}
		if !strings.Contains(s.stderr.String(), "site kept as it is, passwords included") {
			t.Fatalf("restart changed the site: %s", s.stderr.String())
		}
	})
}

func TestServeStartupErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, []byte("x"), 0o600)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"data directory under a file", []string{"--data", filepath.Join(file, "data")}, 1, "cannot be created"},
		{"busy port", nil, 1, "listen on"},
		{"bad log level", []string{"--log-level", "loud"}, 2, "--log-level"},
		{"demo password without demo", []string{"--demo-password", "x"}, 2, "--demo-password needs --demo"},
		{"bad send buffer", []string{"--send-buffer", "lots"}, 2, "--send-buffer \"lots\" is not a size"},
		{"stray argument", []string{"extra"}, 2, "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--data", t.TempDir()}, tc.args...)
			if tc.name == "busy port" {
				s := startServe(t, "--data", t.TempDir())
				args = append(args, "--listen", strings.TrimPrefix(s.url, "http://"))
			}
			code, _, stderr := run(t, "", args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.want)
			}
		})
	}
}

func TestApplyExportRoundTrip(t *testing.T) {
	data := t.TempDir()
	example := filepath.Join("..", "..", "examples", "site.yaml")

	code, out, stderr := run(t, "", "apply", "-f", example, "--data", data, "--dry-run", "-q")
	if code != 0 || !strings.Contains(out, "dry run: would create") {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, stderr)
	}
	code, _, stderr = run(t, "", "export", "--data", data)
	if code != 1 || !strings.Contains(stderr, "no site DB") {
		t.Fatalf("the dry run made a site DB: exit %d\n%.500s", code, stderr)
	}

	code, out, stderr = run(t, "", "apply", "-f", example, "--data", data, "-q")
	if code != 0 || !strings.Contains(out, "applied") {
		t.Fatalf("apply: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = run(t, "", "apply", "-f", example, "--data", data)
	if code != 0 || !strings.Contains(out, "already matches") {
		t.Fatalf("second apply is not a no-op: exit %d\n%s%s", code, out, stderr)
	}

	exported := filepath.Join(t.TempDir(), "exported.yaml")
	if code, _, stderr := run(t, "", "export", "--data", data, "-o", exported); code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	a, b := decodeFile(t, example), decodeFile(t, exported)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("export of an applied example is not equivalent to the example")
	}
	code, out, _ = run(t, "", "apply", "-f", exported, "--data", data)
	if code != 0 || !strings.Contains(out, "already matches") {
		t.Fatalf("applying the export changed the site: exit %d\n%s", code, out)
	}
}

func decodeFile(t *testing.T, path string) any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := siteyaml.Decode(path, f)
	if err != nil {
		t.Fatal(err)
	}
	return doc.Config
}

func TestApplyBadInput(t *testing.T) {
	data := t.TempDir()
	base := `settings: {name: test, domain: TEST}
zones: [{name: z1, primary: true}]
catalogs: [{name: c1, kind: multi-session, zone: z1}]
machines:
  - name: m1
    catalog: c1
    address: m1.test:3389
`
	if code, out, stderr := run(t, base, "apply", "-f", "-", "--data", data); code != 0 {
		t.Fatalf("apply base: exit %d\n%s%s", code, out, stderr)
	}
	for _, tc := range []struct {
		name, file, want string
	}{
		{"unknown key", base + "    colour: red\n", `<stdin>:8: unknown field "colour" in machine "m1"`},
		{"bad YAML", base + "  - name: [\n", "<stdin>:"},
		{"missing reference", base + "  - name: m2\n    catalog: nope\n    address: m2.test:3389\n", `catalog "nope"`},
		{"duplicate name", base + "  - name: m1\n    catalog: c1\n    address: x.test:3389\n", `machine "m1" already exists`},
		{"wrong type", strings.Replace(base, "address: m1.test:3389", "address: m1.test:3389\n    max_sessions: lots", 1), "<stdin>:8"},
		{"line break in an address", strings.Replace(base, "address: m1.test:3389", `address: "m1.test:3389\r\nalternate shell:s:calc"`, 1), "control character"},
		{"line break in a display name", base + `delivery_groups: [{name: g1, catalogs: [c1]}]
applications: [{name: a1, display_name: "App\nalternate shell:s:calc", command_line: app, delivery_groups: [g1]}]
`, "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := run(t, tc.file, "apply", "-f", "-", "--data", data)
			if code != 1 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 1 and %q (stdout %q)", code, stderr, tc.want, out)
			}
			// Nothing was applied: the base file still matches.
			if code, out, _ := run(t, base, "apply", "-f", "-", "--data", data, "--dry-run"); code != 0 || !strings.Contains(out, "already matches") {
				t.Fatalf("a refused apply changed the site:\n%s", out)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		code, _, stderr := run(t, "", "apply", "-f", filepath.Join(data, "nope.yaml"), "--data", data)
		if code != 1 || !strings.Contains(stderr, "no such file") {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("no -f", func(t *testing.T) {
		if code, _, _ := run(t, "", "apply", "--data", data); code != 2 {
			t.Fatalf("exit %d, want 2", code)
		}
	})
	t.Run("export of an empty directory", func(t *testing.T) {
		code, _, stderr := run(t, "", "export", "--data", t.TempDir())
		if code != 1 || !strings.Contains(stderr, "no site DB") {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
	})
}

func TestAdminAdd(t *testing.T) {
	data := t.TempDir()
	code, out, stderr := run(t, "a-long-password\n", "admin", "add", "ops", "--password-stdin", "--data", data)
	if code != 0 || !strings.Contains(out, `admin "ops" added`) {
		t.Fatalf("exit %d: %s%s", code, out, stderr)
	}
	if code, _, stderr := run(t, "a-long-password\n", "admin", "add", "ops", "--password-stdin", "--data", data); code != 1 || !strings.Contains(stderr, "already exists") {
		t.Fatalf("duplicate admin: exit %d, %s", code, stderr)
	}
	s := startServe(t, "--data", data)
	if code, _ := get(t, s.url+"/api/v1/admin/site", "ops", "a-long-password"); code != 200 {
		t.Fatalf("new admin cannot log in: %d", code)
	}
}

func TestUsage(t *testing.T) {
	if code, _, _ := run(t, "", "frobnicate"); code != 2 {
		t.Fatalf("unknown command: exit %d, want 2", code)
	}
	if code, out, _ := run(t, "", "help"); code != 0 || !strings.Contains(out, "serve") {
		t.Fatalf("help: exit %d\n%s", code, out)
	}
	if code, out, _ := run(t, "", "version"); code != 0 || !strings.HasPrefix(out, "usher ") {
		t.Fatalf("version: exit %d %q", code, out)
	}
}
