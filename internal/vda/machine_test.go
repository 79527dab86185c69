package vda_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/usher-vdi/usher/internal/vda"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

func TestEnrol(t *testing.T) {
	fb := newFakeBroker(t, time.Second, "vda-1")
	c := newClient(t, fb.URL())
	ctx := context.Background()

	t.Run("wrong secret", func(t *testing.T) {
		_, err := c.Enrol(ctx, "vda-1", "not-the-secret")
		if !errors.Is(err, vda.ErrUnauthorized) {
			t.Fatalf("Enrol with a wrong secret: %v, want ErrUnauthorized", err)
		}
		for _, want := range []string{`enrol "vda-1"`, "401", "wrong enrolment secret"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if strings.Contains(err.Error(), "not-the-secret") {
			t.Errorf("error %q shows the secret", err)
		}
	})
	t.Run("unknown machine", func(t *testing.T) {
		_, err := c.Enrol(ctx, "vda-9", testSecret)
		var be *vda.BrokerError
		if !errors.As(err, &be) || be.StatusCode != http.StatusNotFound || be.Code != "not_found" {
			t.Fatalf("Enrol of an unknown machine: %v, want a 404 not_found BrokerError", err)
		}
	})
	t.Run("right secret", func(t *testing.T) {
		cred, err := c.Enrol(ctx, "vda-1", testSecret)
		if err != nil {
			t.Fatal(err)
		}
		if cred.Token == "" || cred.ExpiresAt.IsZero() {
			t.Fatalf("credential %+v lacks a token or an expiry", cred)
		}
		if s := cred.String(); strings.Contains(s, cred.Token) {
			t.Errorf("Credential.String() = %q shows the token", s)
		}
	})
	t.Run("the agent gives up on a wrong secret", func(t *testing.T) {
		m, err := vda.NewMachine(vda.MachineConfig{Name: "vda-1", Client: c, Secret: "not-the-secret", ControlURL: "http://127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := m.Run(ctx); !errors.Is(err, vda.ErrUnauthorized) {
			t.Fatalf("Run with a wrong secret = %v, want ErrUnauthorized", err)
		}
	})
}

func TestClientRetriesWhileBrokerUnavailable(t *testing.T) {
	fb := newFakeBroker(t, time.Second, "vda-1")
	c := newClient(t, fb.URL())
	fb.mu.Lock()
	fb.fail = vda.DefaultCallAttempts - 1
	fb.mu.Unlock()
	if _, err := c.Enrol(context.Background(), "vda-1", testSecret); err != nil {
		t.Fatalf("Enrol after %d unavailable answers: %v", vda.DefaultCallAttempts-1, err)
	}

	fb.mu.Lock()
	fb.fail = vda.DefaultCallAttempts
	fb.mu.Unlock()
	_, err := c.Enrol(context.Background(), "vda-1", testSecret)
	var be *vda.BrokerError
	if !errors.As(err, &be) || be.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("Enrol while always unavailable: %v, want the 503", err)
	}

	dead := newClient(t, "http://127.0.0.1:1")
	if _, err := dead.Enrol(context.Background(), "vda-1", testSecret); err == nil {
		t.Fatal("Enrol with no broker succeeded")
	}
}

func TestRegisterAndHeartbeat(t *testing.T) {
	const interval = 20 * time.Millisecond
	fb := newFakeBroker(t, interval, "vda-1")
	a := startAgent(t, fb, "vda-1", func(c *vda.MachineConfig) {
		c.Load = &vda.SimLoad{Machine: "vda-1"}
		c.Protocol = "ica"
		c.MaxSessions = 12
	})
	waitFor(t, "five heartbeats", func() bool { return len(fb.heartbeats("vda-1")) >= 5 })

	reg := fb.registrations("vda-1")[0]
	if reg.ControlURL != a.url || reg.Address != "vda-1.test:3389" || reg.Protocol != "ica" || reg.MaxSessions != 12 || reg.AgentVersion == "" {
		t.Errorf("registration %+v does not carry the machine's configuration", reg)
	}
	if !a.Registered() {
		t.Error("Registered() = false after heartbeats")
	}
	beats := fb.heartbeats("vda-1")
	for i := 1; i < len(beats); i++ {
		if gap := beats[i].Sub(beats[i-1]); gap < interval/2 {
			t.Errorf("heartbeat %d came %v after the previous one; the interval is %v", i, gap, interval)
		}
	}
	hb := fb.lastHeartbeat("vda-1")
	if hb.CPUPercent <= 0 || hb.MemoryTotalMB == 0 || hb.MemoryUsedMB == 0 {
		t.Errorf("heartbeat %+v has no load", hb)
	}
}

func TestHeartbeatIntervalOverride(t *testing.T) {
	fb := newFakeBroker(t, time.Hour, "vda-1")
	startAgent(t, fb, "vda-1", func(c *vda.MachineConfig) { c.HeartbeatInterval = 15 * time.Millisecond })
	waitFor(t, "heartbeats at the overridden interval", func() bool { return len(fb.heartbeats("vda-1")) >= 3 })
}

func TestNotRegisteredRegistersAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := newBubbleBroker(t, 20*time.Millisecond, "vda-1")
		startAgent(t, fb, "vda-1", nil)
		settle(100 * time.Millisecond)
		if len(fb.heartbeats("vda-1")) == 0 {
			t.Fatal("no heartbeat after registration")
		}
		if got := fb.prepare("vda-1", "s1", `DEMO\alice`, "ticket-1", false); got != http.StatusNoContent {
			t.Fatalf("prepare: %d", got)
		}

		fb.forget("vda-1") // as a restarted broker would
		settle(100 * time.Millisecond)
		if got := len(fb.registrations("vda-1")); got != 2 {
			t.Fatalf("%d registrations, want a second one", got)
		}
		n := len(fb.heartbeats("vda-1"))
		settle(100 * time.Millisecond)
		if len(fb.heartbeats("vda-1")) <= n {
			t.Fatal("no heartbeats after the second registration")
		}
		reg := fb.registrations("vda-1")[1]
		want := []vdaproto.SessionReport{{ID: "s1", User: `DEMO\alice`, Resource: "Notepad", State: "pending"}}
		if !slices.Equal(reg.Sessions, want) {
			t.Errorf("re-registration reports sessions %+v, want %+v", reg.Sessions, want)
		}
		if _, tok := fb.control("vda-1"); tok != fb.registrations("vda-1")[0].ControlToken {
			t.Error("the control token changed at re-registration")
		}
	})
}

