package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/vda"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

const testPassword = "pw-1234-impersonation"

// openSite starts a demo site whose machines but the last are played by
// simulated VDAs, and returns it with the name of the machine left free.
func openImpersonation(t *testing.T) (*server.Server, string) {
	t.Helper()
	ctx := t.Context()
	s, err := server.Open(ctx, server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Demo: true,
		DemoPassword: testPassword, SimVDAs: 56, HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	names := s.Broker().Snapshot().MachineNames()
	poll(t, time.Minute, "the simulated VDAs to register", func() bool {
		reg, _ := s.WaitSimulated(ctx, 0)
		return reg == 56
	})
	return s, names[len(names)-1]
}

// poll calls cond until it holds, failing the test at the deadline.
func poll(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // a poll interval, not a wait for an outcome
	}
}

func adminDo(t *testing.T, s *server.Server, method, path string, out any) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, s.URL()+"/api/v1/admin"+path, nil)
	req.SetBasicAuth("admin", testPassword)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return resp.StatusCode, string(b)
}

func machineState(t *testing.T, s *server.Server, name string) site.MachineState {
	t.Helper()
	var st site.MachineState
	if code, body := adminDo(t, s, "GET", "/machines/"+name, &st); code != 200 {
		t.Fatalf("get machine %s: %d %s", name, code, body)
	}
	return st
}

func brokerCode(err error) int {
	var be *vda.BrokerError
	if errors.As(err, &be) {
		return be.StatusCode
	}
	return 0
}

// forger is a VDA that is not the machine it claims to be: a control
// listener that counts what the broker sends it.
type forger struct {
	client *vda.Client
	srv    *httptest.Server
	calls  atomic.Int64
}

