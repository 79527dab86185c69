package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/server"
)

// TestVDAAgentKeepsTokenCredential: an agent that enrolled with a
// single-use machine enrolment token keeps its credential in its state
// file (0600), and after a restart registers again with it, its token
// spent, without enrolling again.
func TestVDAAgentKeepsTokenCredential(t *testing.T) {
	ctx := context.Background()
	const pw = "demo-pass-1"
	srv, err := server.Open(ctx, server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Demo: true, DemoPassword: pw,
		HeartbeatInterval: 200 * time.Millisecond, AllowVDAAddressChange: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	const machine = "office-vda-01"
	req, _ := http.NewRequest("POST", srv.URL()+"/api/v1/admin/machines/"+machine+"/enrolment-token", nil)
	req.SetBasicAuth("admin", pw)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var tok struct{ Token string }
	json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || tok.Token == "" {
		t.Fatalf("enrolment token: %d", resp.StatusCode)
	}
	stateFile := filepath.Join(t.TempDir(), "vda-state.json")
	type machineInfo struct {
		Registration string `json:"registration"`
		ControlURL   string `json:"control_url"`
	}
	info := func() machineInfo {
		_, body := get(t, srv.URL()+"/api/v1/admin/machines/"+machine, "admin", pw)
		var m machineInfo
		json.Unmarshal(body, &m)
		return m
	}
	issuedAt := func() string {
		_, body := get(t, srv.URL()+"/api/v1/admin/machines/"+machine+"/credential", "admin", pw)
		var c struct {
			IssuedAt string `json:"issued_at"`
		}
		json.Unmarshal(body, &c)
		return c.IssuedAt
	}
	// run starts the agent and waits until the broker has its registration
	// (its control URL, on a new port each run).
	run := func() *vdaProc {
		t.Helper()
		agent := startVDA(t, "--broker", srv.URL(), "--machine", machine, "--enrolment-token", tok.Token,
			"--listen", "127.0.0.1:0", "--address", "127.0.0.1:3389", "--state-file", stateFile)
		control := agent.controlURL(t)
		waitFor(t, machine+" registered from "+control, func() bool {
			select {
			case code := <-agent.done:
				t.Fatalf("usher vda exited with %d: %s", code, agent.stderr.String())
			default:
			}
			m := info()
			return m.Registration == "registered" && strings.HasPrefix(m.ControlURL, control)
		})
		return agent
	}

	first := run()
	issued := issuedAt()
	st, err := os.Stat(stateFile)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("state file mode %v, want 0600", st.Mode().Perm())
	}
	raw, _ := os.ReadFile(stateFile)
	if !strings.Contains(string(raw), `"credential":`) || !strings.Contains(string(raw), `"credential_expires":`) {
		t.Fatalf("state file keeps no credential: %s", raw)
	}
	if code := first.stop(t); code != 0 {
		t.Fatalf("first agent exited with %d: %s", code, first.stderr.String())
	}

	second := run() // the token is spent: only the saved credential registers it
	if got := issuedAt(); got != issued {
		t.Errorf("the restarted agent enrolled again: credential issued at %s, then %s", issued, got)
	}
	if strings.Contains(second.stderr.String(), "enrolment token") {
		t.Errorf("the restarted agent complained about its token: %s", second.stderr.String())
	}
	second.stop(t)

	// Revoked, the saved credential is refused, and the spent token cannot
	// enrol the agent again: it stops and says why.
	req, _ = http.NewRequest("POST", srv.URL()+"/api/v1/admin/machines/"+machine+"/revoke-credential", nil)
	req.SetBasicAuth("admin", pw)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("revoke: %v %v", resp, err)
	}
	third := startVDA(t, "--broker", srv.URL(), "--machine", machine, "--enrolment-token", tok.Token,
		"--listen", "127.0.0.1:0", "--address", "127.0.0.1:3389", "--state-file", stateFile)
	select {
	case code := <-third.done:
		if code == 0 {
			t.Fatalf("an agent with a revoked credential and a spent token exited 0: %s", third.stderr.String())
		}
		third.done <- code
	case <-time.After(60 * time.Second):
		t.Fatalf("an agent with a revoked credential and a spent token kept running: %s", third.stderr.String())
	}
}