func TestControlRequiresToken(t *testing.T) {
	fb := newFakeBroker(t, 50*time.Millisecond, "vda-1")
	a := startAgent(t, fb, "vda-1", nil)
	waitFor(t, "registration", func() bool { return a.Registered() })
	req := vdaproto.PrepareRequest{SessionID: "s1", User: "alice", TicketHash: vdaproto.TicketHash("t"), ExpiresAt: time.Now().Add(time.Minute)}

	for _, path := range []string{vdaproto.PathPrepare, vdaproto.PathLogoff, vdaproto.PathDisconnect} {
		for name, tok := range map[string]string{"no token": "", "wrong token": "0123456789abcdef0123456789"} {
			status, body := post(t, a.url+path, tok, req)
			if eb := decodeErrorBody(body); status != http.StatusUnauthorized || eb.Error.Code != "unauthorized" {
				t.Errorf("%s with %s: %d %s, want 401 unauthorized", path, name, status, body)
			}
		}
	}
	if len(a.Sessions()) != 0 {
		t.Fatalf("an unauthorized prepare created sessions: %+v", a.Sessions())
	}
	if got := fb.prepare("vda-1", "s1", "alice", "t", false); got != http.StatusNoContent {
		t.Fatalf("prepare with the token: %d, want 204", got)
	}
}

