package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/gateway"
	"github.com/usher-vdi/usher/internal/gateway/gatewaytest"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// errorOf decodes a refused handshake's JSON error.
func errorOf(t *testing.T, resp *http.Response) api.ErrorBody {
	t.Helper()
	var e api.ErrorBody
	if resp == nil {
		t.Fatal("no answer to the handshake")
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("the refusal %s is not a JSON error: %q", resp.Status, b)
	}
	return e
}

// TestDisplayRefusals: what is not the user's to open is refused before
// the upgrade with the API's JSON errors, and the agent sees nothing: no
// portal session, no ticket, a page of another origin, another user's
// session and a made-up one (the same answer), a request that is no
// WebSocket.
func TestDisplayRefusals(t *testing.T) {
	f := newFixture(t, nil)
	ctx := testContext(t)
	cookie, other := f.logon("u0001"), f.logon("u0002")
	l := f.launch(cookie, "desk")

	var notFound api.ErrorBody
	for _, tc := range []struct {
		name   string
		open   open
		status int
		code   string
	}{
		{"no portal session", open{path: l.DisplayURL, ticket: l.Ticket}, http.StatusUnauthorized, site.EUnauthorized},
		{"a forged cookie", open{cookie: &http.Cookie{Name: api.SessionCookieName, Value: "forged"}, path: l.DisplayURL, ticket: l.Ticket},
			http.StatusUnauthorized, site.EUnauthorized},
		{"no ticket", open{cookie: cookie, path: l.DisplayURL}, http.StatusUnauthorized, site.EUnauthorized},
		{"another origin", open{cookie: cookie, path: l.DisplayURL, ticket: l.Ticket, origin: "http://evil.example"}, http.StatusForbidden, site.EForbidden},
		{"an opaque origin", open{cookie: cookie, path: l.DisplayURL, ticket: l.Ticket, origin: "null"}, http.StatusForbidden, site.EForbidden},
		{"another user's session", open{cookie: other, path: l.DisplayURL, ticket: l.Ticket}, http.StatusNotFound, site.ENotFound},
		{"a made-up session", open{cookie: cookie, path: gateway.Path("no-such-session"), ticket: l.Ticket}, http.StatusNotFound, site.ENotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, resp, err := f.open(ctx, tc.open)
			if err == nil {
				c.CloseNow()
				t.Fatal("the display opened")
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			e := errorOf(t, resp)
			if e.Error.Code != tc.code {
				t.Errorf("error code %q, want %q", e.Error.Code, tc.code)
			}
			if tc.code == site.ENotFound {
				// Not the user's and not there answer alike.
				if notFound.Error.Code != "" && e != notFound {
					t.Errorf("%+v, want the same answer as for the other missing session, %+v", e, notFound)
				}
				notFound = e
			}
		})
	}
	t.Run("not a WebSocket", func(t *testing.T) {
		req, _ := http.NewRequest("GET", f.srv.URL+l.DisplayURL, nil)
		req.AddCookie(cookie)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusUpgradeRequired || errorOf(t, resp).Error.Code != site.EInvalid {
			t.Fatalf("a plain GET: %s", resp.Status)
		}
	})
	if n := f.agent.Requests(); n != 0 {
		t.Errorf("the agent was asked for %d displays by refused requests", n)
	}
	// The ticket was never spent: the display still opens with it.
	c, resp, err := f.open(ctx, open{cookie: cookie, path: l.DisplayURL, ticket: l.Ticket})
	if err != nil {
		t.Fatalf("open with the unspent ticket: %v (%v)", err, resp)
	}
	c.Close(websocket.StatusNormalClosure, "")
}

// TestDisplayHostIsTheBrokers: nothing in the request chooses where the
// gateway dials: not a query parameter, not a header, not the Host the
// request names (with an Origin to match it). The display opens at the
// session's agent, and the decoy they name sees nothing.
func TestDisplayHostIsTheBrokers(t *testing.T) {
	f := newFixture(t, nil)
	ctx := testContext(t)
	decoy := newDecoy(t)
	decoyHost := strings.TrimPrefix(decoy.srv.URL, "http://")
	cookie := f.logon("u0001")
	l := f.launch(cookie, "desk")
	opened := make(chan string, 1)
	f.agent.SetScript(func(_ context.Context, session string, c *websocket.Conn) {
		opened <- session
		readAll(ctx, c)
	})
	header := http.Header{}
	for _, h := range []string{"X-Forwarded-Host", "X-Real-Host", "X-Usher-Agent", "X-Original-URL"} {
		header.Set(h, decoyHost)
	}
	header.Set("Forwarded", "host="+decoyHost)
	c, resp, err := f.open(ctx, open{cookie: cookie, ticket: l.Ticket, header: header, host: decoyHost, origin: "http://" + decoyHost,
		path: l.DisplayURL + "?host=" + decoyHost + "&url=" + decoy.srv.URL + "/display&machine=gone-01&control_url=" + decoy.srv.URL})
	if err != nil {
		t.Fatalf("open: %v (%v)", err, resp)
	}
	if got := <-opened; got != l.SessionID {
		t.Errorf("the agent opened session %q, want %q", got, l.SessionID)
	}
	c.Close(websocket.StatusNormalClosure, "")
	if n := decoy.hits.Load(); n != 0 {
		t.Errorf("the decoy the request named was dialled %d times", n)
	}
	if n := f.gone.Requests(); n != 0 {
		t.Errorf("the machine the request named was dialled %d times", n)
	}
}