func newForger(t *testing.T, s *server.Server) *forger {
	f := &forger{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(f.srv.Close)
	var err error
	if f.client, err = vda.NewClient(vda.ClientConfig{BrokerURL: s.URL(), Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *forger) register(ctx context.Context, cred vda.Credential, machine, address string) error {
	_, err := f.client.Register(ctx, cred, vdaproto.RegisterRequest{Machine: machine, Address: address,
		ControlURL: f.srv.URL, ControlToken: "forged-control-token-0123456789"})
	return err
}

// TestEnrolmentSecretDoesNotImpersonateALiveMachine replays the attack: a
// holder of the site's enrolment secret enrols as a machine whose real
// (simulated) VDA runs, and tries to register its own address and control
// URL. It gets neither the registration nor any prepare; the conflict is
// visible; the real VDA keeps taking sessions.
func TestEnrolmentSecretDoesNotImpersonateALiveMachine(t *testing.T) {
	t.Parallel()
	s, _ := openImpersonation(t)
	ctx := t.Context()
	secret, _ := s.EnrolmentSecret()
	victim := s.Broker().Snapshot().MachineNames()[0]
	m, _, _ := s.Broker().Snapshot().Machine(victim)
	before := machineState(t, s, victim)
	f := newForger(t, s)

	cred, err := f.client.Enrol(ctx, victim, secret)
	if err != nil {
		t.Fatalf("enrol with the secret: %v", err)
	}
	// Its own address: refused.
	err = f.register(ctx, cred, victim, "attacker.example:3389")
	if brokerCode(err) != http.StatusForbidden || !strings.Contains(err.Error(), "configured address") {
		t.Fatalf("register with another address: %v, want 403 naming the configured address", err)
	}
	// The machine's address, its own control URL: the real VDA heartbeats, so refused.
	err = f.register(ctx, cred, victim, m.Address)
	if brokerCode(err) != http.StatusConflict || !strings.Contains(err.Error(), "registered by another VDA") {
		t.Fatalf("second registration: %v, want 409 registered by another VDA", err)
	}
	st := machineState(t, s, victim)
	if st.ControlURL != before.ControlURL || st.Conflict == "" || !strings.Contains(st.Conflict, f.srv.URL) {
		t.Errorf("after the forger: control URL %q (was %q), conflict %q; want the real VDA's, and the conflict shown",
			st.ControlURL, before.ControlURL, st.Conflict)
	}
	if code, body := get(t, s.URL()+"/metrics"); code != 200 || !strings.Contains(body, "usher_vda_registration_conflicts_total 1") {
		t.Errorf("metrics do not count the conflict")
	}
	// Its heartbeats are not the registered VDA's.
	if _, err := f.client.Heartbeat(ctx, cred, vdaproto.Heartbeat{Machine: victim, CPUPercent: 1}); err == nil {
		t.Error("the forger's heartbeat was accepted")
	}

	// The real VDA enrols again (cutting the forger off) and keeps its
	// registration: it heartbeats on.
	forged := time.Now().UTC()
	poll(t, 30*time.Second, "the real VDA to heartbeat again", func() bool {
		st := machineState(t, s, victim)
		return st.Registration == site.Registered && st.LastHeartbeat.After(forged.Add(300*time.Millisecond)) && st.ControlURL == before.ControlURL
	})
	if _, err := f.client.Heartbeat(ctx, cred, vdaproto.Heartbeat{Machine: victim}); brokerCode(err) != http.StatusUnauthorized {
		t.Errorf("the forger's replaced credential: %v, want 401", err)
	}

	// Users' launches reach the real VDAs only.
	token := login(t, s, "DEMO\\user0001")
	for range 5 {
		launch(t, s, token, "office-writer-001")
	}
	if n := f.calls.Load(); n != 0 {
		t.Errorf("the forger's control URL got %d calls", n)
	}
}

// TestMachineCredentialRevocation checks revocation one by one, that
// enrolling again cuts the earlier credential off, and single-use machine
// enrolment tokens, on a machine no simulated VDA plays.
func TestMachineCredentialRevocation(t *testing.T) {
	t.Parallel()
	s, free := openImpersonation(t)
	ctx := t.Context()
	secret, _ := s.EnrolmentSecret()
	m, _, _ := s.Broker().Snapshot().Machine(free)
	v := newForger(t, s) // here the legitimate VDA
	hb := vdaproto.Heartbeat{Machine: free}

	a, err := v.client.Enrol(ctx, free, secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.register(ctx, a, free, m.Address); err != nil {
		t.Fatalf("register: %v", err)
	}
	if _, err := v.client.Heartbeat(ctx, a, hb); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}

	t.Run("EnrollingAgainCutsTheEarlierCredentialOff", func(t *testing.T) {
		b, err := v.client.Enrol(ctx, free, secret)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.client.Heartbeat(ctx, a, hb); brokerCode(err) != http.StatusUnauthorized {
			t.Fatalf("heartbeat with the earlier credential: %v, want 401", err)
		}
		// The registration was the earlier credential's: register again.
		if _, err := v.client.Heartbeat(ctx, b, hb); !errors.Is(err, vda.ErrNotRegistered) {
			t.Fatalf("heartbeat with the new credential before registering: %v, want not registered", err)
		}
		if err := v.register(ctx, b, free, m.Address); err != nil {
			t.Fatalf("register again from the same control URL: %v", err)
		}
		if _, err := v.client.Heartbeat(ctx, b, hb); err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
		a = b
	})

	t.Run("ARevokedCredentialIsRefused", func(t *testing.T) {
		if code, body := adminDo(t, s, "POST", "/machines/"+free+"/revoke-credential", nil); code != http.StatusNoContent {
			t.Fatalf("revoke: %d %s", code, body)
		}
		if _, err := v.client.Heartbeat(ctx, a, hb); brokerCode(err) != http.StatusUnauthorized {
			t.Fatalf("heartbeat after revocation: %v, want 401", err)
		}
		if err := v.register(ctx, a, free, m.Address); brokerCode(err) != http.StatusUnauthorized {
			t.Fatalf("register after revocation: %v, want 401", err)
		}
		// Other machines are untouched.
		other := s.Broker().Snapshot().MachineNames()[1]
		since := time.Now().UTC()
		poll(t, 30*time.Second, "another machine to heartbeat", func() bool {
			return machineState(t, s, other).LastHeartbeat.After(since)
		})
	})

	t.Run("MachineEnrolmentTokenIsSingleUseAndBinds", func(t *testing.T) {
		var tok struct {
			Token string `json:"token"`
		}
		if code, body := adminDo(t, s, "POST", "/machines/"+free+"/enrolment-token", &tok); code != http.StatusCreated || tok.Token == "" {
			t.Fatalf("enrolment token: %d %s", code, body)
		}
		if _, err := v.client.Enrol(ctx, free, secret); brokerCode(err) != http.StatusForbidden {
			t.Fatalf("a bound machine enrols with the secret: %v, want 403", err)
		}
		var c vdaproto.EnrolResponse
		body := fmt.Sprintf(`{"machine":%q,"token":%q}`, free, tok.Token)
		for i, want := range []int{http.StatusOK, http.StatusUnauthorized} {
			resp, err := http.Post(s.URL()+vdaproto.PathEnrol, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Fatalf("enrolment %d with the token: %d %s, want %d", i+1, resp.StatusCode, b, want)
			}
			if i == 0 {
				json.Unmarshal(b, &c)
			}
		}
		cred := vda.Credential{Token: c.Credential, ExpiresAt: c.ExpiresAt}
		renewed, err := v.client.Renew(ctx, cred, free)
		if err != nil {
			t.Fatalf("renew: %v", err)
		}
		if err := v.register(ctx, renewed, free, m.Address); err != nil {
			t.Fatalf("register with the renewed credential: %v", err)
		}
		var mc site.MachineCredential
		if code, body := adminDo(t, s, "GET", "/machines/"+free+"/credential", &mc); code != 200 || !mc.Bound {
			t.Errorf("credential: %d %s; want bound", code, body)
		}
	})
}

// TestDeleteMachineWithLiveSessions checks that deleting a machine with
// live sessions answers 409 naming their count and leaves the sessions
// and the machine as they were; ?force=true ends them and deletes it.
func TestDeleteMachineWithLiveSessions(t *testing.T) {
	t.Parallel()
	s, _ := openImpersonation(t)
	token := login(t, s, "DEMO\\user0002")
	l := launch(t, s, token, "office-writer-001")

	code, body := adminDo(t, s, "DELETE", "/machines/"+l.Machine, nil)
	if code != http.StatusConflict || !strings.Contains(body, "1 live session") {
		t.Fatalf("delete with a live session: %d %s, want 409 naming 1 live session", code, body)
	}
	machineState(t, s, l.Machine) // still there
	if ids := sessionIDs(t, s, token); len(ids) != 1 || ids[0] != l.SessionID {
		t.Fatalf("sessions after the refused delete: %v, want [%s]", ids, l.SessionID)
	}

	if code, body := adminDo(t, s, "DELETE", "/machines/"+l.Machine+"?force=true", nil); code != http.StatusNoContent {
		t.Fatalf("forced delete: %d %s", code, body)
	}
	if code, _ := adminDo(t, s, "GET", "/machines/"+l.Machine, nil); code != http.StatusNotFound {
		t.Errorf("machine after the forced delete: %d, want 404", code)
	}
	if ids := sessionIDs(t, s, token); len(ids) != 0 {
		t.Errorf("live sessions after the forced delete: %v, want none", ids)
	}
}

type launched struct {
	SessionID string `json:"session_id"`
	Machine   string `json:"machine"`
}

func userDo(t *testing.T, s *server.Server, method, path, token, body string, out any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, s.URL()+"/api/v1"+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
}

func login(t *testing.T, s *server.Server, user string) string {
	t.Helper()
	var out struct {
		Token string `json:"token"`
	}
	body, _ := json.Marshal(map[string]string{"username": user, "password": testPassword})
	userDo(t, s, "POST", "/login", "", string(body), &out)
	return out.Token
}

func launch(t *testing.T, s *server.Server, token, resource string) launched {
	t.Helper()
	var l launched
	userDo(t, s, "POST", "/resources/"+resource+"/launch", token, "", &l)
	return l
}

func sessionIDs(t *testing.T, s *server.Server, token string) []string {
	t.Helper()
	var out struct {
		Sessions []struct {
			ID string `json:"id"`
		} `json:"sessions"`
	}
	userDo(t, s, "GET", "/sessions", token, "", &out)
	var ids []string
	for _, x := range out.Sessions {
		ids = append(ids, x.ID)
	}
	return ids
}