func TestConnectSpendsTicketOnce(t *testing.T) {
	fb := newFakeBroker(t, 50*time.Millisecond, "vda-1")
	a := startAgent(t, fb, "vda-1", nil)
	waitFor(t, "registration", func() bool { return a.Registered() })
	if got := fb.prepare("vda-1", "s1", `DEMO\alice`, "the-ticket", false); got != http.StatusNoContent {
		t.Fatalf("prepare: %d", got)
	}
	if got := a.Sessions(); len(got) != 1 || got[0].State != vda.StatePending {
		t.Fatalf("after prepare, sessions %+v, want one pending", got)
	}

	status, resp, _ := connect(t, a.url, "the-ticket")
	if status != http.StatusOK || resp != (vdaproto.ConnectResponse{SessionID: "s1", User: `DEMO\alice`, Resource: "Notepad"}) {
		t.Fatalf("connect: %d %+v", status, resp)
	}
	waitFor(t, "the logon event", func() bool { _, ok := fb.event1("s1", vdaproto.EventLogon); return ok })
	if ev, _ := fb.event1("s1", vdaproto.EventLogon); ev.ClientName != "laptop-7" || ev.Machine != "vda-1" || ev.At.IsZero() {
		t.Errorf("logon event %+v", ev)
	}
	if got := a.Sessions(); got[0].State != vda.StateActive || got[0].ClientName != "laptop-7" {
		t.Errorf("after connect, session %+v, want active from laptop-7", got[0])
	}

	for name, tc := range map[string]struct{ ticket, says string }{
		"the same ticket again": {"the-ticket", "already used"},
		"an unknown ticket":     {"another-ticket", "unknown"},
	} {
		status, _, eb := connect(t, a.url, tc.ticket)
		if status != http.StatusUnauthorized || eb.Error.Code != "unauthorized" || !strings.Contains(eb.Error.Message, tc.says) {
			t.Errorf("connect with %s: %d %+v, want 401 saying %q", name, status, eb, tc.says)
		}
	}
	if got := fb.eventsOf("s1"); !slices.Equal(got, []string{"logon"}) {
		t.Errorf("events %v, want one logon", got)
	}
}

func TestConnectExpiredTicket(t *testing.T) {
	fb := newFakeBroker(t, 50*time.Millisecond, "vda-1")
	a := startAgent(t, fb, "vda-1", nil)
	waitFor(t, "registration", func() bool { return a.Registered() })
	u, tok := fb.control("vda-1")
	req := vdaproto.PrepareRequest{SessionID: "s1", User: "alice", TicketHash: vdaproto.TicketHash("late"), ExpiresAt: time.Now().Add(-time.Second)}
	if status, body := post(t, u+vdaproto.PathPrepare, tok, req); status != http.StatusNoContent {
		t.Fatalf("prepare: %d %s", status, body)
	}
	status, _, eb := connect(t, a.url, "late")
	if status != http.StatusUnauthorized || eb.Error.Code != "unauthorized" || !strings.Contains(eb.Error.Message, "expired") {
		t.Fatalf("connect with an expired ticket: %d %+v, want 401 expired", status, eb)
	}
}

func TestNewerPrepareSupersedesTicket(t *testing.T) {
	fb := newFakeBroker(t, 50*time.Millisecond, "vda-1")
	a := startAgent(t, fb, "vda-1", nil)
	waitFor(t, "registration", func() bool { return a.Registered() })
	fb.prepare("vda-1", "s1", "alice", "first", false)
	fb.prepare("vda-1", "s1", "alice", "second", false)
	if status, _, _ := connect(t, a.url, "first"); status != http.StatusUnauthorized {
		t.Errorf("connect with a superseded ticket: %d, want 401", status)
	}
	if status, _, _ := connect(t, a.url, "second"); status != http.StatusOK {
		t.Errorf("connect with the newest ticket: %d, want 200", status)
	}
	if got := fb.prepare("vda-1", "s1", "mallory", "third", false); got != http.StatusConflict {
		t.Errorf("prepare of alice's session for another user: %d, want 409", got)
	}
}