// TestDisplayAgentUnreachable: an agent that cannot be reached, and one
// that refuses a spent ticket, close the browser's display with
// CloseAgentUnreachable and a sentence saying which; each is counted.
func TestDisplayAgentUnreachable(t *testing.T) {
	f := newFixture(t, nil)
	ctx := testContext(t)
	cookie := f.logon("u0001")
	want := func(t *testing.T, o open, reason string) {
		t.Helper()
		c, resp, err := f.open(ctx, o)
		if err != nil {
			t.Fatalf("open: %v (%v): want the display opened, then closed", err, resp)
		}
		defer c.CloseNow()
		_, _, err = c.Read(ctx)
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != vdaproto.CloseAgentUnreachable || !strings.Contains(ce.Reason, reason) {
			t.Fatalf("the display ended with %v, want close %d saying %q", err, vdaproto.CloseAgentUnreachable, reason)
		}
	}

	t.Run("gone", func(t *testing.T) {
		l := f.launch(cookie, "gone")
		f.gone.Close()
		want(t, open{cookie: cookie, path: l.DisplayURL, ticket: l.Ticket}, "cannot be reached")
	})
	t.Run("ticket spent", func(t *testing.T) {
		l := f.launch(cookie, "desk")
		f.agent.SetScript(func(_ context.Context, _ string, c *websocket.Conn) { readAll(ctx, c) })
		c, resp, err := f.open(ctx, open{cookie: cookie, path: l.DisplayURL, ticket: l.Ticket})
		if err != nil {
			t.Fatalf("first open: %v (%v)", err, resp)
		}
		c.Close(websocket.StatusNormalClosure, "")
		want(t, open{cookie: cookie, path: l.DisplayURL, ticket: l.Ticket}, "refused the ticket")
	})
	f.gw.Close()
	if got := f.metric("usher_gateway_agent_dial_failures_total"); got != 2 {
		t.Errorf("%v dial failures counted, want 2", got)
	}
	if got := f.metric("usher_gateway_displays_total", "outcome", "agent_unreachable"); got != 2 {
		t.Errorf("%v displays counted agent_unreachable, want 2", got)
	}
}

