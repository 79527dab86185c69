package vda_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/usher-vdi/usher/internal/memnet"
	"github.com/usher-vdi/usher/internal/vda"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

const testSecret = "enrolment-secret-of-the-test-site"

// fakeBroker is the broker side of vdaproto, strictly: it checks the
// enrolment secret, credentials, the machine in every body and the
// registration, and records what VDAs send. It also plays the broker's
// control client towards VDAs.
type fakeBroker struct {
	t        testing.TB
	srv      *httptest.Server
	interval time.Duration
	// net, when set, is the in-memory network of a synctest bubble that
	// the broker, its machines and its clients share; hc reaches it.
	net *memnet.Network
	hc  *http.Client

	mu         sync.Mutex
	known      map[string]bool
	creds      map[string]string // credential -> machine
	regs       map[string][]vdaproto.RegisterRequest
	registered map[string]bool
	beats      map[string][]time.Time
	lastBeat   map[string]vdaproto.Heartbeat
	events     []vdaproto.SessionEvent
	enrols     int
	fail       int    // answer this many requests with 503
	retryAfter string // the 503s' Retry-After, if any
}

func newFakeBroker(t testing.TB, interval time.Duration, machines ...string) *fakeBroker {
	t.Helper()
	return startFakeBroker(t, nil, interval, machines)
}

// newBubbleBroker is newFakeBroker on an in-memory network, for a test in a
// synctest bubble: startAgent and startSim put their machines on the same
// network, and fb.post and fb.connect reach them.
func newBubbleBroker(t testing.TB, interval time.Duration, machines ...string) *fakeBroker {
	t.Helper()
	return startFakeBroker(t, memnet.New(), interval, machines)
}

func startFakeBroker(t testing.TB, network *memnet.Network, interval time.Duration, machines []string) *fakeBroker {
	t.Helper()
	fb := &fakeBroker{t: t, interval: interval, net: network, hc: http.DefaultClient, known: map[string]bool{}, creds: map[string]string{},
		regs: map[string][]vdaproto.RegisterRequest{}, registered: map[string]bool{},
		beats: map[string][]time.Time{}, lastBeat: map[string]vdaproto.Heartbeat{}}
	for _, m := range machines {
		fb.known[m] = true
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+vdaproto.PathEnrol, fb.enrol)
	mux.HandleFunc("POST "+vdaproto.PathRegister, fb.register)
	mux.HandleFunc("POST "+vdaproto.PathHeartbeat, fb.heartbeat)
	mux.HandleFunc("POST "+vdaproto.PathEvents, fb.event)
	fb.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fb.mu.Lock()
		failing := fb.fail > 0
		if failing {
			fb.fail--
		}
		retryAfter := fb.retryAfter
		fb.mu.Unlock()
		if failing {
			if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			brokerError(w, http.StatusServiceUnavailable, "unavailable", "try again")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	if network != nil {
		fb.srv.Listener.Close()
		fb.srv.Listener = mustListen(t, network, "broker.test:80")
		tr := network.Transport()
		fb.hc = &http.Client{Transport: tr}
		t.Cleanup(tr.CloseIdleConnections)
	}
	fb.srv.Start()
	t.Cleanup(fb.srv.Close)
	return fb
}

func mustListen(t testing.TB, network *memnet.Network, addr string) *memnet.Listener {
	t.Helper()
	ln, err := network.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func (fb *fakeBroker) URL() string { return fb.srv.URL }

func brokerError(w http.ResponseWriter, status int, code, msg string) {
	var body vdaproto.ErrorBody
	body.Error.Code, body.Error.Message = code, msg
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}

// decode reads a strict JSON body, answering 400 itself when it cannot.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if r.Header.Get("Content-Type") != "application/json" {
		brokerError(w, http.StatusUnsupportedMediaType, "invalid", "want application/json")
		return false
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		brokerError(w, http.StatusBadRequest, "invalid", err.Error())
		return false
	}
	return true
}

// machineOf authenticates the credential and checks that the body speaks
// for the same machine.
func (fb *fakeBroker) machineOf(w http.ResponseWriter, r *http.Request, body string) bool {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	fb.mu.Lock()
	m, ok := fb.creds[tok]
	fb.mu.Unlock()
	switch {
	case !ok:
		brokerError(w, http.StatusUnauthorized, "unauthorized", "a machine credential is required")
		return false
	case m != body:
		brokerError(w, http.StatusForbidden, "forbidden", fmt.Sprintf("the credential is for machine %q, not %q", m, body))
		return false
	}
	return true
}