func TestSessionLifecycle(t *testing.T) {
	fb := newFakeBroker(t, 50*time.Millisecond, "vda-1")
	a := startAgent(t, fb, "vda-1", nil)
	waitFor(t, "registration", func() bool { return a.Registered() })

	if status, eb := fb.sessionRequest("vda-1", vdaproto.PathLogoff, "nope"); status != http.StatusNotFound || eb.Error.Code != "not_found" {
		t.Errorf("logoff of an unknown session: %d %+v, want 404", status, eb)
	}
	if got := fb.prepare("vda-1", "s1", "alice", "t1", true); got != http.StatusNotFound {
		t.Errorf("reconnect prepare of an unknown session: %d, want 404", got)
	}

	fb.prepare("vda-1", "s1", "alice", "t1", false)
	if status, _ := fb.sessionRequest("vda-1", vdaproto.PathDisconnect, "s1"); status != http.StatusConflict {
		t.Errorf("disconnect of a pending session: %d, want 409", status)
	}
	connect(t, a.url, "t1")
	if status, _ := fb.sessionRequest("vda-1", vdaproto.PathDisconnect, "s1"); status != http.StatusNoContent {
		t.Fatalf("disconnect: %d", status)
	}
	if got := a.Sessions()[0].State; got != vda.StateDisconnected {
		t.Errorf("after disconnect, state %s", got)
	}
	if got := fb.prepare("vda-1", "s1", "alice", "t2", true); got != http.StatusNoContent {
		t.Fatalf("reconnect prepare: %d", got)
	}
	if status, _, _ := connect(t, a.url, "t2"); status != http.StatusOK {
		t.Fatalf("reconnect: %d", status)
	}
	if status, _ := fb.sessionRequest("vda-1", vdaproto.PathLogoff, "s1"); status != http.StatusNoContent {
		t.Fatalf("logoff: %d", status)
	}
	if got := a.Sessions(); len(got) != 0 {
		t.Errorf("after logoff, sessions %+v", got)
	}
	want := []string{"logon", "disconnect", "reconnect", "logoff"}
	waitFor(t, "the four events", func() bool { return len(fb.eventsOf("s1")) == len(want) })
	if got := fb.eventsOf("s1"); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}

func TestMaxSessions(t *testing.T) {
	fb := newFakeBroker(t, 50*time.Millisecond, "vda-1")
	a := startAgent(t, fb, "vda-1", func(c *vda.MachineConfig) { c.MaxSessions = 1 })
	waitFor(t, "registration", func() bool { return a.Registered() })
	if got := fb.prepare("vda-1", "s1", "alice", "t1", false); got != http.StatusNoContent {
		t.Fatalf("first prepare: %d", got)
	}
	if got := fb.prepare("vda-1", "s2", "bob", "t2", false); got != http.StatusServiceUnavailable {
		t.Fatalf("prepare beyond MaxSessions: %d, want 503", got)
	}
}

func TestControlStrictJSON(t *testing.T) {
	fb := newFakeBroker(t, 50*time.Millisecond, "vda-1")
	a := startAgent(t, fb, "vda-1", nil)
	waitFor(t, "registration", func() bool { return a.Registered() })
	u, tok := fb.control("vda-1")
	hash := vdaproto.TicketHash("t")
	exp := time.Now().Add(time.Minute).Format(time.RFC3339)
	good := `{"session_id":"s1","user":"alice","resource":"Notepad","ticket_hash":"` + hash + `","expires_at":"` + exp + `"}`
	for _, tc := range []struct {
		name, contentType, body string
		want                    int
	}{
		{"unknown field", "application/json", `{"session_id":"s1","user":"alice","ticket_hash":"` + hash + `","expires_at":"` + exp + `","evil":1}`, 400},
		{"trailing data", "application/json", good + ` {}`, 400},
		{"not JSON", "application/json", `session_id=s1`, 400},
		{"empty", "application/json", ``, 400},
		{"wrong type", "text/plain", good, 415},
		{"too big", "application/json", `{"session_id":"` + strings.Repeat("x", vda.MaxControlBody) + `"}`, 413},
		{"bad ticket hash", "application/json", `{"session_id":"s1","user":"alice","ticket_hash":"abc","expires_at":"` + exp + `"}`, 400},
		{"no expiry", "application/json", `{"session_id":"s1","user":"alice","ticket_hash":"` + hash + `"}`, 400},
		{"good", "application/json", good, 204},
	} {
		status, body := postRaw(t, u+vdaproto.PathPrepare, tok, tc.contentType, []byte(tc.body))
		if status != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, status, body, tc.want)
		}
		if status >= 400 && decodeErrorBody(body).Error.Code == "" {
			t.Errorf("%s: error answer %s is not the JSON error document", tc.name, body)
		}
	}
	resp, err := http.Get(u + vdaproto.PathPrepare)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET prepare: %d, want 405", resp.StatusCode)
	}
}

