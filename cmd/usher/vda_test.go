package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/server"
)

// vdaProc is an usher vda running in the test process.
type vdaProc struct {
	addr   chan string
	stderr *syncBuffer
	done   chan int
	cancel context.CancelFunc
}

func startVDA(t *testing.T, args ...string) *vdaProc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &vdaProc{addr: make(chan string, 1), stderr: &syncBuffer{}, done: make(chan int, 1), cancel: cancel}
	m := &Main{Stdin: strings.NewReader(""), Stdout: &syncBuffer{}, Stderr: p.stderr, Getenv: func(string) string { return "" },
		Listening: func(_, a string) { p.addr <- a }}
	go func() { p.done <- m.Run(ctx, append([]string{"vda"}, args...)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Error("usher vda did not stop within 30s of cancellation")
		}
	})
	return p
}

// controlURL waits until the agent listens and returns its control URL.
func (p *vdaProc) controlURL(t *testing.T) string {
	t.Helper()
	select {
	case a := <-p.addr:
		return "http://" + a
	case code := <-p.done:
		t.Fatalf("usher vda exited with %d: %s", code, p.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatal("usher vda did not listen within 60s")
	}
	return ""
}

// stop stops the VDA and returns its exit status.
func (p *vdaProc) stop(t *testing.T) int {
	t.Helper()
	p.cancel()
	select {
	case code := <-p.done:
		p.done <- code // for the cleanup
		return code
	case <-time.After(30 * time.Second):
		t.Fatal("usher vda did not stop within 30s of cancellation")
	}
	return -1
}

// readmeCommand returns the README's line that begins with prefix.
func readmeCommand(t *testing.T, prefix string) string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, prefix) {
			return line
		}
	}
	t.Fatalf("README.md has no line beginning %q", prefix)
	return ""
}

// TestVDASimulateREADME runs the README's simulated-VDA command, as
// written but for the broker's port and the data directory, against usher
// serve --demo: it plays the 40 office machines, which register.
func TestVDASimulateREADME(t *testing.T) {
	data := t.TempDir()
	// The demo's desktop host would register its own five machines.
	s := startServe(t, "--demo", "--demo-password", "demo-pass-1", "--data", data, "--heartbeat-interval", "200ms", "--demo-desktop=false")

	line := readmeCommand(t, "usher vda --simulate")
	for old, repl := range map[string]string{
		"http://127.0.0.1:8080":                 s.url,
		"~/.local/state/usher/enrolment.secret": filepath.Join(data, "enrolment.secret"),
	} {
		if !strings.Contains(line, old) {
			t.Fatalf("the README's command %q lacks %q", line, old)
		}
		line = strings.ReplaceAll(line, old, repl)
	}
	args := strings.Fields(line)[2:] // after "usher vda"
	p := startVDA(t, args...)
	waitFor(t, "the 40 office machines registered", func() bool {
		return metricSum(metrics(t, s.url), "usher_machines", `state="registered"`) == 40
	})
	_, body := get(t, s.url+"/api/v1/admin/machines/office-vda-40", "admin", "demo-pass-1")
	if !strings.Contains(string(body), `"registration":"registered"`) && !strings.Contains(string(body), `"registration": "registered"`) {
		t.Fatalf("office-vda-40 is not registered: %s", body)
	}
	_, body = get(t, s.url+"/api/v1/admin/machines/eng-vda-01", "admin", "demo-pass-1")
	if strings.Contains(string(body), `"registered"`) {
		t.Fatalf("eng-vda-01, of another catalog, registered: %s", body)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("usher vda exited with %d: %s", code, p.stderr.String())
	}
	if n := strings.Count(p.stderr.String(), "\n"); n > 10 {
		t.Errorf("the simulator logged %d lines at info level, want a summary:\n%s", n, p.stderr.String())
	}
}

