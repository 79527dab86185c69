package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/tlsconf"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// agentToken is the control token the test agents take.
const agentToken = "agent-control-token-0123456789"

// testAgent is a small agent of the display's contract, over TLS: it
// takes the broker's prepares (the tickets' hashes, each spent once) and
// serves GET /display to a ticket it was prepared for, selecting the
// display's subprotocol, then runs its script for the session.
type testAgent struct {
	t   *testing.T
	srv *httptest.Server

	mu      sync.Mutex
	tickets map[string]string // ticket hash -> session, until spent
	script  func(ctx context.Context, session string, c *websocket.Conn)
	// opened counts the displays opened, requests counts every request
	// for the display (refused ones too).
	opened, requests atomic.Int32
	// onPing, when set, is told of each ping the agent's side receives.
	onPing func()
}

func newTestAgent(t *testing.T) *testAgent {
	t.Helper()
	a := &testAgent{t: t, tickets: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+vdaproto.PathPrepare, a.prepare)
	for _, p := range []string{vdaproto.PathLogoff, vdaproto.PathDisconnect} {
		mux.HandleFunc("POST "+p, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	}
	mux.HandleFunc("GET "+vdaproto.PathDisplay, a.display)
	a.srv = httptest.NewTLSServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

// control is where the broker reaches the agent, pinned to its
// certificate.
func (a *testAgent) control(machine string) broker.Control {
	return broker.Control{Machine: machine, URL: a.srv.URL, Token: agentToken, Pin: tlsconf.Fingerprint(a.srv.Certificate().Raw)}
}

func (a *testAgent) prepare(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+agentToken {
		refuse(w, http.StatusUnauthorized, "not the broker")
		return
	}
	var p vdaproto.PrepareRequest
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	a.mu.Lock()
	a.tickets[p.TicketHash] = p.SessionID
	a.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (a *testAgent) display(w http.ResponseWriter, r *http.Request) {
	a.requests.Add(1)
	offered := r.Header.Values("Sec-WebSocket-Protocol")
	ticket := vdaproto.TicketFromSubprotocols(offered)
	a.mu.Lock()
	session, ok := a.tickets[vdaproto.TicketHash(ticket)]
	delete(a.tickets, vdaproto.TicketHash(ticket))
	a.mu.Unlock()
	if ticket == "" || !ok {
		refuse(w, http.StatusUnauthorized, "the ticket is unknown, used or expired")
		return
	}
	if !strings.Contains(strings.Join(offered, ","), vdaproto.DisplaySubprotocol) {
		refuse(w, http.StatusBadRequest, "no binary subprotocol offered")
		return
	}
	opts := &websocket.AcceptOptions{Subprotocols: []string{vdaproto.DisplaySubprotocol}}
	if a.onPing != nil {
		opts.OnPingReceived = func(context.Context, []byte) bool { a.onPing(); return true }
	}
	c, err := websocket.Accept(w, r, opts)
	if err != nil {
		a.t.Errorf("agent: accept: %v", err)
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(-1)
	a.opened.Add(1)
	a.mu.Lock()
	script := a.script
	a.mu.Unlock()
	if script != nil {
		script(r.Context(), session, c)
	}
}

func (a *testAgent) setScript(s func(ctx context.Context, session string, c *websocket.Conn)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.script = s
}

func refuse(w http.ResponseWriter, status int, msg string) {
	var e vdaproto.ErrorBody
	e.Error.Code, e.Error.Message = "unauthorized", msg
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(e)
}

// decoyAgent counts whatever reaches it: a host a request might try to
// make the gateway dial.
type decoyAgent struct {
	srv  *httptest.Server
	hits atomic.Int32
}

func newDecoy(t *testing.T) *decoyAgent {
	d := &decoyAgent{}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.hits.Add(1)
		http.Error(w, "decoy", http.StatusTeapot)
	}))
	t.Cleanup(d.srv.Close)
	return d
}