// TestSessionCommand runs a real command for each session event; a script
// stands in for the session launcher of a real host.
func TestSessionCommand(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "events")
	script := filepath.Join(dir, "hook")
	os.WriteFile(script, []byte(`#!`+sh+`
[ "$USHER_USER" = refused ] && { echo "no such user" >&2; exit 3; }
printf '%s|%s|%s|%s|%s\n' "$USHER_EVENT" "$USHER_SESSION_ID" "$USHER_USER" "$USHER_RESOURCE" "$USHER_COMMAND_LINE" >> "$1"
`), 0o755)

	fb := newFakeBroker(t, 50*time.Millisecond, "vda-1")
	hook, err := vda.ParseCommand(script + " " + out)
	if err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, fb, "vda-1", func(c *vda.MachineConfig) { c.Hook = hook })
	waitFor(t, "registration", func() bool { return a.Registered() })

	if got := fb.prepare("vda-1", "s1", `DEMO\alice`, "t1", false); got != http.StatusNoContent {
		t.Fatalf("prepare: %d", got)
	}
	if got := fb.prepare("vda-1", "s2", "refused", "t2", false); got != http.StatusInternalServerError {
		t.Fatalf("prepare with a failing command: %d, want 500", got)
	}
	connect(t, a.url, "t1")
	fb.sessionRequest("vda-1", vdaproto.PathDisconnect, "s1")
	fb.sessionRequest("vda-1", vdaproto.PathLogoff, "s1")

	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want := "prepare|s1|DEMO\\alice|Notepad|notepad.exe\n" +
		"disconnect|s1|DEMO\\alice|Notepad|notepad.exe\n" +
		"logoff|s1|DEMO\\alice|Notepad|notepad.exe\n"
	if string(raw) != want {
		t.Errorf("the command saw\n%s\nwant\n%s", raw, want)
	}
	if got := a.Sessions(); len(got) != 0 {
		t.Errorf("sessions left: %+v", got)
	}
}

func TestStateFileKeepsSessionsAcrossRestarts(t *testing.T) {
	fb := newFakeBroker(t, 50*time.Millisecond, "vda-1")
	state := filepath.Join(t.TempDir(), "sessions.json")
	a := startAgent(t, fb, "vda-1", func(c *vda.MachineConfig) { c.StateFile = state })
	waitFor(t, "registration", func() bool { return a.Registered() })
	fb.prepare("vda-1", "s1", "alice", "t1", false)
	connect(t, a.url, "t1")
	fb.prepare("vda-1", "s2", "bob", "t2", false)
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}

	b := startAgent(t, fb, "vda-1", func(c *vda.MachineConfig) { c.StateFile = state })
	waitFor(t, "registration of the restarted agent", func() bool { return b.Registered() })
	regs := fb.registrations("vda-1")
	want := []vdaproto.SessionReport{{ID: "s1", User: "alice", Resource: "Notepad", State: "active"}, {ID: "s2", User: "bob", Resource: "Notepad", State: "pending"}}
	if got := regs[len(regs)-1].Sessions; !slices.Equal(got, want) {
		t.Errorf("the restarted agent reports %+v, want %+v", got, want)
	}
	// The pending session's ticket survived the restart; the spent one did not.
	if status, _, _ := connect(t, b.url, "t2"); status != http.StatusOK {
		t.Errorf("connect with the ticket prepared before the restart: %d", status)
	}
	if status, _, _ := connect(t, b.url, "t1"); status != http.StatusUnauthorized {
		t.Errorf("connect with a ticket spent before the restart: %d", status)
	}
}