// TestDisplayLimitPerUser: a user opening many displays at once (tabs,
// each with a ticket of its own) gets exactly the limit; the rest are
// closed with 1013 saying why, and their agent is not dialled. The
// browser's close code and reason reach the agent.
func TestDisplayLimitPerUser(t *testing.T) {
	const limit, opens = 3, 12
	f := newFixture(t, func(c *gateway.Config) { c.MaxSessionsPerUser = limit })
	ctx := testContext(t)
	cookie := f.logon("u0003")
	var launches []api.LaunchResponse
	for range opens {
		launches = append(launches, f.launch(cookie, "desk"))
	}
	closed := make(chan error, opens)
	f.agent.SetScript(func(_ context.Context, _ string, c *websocket.Conn) {
		if err := c.Write(ctx, websocket.MessageBinary, []byte("RFB 003.008\n")); err != nil {
			closed <- err
			return
		}
		_, err := readAll(ctx, c)
		closed <- err
	})

	var mu sync.Mutex
	var held, limited []*websocket.Conn
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, l := range launches {
		wg.Go(func() {
			<-start
			c, resp, err := f.open(ctx, open{cookie: cookie, path: l.DisplayURL, ticket: l.Ticket})
			if err != nil {
				t.Errorf("open: %v (%v)", err, resp)
				return
			}
			_, b, err := c.Read(ctx)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && string(b) == "RFB 003.008\n":
				held = append(held, c) // held open until every open is told
			case websocket.CloseStatus(err) == websocket.StatusTryAgainLater:
				if !strings.Contains(err.Error(), "close one first") {
					t.Errorf("the limit's close does not say why: %v", err)
				}
				limited = append(limited, c)
			default:
				t.Errorf("open: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(held) != limit || len(limited) != opens-limit {
		t.Fatalf("%d displays opened and %d limited, want %d and %d", len(held), len(limited), limit, opens-limit)
	}
	if n := f.agent.Opened(); n != limit {
		t.Errorf("the agent opened %d displays, want %d", n, limit)
	}
	for _, c := range held {
		c.Close(websocket.StatusNormalClosure, "tab closed")
	}
	for range limit {
		var ce websocket.CloseError
		if err := <-closed; !errors.As(err, &ce) || ce.Code != websocket.StatusNormalClosure || ce.Reason != "tab closed" {
			t.Errorf("the agent's display ended with %v, want the browser's close", err)
		}
	}
	for _, c := range limited {
		c.CloseNow()
	}
	// Once closed, their places are free again.
	l := f.launch(cookie, "desk")
	c, resp, err := f.open(ctx, open{cookie: cookie, path: l.DisplayURL, ticket: l.Ticket})
	if err != nil {
		t.Fatalf("open after the others closed: %v (%v)", err, resp)
	}
	if _, _, err := c.Read(ctx); err != nil {
		t.Errorf("the display after the others closed: %v", err)
	}
	c.Close(websocket.StatusNormalClosure, "")
}

// TestDisplaySlowReaderStallsOnlyItself: a browser that stops reading
// holds back its own agent (the gateway queues nothing: the agent's
// writes wait), while another user's display on the same gateway and
// agent goes on, a MiB echoed both ways.
func TestDisplaySlowReaderStallsOnlyItself(t *testing.T) {
	const flood = 64 << 20
	f := newFixture(t, nil)
	ctx := testContext(t)
	slowCookie, fastCookie := f.logon("u0004"), f.logon("u0005")
	slow, fast := f.launch(slowCookie, "desk"), f.launch(fastCookie, "desk")
	var sent atomic64
	flooding := make(chan struct{})
	f.agent.SetScript(func(_ context.Context, session string, c *websocket.Conn) {
		if session == slow.SessionID {
			close(flooding)
			chunk := make([]byte, 64<<10)
			for sent.load() < flood {
				if err := c.Write(ctx, websocket.MessageBinary, chunk); err != nil {
					return
				}
				sent.add(len(chunk))
			}
			return
		}
		gatewaytest.Echo(ctx, session, c)
	})
	sc, resp, err := f.open(ctx, open{cookie: slowCookie, path: slow.DisplayURL, ticket: slow.Ticket})
	if err != nil {
		t.Fatalf("open the slow display: %v (%v)", err, resp)
	}
	defer sc.CloseNow()
	<-flooding

	fc, resp, err := f.open(ctx, open{cookie: fastCookie, path: fast.DisplayURL, ticket: fast.Ticket})
	if err != nil {
		t.Fatalf("open the other display: %v (%v)", err, resp)
	}
	msgs := stream(3, 1<<20)
	for _, m := range msgs {
		if err := fc.Write(ctx, websocket.MessageBinary, m); err != nil {
			t.Fatal(err)
		}
		_, b, err := fc.Read(ctx)
		if err != nil || string(b) != string(m) {
			t.Fatalf("echo of %d bytes: %d bytes, %v", len(m), len(b), err)
		}
	}
	fc.Close(websocket.StatusNormalClosure, "")
	if n := sent.load(); n >= flood {
		t.Errorf("the agent of the display nobody reads sent all its %d bytes: something queued them", n)
	}
	sc.CloseNow()
}

// atomic64 counts bytes across goroutines.
type atomic64 struct{ n atomic.Int64 }

func (a *atomic64) add(n int) { a.n.Add(int64(n)) }
func (a *atomic64) load() int { return int(a.n.Load()) }

// TestDisplayEnds: a browser that goes without a close frame is told to
// the agent as going away; the gateway's Close ends the displays open
// with 1001 to both sides, and counts them.
func TestDisplayEnds(t *testing.T) {
	f := newFixture(t, nil)
	ctx := testContext(t)
	cookie := f.logon("u0006")
	agentEnd := make(chan error, 2)
	f.agent.SetScript(func(_ context.Context, _ string, c *websocket.Conn) {
		c.Write(ctx, websocket.MessageBinary, []byte("hello"))
		_, err := readAll(ctx, c)
		agentEnd <- err
	})
	openOne := func() *websocket.Conn {
		t.Helper()
		l := f.launch(cookie, "desk")
		c, resp, err := f.open(ctx, open{cookie: cookie, path: l.DisplayURL, ticket: l.Ticket})
		if err != nil {
			t.Fatalf("open: %v (%v)", err, resp)
		}
		if _, _, err := c.Read(ctx); err != nil {
			t.Fatal(err)
		}
		return c
	}

	openOne().CloseNow()
	if err := <-agentEnd; websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Errorf("the agent of a browser gone: %v, want going away", err)
	}

	c := openOne()
	f.gw.Close()
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusGoingAway || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("the browser at the gateway's Close: %v, want going away", err)
	}
	if err := <-agentEnd; websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Errorf("the agent at the gateway's Close: %v, want going away", err)
	}
	for outcome, want := range map[string]float64{"lost": 1, "shutdown": 1} {
		if got := f.metric("usher_gateway_displays_total", "outcome", outcome); got != want {
			t.Errorf("%v displays counted %s, want %v", got, outcome, want)
		}
	}
	if f.gw.Displays() != 0 {
		t.Errorf("%d displays open after Close", f.gw.Displays())
	}
}