func (fb *fakeBroker) enrol(w http.ResponseWriter, r *http.Request) {
	var req vdaproto.EnrolRequest
	if !decode(w, r, &req) {
		return
	}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.enrols++
	if req.Secret != testSecret {
		brokerError(w, http.StatusUnauthorized, "unauthorized", "wrong enrolment secret")
		return
	}
	if !fb.known[req.Machine] {
		brokerError(w, http.StatusNotFound, "not_found", fmt.Sprintf("machine %q not found", req.Machine))
		return
	}
	cred := rand.Text()
	fb.creds[cred] = req.Machine
	json.NewEncoder(w).Encode(vdaproto.EnrolResponse{Credential: cred, ExpiresAt: time.Now().Add(24 * time.Hour)})
}

func (fb *fakeBroker) register(w http.ResponseWriter, r *http.Request) {
	var req vdaproto.RegisterRequest
	if !decode(w, r, &req) || !fb.machineOf(w, r, req.Machine) {
		return
	}
	if req.ControlURL == "" || len(req.ControlToken) < 16 {
		brokerError(w, http.StatusBadRequest, "invalid", "control_url and a control_token of at least 16 characters are required")
		return
	}
	fb.mu.Lock()
	fb.regs[req.Machine] = append(fb.regs[req.Machine], req)
	fb.registered[req.Machine] = true
	fb.mu.Unlock()
	json.NewEncoder(w).Encode(vdaproto.RegisterResponse{HeartbeatInterval: fb.interval, HeartbeatTimeout: 3 * fb.interval})
}

func (fb *fakeBroker) heartbeat(w http.ResponseWriter, r *http.Request) {
	var hb vdaproto.Heartbeat
	if !decode(w, r, &hb) || !fb.machineOf(w, r, hb.Machine) {
		return
	}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if !fb.registered[hb.Machine] {
		brokerError(w, http.StatusConflict, vdaproto.CodeNotRegistered, "machine is not registered")
		return
	}
	fb.beats[hb.Machine] = append(fb.beats[hb.Machine], time.Now())
	fb.lastBeat[hb.Machine] = hb
	json.NewEncoder(w).Encode(vdaproto.HeartbeatResponse{LoadIndex: hb.Sessions * 100})
}

func (fb *fakeBroker) event(w http.ResponseWriter, r *http.Request) {
	var ev vdaproto.SessionEvent
	if !decode(w, r, &ev) || !fb.machineOf(w, r, ev.Machine) {
		return
	}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if !fb.registered[ev.Machine] {
		brokerError(w, http.StatusConflict, vdaproto.CodeNotRegistered, "machine is not registered")
		return
	}
	fb.events = append(fb.events, ev)
	w.WriteHeader(http.StatusNoContent)
}

// forget drops a machine's registration, as a restarted broker would.
func (fb *fakeBroker) forget(machine string) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.registered[machine] = false
}

func (fb *fakeBroker) registrations(machine string) []vdaproto.RegisterRequest {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return append([]vdaproto.RegisterRequest(nil), fb.regs[machine]...)
}

func (fb *fakeBroker) registeredCount() int {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	n := 0
	for _, ok := range fb.registered {
		if ok {
			n++
		}
	}
	return n
}

func (fb *fakeBroker) heartbeats(machine string) []time.Time {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return append([]time.Time(nil), fb.beats[machine]...)
}

func (fb *fakeBroker) lastHeartbeat(machine string) vdaproto.Heartbeat {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return fb.lastBeat[machine]
}

// eventsOf returns the events of a session as "event" strings, in order.
func (fb *fakeBroker) eventsOf(session string) []string {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	var out []string
	for _, ev := range fb.events {
		if ev.SessionID == session {
			out = append(out, ev.Event)
		}
	}
	return out
}

func (fb *fakeBroker) event1(session, event string) (vdaproto.SessionEvent, bool) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	for _, ev := range fb.events {
		if ev.SessionID == session && ev.Event == event {
			return ev, true
		}
	}
	return vdaproto.SessionEvent{}, false
}

// control returns where and how the broker reaches a registered machine.
func (fb *fakeBroker) control(machine string) (url, token string) {
	regs := fb.registrations(machine)
	if len(regs) == 0 {
		fb.t.Fatalf("machine %q never registered", machine)
	}
	last := regs[len(regs)-1]
	return last.ControlURL, last.ControlToken
}

// prepare asks a machine to prepare a session for ticket, as the broker
// does, and returns the HTTP status.
func (fb *fakeBroker) prepare(machine, session, user, ticket string, reconnect bool) int {
	fb.t.Helper()
	u, tok := fb.control(machine)
	req := vdaproto.PrepareRequest{SessionID: session, User: user, Resource: "Notepad", CommandLine: "notepad.exe",
		Reconnect: reconnect, TicketHash: vdaproto.TicketHash(ticket), ExpiresAt: time.Now().Add(time.Minute)}
	status, _ := fb.post(u+vdaproto.PathPrepare, tok, req)
	return status
}