func TestEventToForgetfulBrokerRegistersFirst(t *testing.T) {
	fb := newFakeBroker(t, time.Hour, "vda-1") // no heartbeat to notice
	a := startAgent(t, fb, "vda-1", nil)
	waitFor(t, "registration", func() bool { return a.Registered() })
	fb.prepare("vda-1", "s1", "alice", "t1", false)
	fb.forget("vda-1")
	if status, _, _ := connect(t, a.url, "t1"); status != http.StatusOK {
		t.Fatalf("connect: %d", status)
	}
	waitFor(t, "the logon event after a re-registration", func() bool { _, ok := fb.event1("s1", vdaproto.EventLogon); return ok })
	regs := fb.registrations("vda-1")
	if len(regs) != 2 || !slices.Equal(regs[1].Sessions, []vdaproto.SessionReport{{ID: "s1", User: "alice", Resource: "Notepad", State: "active"}}) {
		t.Errorf("registrations %+v, want a second one reporting the active session", regs)
	}
}

// TestRetryAfterKeepsRegistrationPrompt: a broker that answers but cannot
// serve (its site DB is down: 503 with Retry-After: 1) for 20 s is asked
// again every second or so, not after a wait grown to MaxBackoff, so that
// the machine registers within about a second of the broker serving
// again (a Local Host Cache's takeover, for one).
func TestRetryAfterKeepsRegistrationPrompt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := newBubbleBroker(t, time.Second, "vda-1")
		fb.mu.Lock()
		fb.fail, fb.retryAfter = 1<<30, "1"
		fb.mu.Unlock()
		startAgent(t, fb, "vda-1", func(c *vda.MachineConfig) {
			c.MinBackoff, c.MaxBackoff = 500*time.Millisecond, 30*time.Second
		})
		settle(20 * time.Second)
		if fb.registeredCount() != 0 {
			t.Fatal("registered with a broker answering 503")
		}
		fb.mu.Lock()
		fb.fail = 0
		fb.mu.Unlock()
		settle(1500 * time.Millisecond)
		if fb.registeredCount() != 1 {
			t.Fatal("not registered 1.5 s after the broker served again; the wait grew past its Retry-After")
		}
	})
}

// TestMachineRegistersANewPin: the machine registers its control
// listener's pin, and registers again with the new one when the
// certificate changes: at its next heartbeat, or at once when told
// (ControlCertChanged, as SIGHUP does).
func TestMachineRegistersANewPin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := newBubbleBroker(t, time.Second, "vda-1")
		var pin atomic.Value
		pin.Store(strings.Repeat("a", 64))
		a := startAgent(t, fb, "vda-1", func(c *vda.MachineConfig) {
			c.ControlURL = "https://vda-1.test:80"
			c.ControlPin = func() string { return pin.Load().(string) }
		})
		settle(100 * time.Millisecond)
		pins := func() []string {
			var out []string
			for _, r := range fb.registrations("vda-1") {
				out = append(out, r.ControlPin[:1])
			}
			return out
		}
		if got := pins(); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("registered pins %v, want a", got)
		}
		settle(3 * time.Second)
		if got := pins(); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("registered pins %v with no change, want a alone", got)
		}

		pin.Store(strings.Repeat("b", 64))
		settle(1100 * time.Millisecond) // a heartbeat
		if got := pins(); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("registered pins %v after a change, want a then b", got)
		}

		pin.Store(strings.Repeat("c", 64))
		a.ControlCertChanged()
		settle(10 * time.Millisecond) // well before the next heartbeat
		if got := pins(); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("registered pins %v when told of a change, want a, b then c", got)
		}
	})
}

func TestNewMachineRefusesAPinWithoutTLS(t *testing.T) {
	c, err := vda.NewClient(vda.ClientConfig{BrokerURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = vda.NewMachine(vda.MachineConfig{Name: "vda-1", Client: c, Secret: "s", ControlURL: "http://vda-1:8490",
		ControlPin: func() string { return strings.Repeat("a", 64) }})
	if err == nil || !strings.Contains(err.Error(), "https") {
		t.Fatalf("a pin with a clear control URL: %v", err)
	}
}
