// Package gatewaytest is a small agent of the display's wire contract
// (vdaproto's display.go) for tests of the gateway and of the sites that
// assemble it: it takes the broker's prepares over its TLS control
// listener and serves the display's WebSocket to the tickets it was
// prepared for, then runs the test's script. Only tests import it.
package gatewaytest

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

// Token is the control token an Agent takes from its broker.
const Token = "agent-control-token-0123456789"

// Script is what an Agent does with a display once open, for the
// session the ticket was prepared for; the display closes when it
// returns.
type Script func(ctx context.Context, session string, c *websocket.Conn)

// Agent is a test agent over TLS (httptest's certificate): POST
// vdaproto.PathPrepare records the ticket's hash (each ticket is good
// once), logoff and disconnect are taken, and GET vdaproto.PathDisplay
// to a prepared ticket, offering vdaproto.DisplaySubprotocol, is
// accepted (that subprotocol selected) and handed to the Script.
// Anything else is refused with 401 before the upgrade, as an agent does.
type Agent struct {
	tb  testing.TB
	srv *httptest.Server

	mu      sync.Mutex
	tickets map[string]string // ticket hash -> session, until spent
	script  Script
	onPing  func()

	opened, requests atomic.Int32
}

// NewAgent starts an Agent; it stops when the test ends.
func NewAgent(tb testing.TB) *Agent {
	tb.Helper()
	a := &Agent{tb: tb, tickets: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+vdaproto.PathPrepare, a.prepare)
	for _, p := range []string{vdaproto.PathLogoff, vdaproto.PathDisconnect} {
		mux.HandleFunc("POST "+p, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	}
	mux.HandleFunc("GET "+vdaproto.PathDisplay, a.display)
	a.srv = httptest.NewTLSServer(mux)
	tb.Cleanup(a.srv.Close)
	return a
}

// URL is the Agent's control URL; Pin its certificate's fingerprint.
func (a *Agent) URL() string { return a.srv.URL }
func (a *Agent) Pin() string { return tlsconf.Fingerprint(a.srv.Certificate().Raw) }

// Control is where a broker reaches the Agent as machine's, pinned.
func (a *Agent) Control(machine string) broker.Control {
	return broker.Control{Machine: machine, URL: a.URL(), Token: Token, Pin: a.Pin()}
}

// Close stops the Agent's listener and cuts its connections: a machine
// gone.
func (a *Agent) Close() { a.srv.Close() }

// SetScript sets what the Agent does with the displays it opens next.
func (a *Agent) SetScript(s Script) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.script = s
}

// OnPing sets what the Agent is told of each ping its displays opened
// next receive.
func (a *Agent) OnPing(f func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.onPing = f
}

// Opened counts the displays the Agent opened; Requests every request
// for one, refused ones too.
func (a *Agent) Opened() int   { return int(a.opened.Load()) }
func (a *Agent) Requests() int { return int(a.requests.Load()) }

func (a *Agent) prepare(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+Token {
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

func (a *Agent) display(w http.ResponseWriter, r *http.Request) {
	a.requests.Add(1)
	offered := r.Header.Values("Sec-WebSocket-Protocol")
	ticket := vdaproto.TicketFromSubprotocols(offered)
	a.mu.Lock()
	session, ok := a.tickets[vdaproto.TicketHash(ticket)]
	delete(a.tickets, vdaproto.TicketHash(ticket))
	script, onPing := a.script, a.onPing
	a.mu.Unlock()
	if ticket == "" || !ok {
		refuse(w, http.StatusUnauthorized, "the ticket is unknown, used or expired")
		return
	}
	if !strings.Contains(strings.Join(offered, ","), vdaproto.DisplaySubprotocol) {
		refuse(w, http.StatusBadRequest, "no "+vdaproto.DisplaySubprotocol+" subprotocol offered")
		return
	}
	opts := &websocket.AcceptOptions{Subprotocols: []string{vdaproto.DisplaySubprotocol}}
	if onPing != nil {
		opts.OnPingReceived = func(context.Context, []byte) bool { onPing(); return true }
	}
	c, err := websocket.Accept(w, r, opts)
	if err != nil {
		a.tb.Errorf("gatewaytest agent: accept: %v", err)
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(-1)
	a.opened.Add(1)
	if script != nil {
		script(context.WithoutCancel(r.Context()), session, c)
	}
}

func refuse(w http.ResponseWriter, status int, msg string) {
	var e vdaproto.ErrorBody
	e.Error.Code, e.Error.Message = "unauthorized", msg
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(e)
}

// Echo is a Script that sends back every message as it came, until the
// display closes.
func Echo(ctx context.Context, _ string, c *websocket.Conn) {
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		if err := c.Write(ctx, typ, b); err != nil {
			return
		}
	}
}