func (fb *fakeBroker) sessionRequest(machine, path, session string) (int, vdaproto.ErrorBody) {
	u, tok := fb.control(machine)
	status, body := fb.post(u+path, tok, vdaproto.SessionRequest{SessionID: session})
	return status, decodeErrorBody(body)
}

// post sends v as JSON with an optional bearer token and returns the status
// and the body.
func post(t testing.TB, url, token string, v any) (int, []byte) {
	t.Helper()
	return postWith(t, http.DefaultClient, url, token, v)
}

// post is post on the broker's network.
func (fb *fakeBroker) post(url, token string, v any) (int, []byte) {
	fb.t.Helper()
	return postWith(fb.t, fb.hc, url, token, v)
}

func postWith(t testing.TB, hc *http.Client, url, token string, v any) (int, []byte) {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return postRawWith(t, hc, url, token, "application/json", raw)
}

func postRaw(t testing.TB, url, token, contentType string, raw []byte) (int, []byte) {
	t.Helper()
	return postRawWith(t, http.DefaultClient, url, token, contentType, raw)
}

func postRawWith(t testing.TB, hc *http.Client, url, token, contentType string, raw []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

func decodeErrorBody(raw []byte) vdaproto.ErrorBody {
	var b vdaproto.ErrorBody
	json.Unmarshal(raw, &b)
	return b
}

// connect presents a ticket at a machine's control URL, as a client does.
func connect(t testing.TB, controlURL, ticket string) (int, vdaproto.ConnectResponse, vdaproto.ErrorBody) {
	t.Helper()
	return connectWith(t, http.DefaultClient, controlURL, ticket)
}

// connect is connect on the broker's network.
func (fb *fakeBroker) connect(controlURL, ticket string) (int, vdaproto.ConnectResponse, vdaproto.ErrorBody) {
	fb.t.Helper()
	return connectWith(fb.t, fb.hc, controlURL, ticket)
}

func connectWith(t testing.TB, hc *http.Client, controlURL, ticket string) (int, vdaproto.ConnectResponse, vdaproto.ErrorBody) {
	t.Helper()
	status, body := postWith(t, hc, controlURL+vdaproto.PathConnect, "", vdaproto.ConnectRequest{Ticket: ticket, ClientName: "laptop-7"})
	var resp vdaproto.ConnectResponse
	if status == http.StatusOK {
		if err := json.Unmarshal(body, &resp); err != nil {
			t.Fatalf("connect answer %s: %v", body, err)
		}
	}
	return status, resp, decodeErrorBody(body)
}

// waitFor polls cond until it holds, failing the test after a generous
// deadline. It is for tests on real sockets (newFakeBroker), which a
// synctest bubble cannot wait on; a test on newBubbleBroker uses settle and
// asserts instead.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testLogger logs to the test's output with -v, and nowhere otherwise.
func testLogger(t testing.TB) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func newClient(t testing.TB, brokerURL string) *vda.Client {
	t.Helper()
	return newClientWith(t, nil, brokerURL)
}

// newClient is newClient on the broker's network.
func (fb *fakeBroker) newClient() *vda.Client {
	fb.t.Helper()
	if fb.net == nil {
		return newClient(fb.t, fb.URL())
	}
	return newClientWith(fb.t, fb.hc, fb.URL())
}

func newClientWith(t testing.TB, hc *http.Client, brokerURL string) *vda.Client {
	t.Helper()
	// A broker on an in-memory network (hc) has a name, not a loopback
	// address: the clear broker is allowed there.
	c, err := vda.NewClient(vda.ClientConfig{BrokerURL: brokerURL, HTTPClient: hc, InsecureBroker: hc != nil, Timeout: 5 * time.Second,
		MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// agent is a Machine running as a real agent, with its own control
// listener.
type agent struct {
	*vda.Machine
	url  string
	stop func() error
}

// startAgent runs a machine against fb; mod adjusts its configuration.
func startAgent(t testing.TB, fb *fakeBroker, name string, mod func(*vda.MachineConfig)) *agent {
	t.Helper()
	var ln net.Listener
	if fb.net != nil {
		ln = mustListen(t, fb.net, name+".test:80")
	} else {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	cfg := vda.MachineConfig{
		Name: name, Client: fb.newClient(), Secret: testSecret,
		ControlURL: "http://" + ln.Addr().String(), Address: name + ".test:3389",
		MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond, Logger: testLogger(t),
	}
	if mod != nil {
		mod(&cfg)
	}
	m, err := vda.NewMachine(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- vda.RunAgent(ctx, m, ln) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("agent %s: %v", name, err)
		}
	})
	return &agent{Machine: m, url: cfg.ControlURL, stop: stop}
}

// settle lets the fake clock of a synctest bubble run for d, then waits
// until every goroutine of the bubble is blocked: whatever was due by then
// has happened.
func settle(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}