func TestVDASimulateSelections(t *testing.T) {
	data := t.TempDir()
	// The demo's desktop host would register its own five machines.
	s := startServe(t, "--demo", "--demo-password", "demo-pass-1", "--data", data, "--heartbeat-interval", "200ms", "--demo-desktop=false")
	secret := filepath.Join(data, "enrolment.secret")
	wrong := filepath.Join(t.TempDir(), "wrong.secret")
	os.WriteFile(wrong, []byte("not-the-secret-at-all\n"), 0o600)
	common := []string{"--broker", s.url, "--enrolment-secret-file", secret}

	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			args []string
			code int
			want string
		}{
			{"more than the prefix matches", []string{"--simulate", "57", "--machine-prefix", "office-vda"}, 1,
				`--simulate 57, but the site has only 40 machines whose names begin with "office-vda"`},
			{"not a number", []string{"--simulate", "many"}, 2, `--simulate "many": want all`},
			{"zero", []string{"--simulate", "0"}, 2, "at least 1"},
			{"unknown catalog", []string{"--simulate", "all", "--catalog", "nope"}, 1, "not_found"},
			{"unknown delivery group", []string{"--simulate", "all", "--delivery-group", "nope"}, 1, "not_found"},
			{"no match", []string{"--simulate", "all", "--machine-prefix", "zz"}, 1, `the site has no machines whose names begin with "zz" to simulate`},
			{"unknown listed machine", []string{"--simulate", "all", "--machines", "office-vda-01,office-vda-001"}, 1, "the site has no machine office-vda-001"},
			{"list and filter", []string{"--simulate", "all", "--machines", "office-vda-01", "--catalog", "rdsh-office"}, 2, "excludes"},
			{"list too short", []string{"--simulate", "3", "--machines", "office-vda-01,office-vda-02"}, 1, "--machines names only 2 machines"},
			{"filter without --simulate", []string{"--machine", "office-vda-01", "--catalog", "rdsh-office"}, 2, "--catalog needs --simulate"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code, _, stderr := run(t, "", append(append([]string{"vda"}, common...), tc.args...)...)
				if code != tc.code || !strings.Contains(stderr, tc.want) {
					t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.want)
				}
			})
		}
		code, _, stderr := run(t, "", "vda", "--broker", s.url, "--enrolment-secret-file", wrong, "--simulate", "all")
		if code != 1 || !strings.Contains(stderr, "refused the enrolment secret") {
			t.Fatalf("wrong secret: exit %d, stderr %q", code, stderr)
		}
	})

	// Delivery group, prefix and count combine; the machines register.
	p := startVDA(t, append(common, "--simulate", "3", "--delivery-group", "Engineering Apps", "--machine-prefix", "eng-vda-0")...)
	waitFor(t, "3 engineering machines registered", func() bool {
		return metricSum(metrics(t, s.url), "usher_machines", `state="registered"`) == 3
	})
	_, body := get(t, s.url+"/api/v1/admin/machines/eng-vda-03", "admin", "demo-pass-1")
	if !regexp.MustCompile(`"registration": ?"registered"`).Match(body) {
		t.Fatalf("eng-vda-03 is not registered: %s", body)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("usher vda exited with %d: %s", code, p.stderr.String())
	}
}

// TestServeSimulatedVDAsBannerLast: usher serve --sim-vdas -1 prints its
// banner, credentials included, after the simulated VDAs have registered,
// and logs a summary of them instead of a line per machine.
func TestServeSimulatedVDAsBannerLast(t *testing.T) {
	s := startServe(t, "--demo", "--demo-password", "demo-pass-1", "--data", t.TempDir(),
		"--sim-vdas", "-1", "--heartbeat-interval", "200ms", "--demo-desktop=false")
	// startServe returns once serve has called Listening, after the banner.
	out := s.stdout.String()
	if !regexp.MustCompile(`57 simulated VDAs registered in \d`).MatchString(out) {
		t.Fatalf("the banner does not say the simulated VDAs registered:\n%s", out)
	}
	if !strings.Contains(out, "demo-pass-1") || !strings.HasSuffix(out, "Press Ctrl-C to stop.\n") {
		t.Fatalf("banner:\n%s", out)
	}
	if m := metrics(t, s.url); metricSum(m, "usher_machines", `state="registered"`) != 57 {
		t.Fatal("the banner came before the machines registered")
	}
	logs := s.stderr.String()
	for _, chatter := range []string{"machine enrolled", "machine registered"} {
		if strings.Contains(logs, chatter) {
			t.Errorf("the log has per-machine %q lines at info level", chatter)
		}
	}
	if !strings.Contains(logs, "simulated VDAs registered") {
		t.Errorf("the log lacks the simulator's summary:\n%s", logs)
	}
	if n := strings.Count(logs, "\n"); n > 20 {
		t.Errorf("serve logged %d lines before the banner:\n%s", n, logs)
	}
}

// TestServeSimulatedVDAsBoundedWait: when the simulated VDAs take longer
// than --sim-wait, serve prints its banner anyway, saying how many have
// registered.
func TestServeSimulatedVDAsBoundedWait(t *testing.T) {
	s := startServe(t, "--demo", "--demo-password", "demo-pass-1", "--data", t.TempDir(),
		"--sim-vdas", "-1", "--sim-wait", "1ns", "--demo-desktop=false")
	out := s.stdout.String()
	if !regexp.MustCompile(`(\d+ of 57 simulated VDAs registered within 1ns; the rest keep trying|57 simulated VDAs registered in)`).MatchString(out) {
		t.Fatalf("banner:\n%s", out)
	}
}

// TestVDAAgentSessionLifecycle runs the real agent with
// examples/session-command.sh against a real site, and walks a session
// through its life as the README tells it: the launch prepares it (the
// command runs), a client presents the ticket at the agent's /connect (the
// session turns active at the broker), the user disconnects, reconnects
// with a new ticket, and logs off.
func TestVDAAgentSessionLifecycle(t *testing.T) {
	ctx := context.Background()
	// The agent plays office-vda-01 from this host: its address is not the
	// machine's configured one.
	srv, err := server.Open(ctx, server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Demo: true, DemoPassword: "demo-pass-1",
		HeartbeatInterval: 200 * time.Millisecond, AllowVDAAddressChange: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	_, secretFile := srv.EnrolmentSecret()
	script, err := filepath.Abs(filepath.Join("..", "..", "examples", "session-command.sh"))
	if err != nil {
		t.Fatal(err)
	}
	events := filepath.Join(t.TempDir(), "sessions.log")

	agent := startVDA(t, "--broker", srv.URL(), "--machine", "office-vda-01", "--enrolment-secret-file", secretFile,
		"--listen", "127.0.0.1:0", "--address", "127.0.0.1:3389", "--session-command", script+" "+events)
	control := agent.controlURL(t)
	waitFor(t, "office-vda-01 registered", func() bool {
		_, body := get(t, srv.URL()+"/api/v1/admin/machines/office-vda-01", "admin", "demo-pass-1")
		return regexp.MustCompile(`"registration": ?"registered"`).Match(body)
	})

	var login struct{ Token string }
	code, body := postJSON(t, srv.URL()+"/api/v1/login", "", `{"username":"DEMO\\user0001","password":"demo-pass-1"}`)
	if json.Unmarshal(body, &login); code != 200 || login.Token == "" {
		t.Fatalf("login: %d %s", code, body)
	}
	type launchAnswer struct {
		SessionID   string `json:"session_id"`
		Machine     string `json:"machine"`
		Ticket      string `json:"ticket"`
		Reconnected bool   `json:"reconnected"`
	}
	launch := func() launchAnswer {
		t.Helper()
		code, body := postJSON(t, srv.URL()+"/api/v1/resources/office-writer-001/launch", login.Token, `{"client_name":"laptop-42"}`)
		var l launchAnswer
		json.Unmarshal(body, &l)
		if code != 200 || l.Ticket == "" || l.Machine != "office-vda-01" {
			t.Fatalf("launch: %d %s", code, body)
		}
		return l
	}
	state := func() string {
		t.Helper()
		_, body := getBearer(t, srv.URL()+"/api/v1/sessions", login.Token)
		var resp struct{ Sessions []struct{ ID, State string } }
		json.Unmarshal(body, &resp)
		if len(resp.Sessions) == 0 {
			return "none"
		}
		return resp.Sessions[0].State
	}
	logged := func(event, id string) func() bool {
		return func() bool {
			raw, _ := os.ReadFile(events)
			return strings.Contains(string(raw), " "+event+" session="+id+" user=")
		}
	}
	present := func(ticket string) (int, []byte) {
		t.Helper()
		return postJSON(t, control+"/connect", "", `{"ticket":"`+ticket+`","client_name":"laptop-42"}`)
	}

	l := launch()
	if !logged("prepare", l.SessionID)() {
		raw, _ := os.ReadFile(events)
		t.Fatalf("the session command did not run at prepare: %q %s", raw, agent.stderr.String())
	}
	if got := state(); got != "pending" {
		t.Fatalf("before the ticket is presented, the session is %s, want pending", got)
	}
	code, body = present(l.Ticket)
	var conn struct {
		SessionID string `json:"session_id"`
		Resource  string `json:"resource"`
	}
	if json.Unmarshal(body, &conn); code != 200 || conn.SessionID != l.SessionID || conn.Resource != "office-writer-001" {
		t.Fatalf("connect: %d %s", code, body)
	}
	waitFor(t, "the session active at the broker", func() bool { return state() == "active" })
	if code, _ := present(l.Ticket); code != 401 {
		t.Fatalf("the ticket presented twice: %d, want 401", code)
	}

	if code, body := postJSON(t, srv.URL()+"/api/v1/sessions/"+l.SessionID+"/disconnect", login.Token, ""); code != 204 {
		t.Fatalf("disconnect: %d %s", code, body)
	}
	waitFor(t, "the disconnect at the broker", func() bool { return state() == "disconnected" })
	waitFor(t, "the session command at disconnect", logged("disconnect", l.SessionID))

	r := launch()
	if !r.Reconnected || r.SessionID != l.SessionID {
		t.Fatalf("the second launch did not go back to the session: %+v", r)
	}
	if code, body := present(r.Ticket); code != 200 {
		t.Fatalf("reconnect: %d %s", code, body)
	}
	waitFor(t, "the reconnection at the broker", func() bool { return state() == "active" })

	if code, body := postJSON(t, srv.URL()+"/api/v1/sessions/"+l.SessionID+"/logoff", login.Token, ""); code != 204 {
		t.Fatalf("logoff: %d %s", code, body)
	}
	waitFor(t, "the session command at logoff", logged("logoff", l.SessionID))
	waitFor(t, "the logoff at the broker", func() bool { return state() == "none" })

	if code := agent.stop(t); code != 0 {
		t.Fatalf("usher vda exited with %d: %s", code, agent.stderr.String())
	}
}
