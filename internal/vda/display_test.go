package vda_test

import (
	"context"
	"encoding/json"
	"image/color"
	"io"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/usher-vdi/usher/internal/display/rfb"
	"github.com/usher-vdi/usher/internal/display/xvnc"
	"github.com/usher-vdi/usher/internal/display/xvnc/xvnctest"
	"github.com/usher-vdi/usher/internal/vda"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// blue is the colour the test desktop paints its root window.
var blue = color.RGBA{R: 0x1f, G: 0x6f, B: 0xeb, A: 0xff}

const portal = "https://portal.example.com"

// displays is xvnc as the machine's DisplayStarter (as usher vda wires
// it), remembering the displays it started.
type displays struct {
	*xvnc.Starter
	mu      sync.Mutex
	started map[string][]*xvnc.Display // by session
}

func newDisplays(t *testing.T, mod func(*xvnc.Config)) *displays {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	cfg := xvnc.Config{Dir: t.TempDir(), Geometry: "320x240", Account: u.Username,
		DesktopCommand: "xsetroot -solid '#1f6feb'", MaxDisplays: 8, StopTimeout: 2 * time.Second, Logger: testLogger(t)}
	if mod != nil {
		mod(&cfg)
	}
	st, err := xvnc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &displays{Starter: st, started: map[string][]*xvnc.Display{}}
}

func (ds *displays) StartDisplay(ctx context.Context, s vda.Session) (vda.Display, error) {
	d, err := ds.Start(ctx, xvnc.Session{ID: s.ID, User: s.User, Resource: s.Resource, CommandLine: s.CommandLine})
	if err != nil {
		return nil, err
	}
	ds.mu.Lock()
	ds.started[s.ID] = append(ds.started[s.ID], d)
	ds.mu.Unlock()
	return d, nil
}

func (ds *displays) of(session string) []*xvnc.Display {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return append([]*xvnc.Display(nil), ds.started[session]...)
}

// prepareDesktop prepares a session of the test desktop (no command line:
// the configured desktop command runs), as the broker does.
func prepareDesktop(fb *fakeBroker, machine, session, ticket string, reconnect bool, expires time.Time) (int, vdaproto.ErrorBody) {
	fb.t.Helper()
	u, tok := fb.control(machine)
	status, body := fb.post(u+vdaproto.PathPrepare, tok, vdaproto.PrepareRequest{SessionID: session, User: `OFFICE\someone`,
		Resource: "Desktop", Reconnect: reconnect, TicketHash: vdaproto.TicketHash(ticket), ExpiresAt: expires})
	return status, decodeErrorBody(body)
}

func mustPrepare(t *testing.T, fb *fakeBroker, machine, session, ticket string, reconnect bool) {
	t.Helper()
	if status, body := prepareDesktop(fb, machine, session, ticket, reconnect, time.Now().Add(time.Minute)); status != http.StatusNoContent {
		t.Fatalf("prepare %s: %d %+v", session, status, body)
	}
}

// dialDisplay opens the display WebSocket with ticket (none if "") and
// origin (none if ""); the connection lives until the test ends.
func dialDisplay(t *testing.T, controlURL, ticket, origin string, protocols ...string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if protocols == nil {
		protocols = []string{vdaproto.DisplaySubprotocol}
	}
	if ticket != "" {
		protocols = append(protocols, vdaproto.TicketSubprotocol(ticket))
	}
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	c, resp, err := websocket.Dial(dctx, controlURL+vdaproto.PathDisplay+"?client_name=browser-1",
		&websocket.DialOptions{Subprotocols: protocols, HTTPHeader: h})
	if err == nil {
		t.Cleanup(func() { c.CloseNow() })
	}
	return c, resp, err
}

// viewer is an RFB client over the display WebSocket.
type viewer struct {
	ws *websocket.Conn
	nc net.Conn
	*rfb.Client
}

func openViewer(t *testing.T, controlURL, ticket string) *viewer {
	t.Helper()
	ws, resp, err := dialDisplay(t, controlURL, ticket, portal)
	if err != nil {
		t.Fatalf("open the display: %v (%s)", err, refusal(resp))
	}
	if got := ws.Subprotocol(); got != vdaproto.DisplaySubprotocol {
		t.Errorf("subprotocol %q, want %q", got, vdaproto.DisplaySubprotocol)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v := &viewer{ws: ws, nc: websocket.NetConn(ctx, ws, websocket.MessageBinary)}
	v.nc.SetDeadline(time.Now().Add(20 * time.Second))
	defer v.nc.SetDeadline(time.Time{})
	if v.Client, err = rfb.Handshake(v.nc, rfb.Options{}); err != nil {
		t.Fatal(err)
	}
	return v
}

// awaitBlue reads updates until the pixel at the middle is blue.
func (v *viewer) awaitBlue(t *testing.T) {
	t.Helper()
	v.nc.SetDeadline(time.Now().Add(20 * time.Second))
	defer v.nc.SetDeadline(time.Time{})
	var got color.RGBA
	if err := v.Await(func(c *rfb.Client) bool { got, _ = c.Pixel(160, 120); return got == blue }); err != nil {
		t.Fatalf("waiting for the desktop's blue (the pixel is %v): %v", got, err)
	}
}

// closeCode reads the viewer's WebSocket to its end and returns the close
// code the agent sent.
func (v *viewer) closeCode(t *testing.T) websocket.StatusCode {
	t.Helper()
	v.nc.SetDeadline(time.Now().Add(20 * time.Second))
	_, err := io.Copy(io.Discard, v.nc)
	return websocket.CloseStatus(err)
}

func refusal(resp *http.Response) string {
	if resp == nil {
		return "no answer"
	}
	var b vdaproto.ErrorBody
	json.NewDecoder(resp.Body).Decode(&b)
	return resp.Status + " " + b.Error.Code + ": " + b.Error.Message
}

func sessionOf(m *vda.Machine, id string) (vda.Session, bool) {
	for _, s := range m.Sessions() {
		if s.ID == id {
			return s, true
		}
	}
	return vda.Session{}, false
}

// TestDisplayInBrowser runs an agent with real Xvnc displays, and a
// viewer that speaks RFB over the agent's display WebSocket, as a browser
// with noVNC would.
func TestDisplayInBrowser(t *testing.T) {
	xvnctest.Need(t)
	fb := newFakeBroker(t, time.Second, "vda-d")
	ds := newDisplays(t, nil)
	hookDir := t.TempDir()
	hook, err := vda.ParseCommand("sh -c env>" + hookDir + "/$USHER_SESSION_ID-$USHER_EVENT")
	if err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, fb, "vda-d", func(c *vda.MachineConfig) {
		c.Display, c.DisplayOrigins, c.Hook = ds, []string{portal}, hook
	})
	waitFor(t, "registration", a.Registered)
	if got := fb.registrations("vda-d")[0].Protocol; got != vdaproto.ProtocolVNC {
		t.Errorf("registered protocol %q, want %q", got, vdaproto.ProtocolVNC)
	}

	t.Run("a session's viewer sees its desktop, leaves, returns and is taken over", func(t *testing.T) {
		const id = "s-1"
		mustPrepare(t, fb, "vda-d", id, "ticket-1", false)
		s, ok := sessionOf(a.Machine, id)
		if !ok || s.Display == "" || s.State != vda.StatePending {
			t.Fatalf("after prepare the session is %+v, want a pending session with a display", s)
		}
		env, err := os.ReadFile(filepath.Join(hookDir, id+"-prepare"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"USHER_DISPLAY=" + s.Display + "\n", "DISPLAY=" + s.Display + "\n", "XAUTHORITY="} {
			if !strings.Contains(string(env), want) {
				t.Errorf("the session command's environment lacks %q", want)
			}
		}

		v1 := openViewer(t, a.url, "ticket-1")
		v1.awaitBlue(t)
		if s, _ := sessionOf(a.Machine, id); s.State != vda.StateActive || s.ClientName != "browser-1" {
			t.Errorf("with a viewer the session is %+v, want active from browser-1", s)
		}

		// The viewer closes its tab: a disconnect.
		v1.ws.Close(websocket.StatusNormalClosure, "")
		waitFor(t, "the disconnect at the broker", func() bool { return strings.Join(fb.eventsOf(id), ",") == "logon,disconnect" })
		if s, _ := sessionOf(a.Machine, id); s.State != vda.StateDisconnected {
			t.Errorf("after the viewer left the session is %s", s.State)
		}

		// A relaunch: a new ticket, the same Xvnc.
		mustPrepare(t, fb, "vda-d", id, "ticket-2", true)
		v2 := openViewer(t, a.url, "ticket-2")
		v2.awaitBlue(t)
		if got := ds.of(id); len(got) != 1 || got[0].Name() != s.Display {
			t.Errorf("after the relaunch the session had displays %v, want the one %s", got, s.Display)
		}

		// A second tab takes the session over.
		mustPrepare(t, fb, "vda-d", id, "ticket-3", true)
		v3 := openViewer(t, a.url, "ticket-3")
		if code := v2.closeCode(t); code != vdaproto.CloseTakenOver {
			t.Errorf("the first tab was closed with %d, want %d (taken over)", code, vdaproto.CloseTakenOver)
		}
		v3.awaitBlue(t)
		waitFor(t, "the reconnections at the broker", func() bool {
			return strings.Join(fb.eventsOf(id), ",") == "logon,disconnect,reconnect,reconnect"
		})

		// The broker disconnects the session: 4004, the display stays.
		if status, body := fb.sessionRequest("vda-d", vdaproto.PathDisconnect, id); status != http.StatusNoContent {
			t.Fatalf("disconnect: %d %+v", status, body)
		}
		if code := v3.closeCode(t); code != vdaproto.CloseDisconnected {
			t.Errorf("a broker disconnect closed the viewer with %d, want %d", code, vdaproto.CloseDisconnected)
		}

		// The broker logs it off: 4002, and the display stops.
		mustPrepare(t, fb, "vda-d", id, "ticket-4", true)
		v4 := openViewer(t, a.url, "ticket-4")
		v4.awaitBlue(t)
		if status, body := fb.sessionRequest("vda-d", vdaproto.PathLogoff, id); status != http.StatusNoContent {
			t.Fatalf("logoff: %d %+v", status, body)
		}
		if code := v4.closeCode(t); code != vdaproto.CloseSessionEnded {
			t.Errorf("a broker logoff closed the viewer with %d, want %d", code, vdaproto.CloseSessionEnded)
		}
		select {
		case <-ds.of(id)[0].Done():
		default:
			t.Error("the display still runs after the logoff")
		}
		if _, ok := sessionOf(a.Machine, id); ok {
			t.Error("the session is still there after the logoff")
		}
	})

	t.Run("the display opens only to its ticket and allowed origins", func(t *testing.T) {
		const id = "s-2"
		mustPrepare(t, fb, "vda-d", id, "ticket-r", false)
		for _, tc := range []struct {
			name, ticket, origin string
			protocols            []string
			status               int
			code, says           string
		}{
			{"no ticket", "", portal, nil, http.StatusUnauthorized, "unauthorized", "ticket is required"},
			{"unknown ticket", "not-a-ticket", portal, nil, http.StatusUnauthorized, "unauthorized", "unknown ticket"},
			{"another page's origin", "ticket-r", "https://evil.example", nil, http.StatusForbidden, "forbidden", "origin"},
			{"no binary subprotocol", "ticket-r", portal, []string{"chat"}, http.StatusBadRequest, "invalid", "binary"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, resp, err := dialDisplay(t, a.url, tc.ticket, tc.origin, tc.protocols...)
				if err == nil {
					t.Fatal("the display opened")
				}
				var b vdaproto.ErrorBody
				if resp == nil || resp.StatusCode != tc.status || json.NewDecoder(resp.Body).Decode(&b) != nil ||
					b.Error.Code != tc.code || !strings.Contains(b.Error.Message, tc.says) {
					t.Fatalf("answer %s, want %d %s saying %q", refusal(resp), tc.status, tc.code, tc.says)
				}
			})
		}
		t.Run("not a WebSocket", func(t *testing.T) {
			resp, err := http.Get(a.url + vdaproto.PathDisplay)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusUpgradeRequired {
				t.Fatalf("GET without an upgrade: %s", resp.Status)
			}
			status, _ := post(t, a.url+vdaproto.PathDisplay, "", struct{}{})
			if status != http.StatusMethodNotAllowed {
				t.Fatalf("POST %s: %d", vdaproto.PathDisplay, status)
			}
		})
		// None of the refusals spent the ticket, which opens the display
		// once, from no origin (usher's gateway) as well as the portal's.
		ws, resp, err := dialDisplay(t, a.url, "ticket-r", "")
		if err != nil {
			t.Fatalf("the ticket after the refusals: %v (%s)", err, refusal(resp))
		}
		ws.Close(websocket.StatusNormalClosure, "")
		for _, tc := range []struct{ name, ticket, says string }{
			{"a spent ticket", "ticket-r", "already used"},
			{"another session's spent ticket", "ticket-1", "already used"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, resp, err := dialDisplay(t, a.url, tc.ticket, portal)
				if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized || !strings.Contains(refusal(resp), tc.says) {
					t.Fatalf("answer %v %s, want 401 saying %q", err, refusal(resp), tc.says)
				}
			})
		}
		t.Run("an expired ticket", func(t *testing.T) {
			if status, body := prepareDesktop(fb, "vda-d", id, "ticket-old", true, time.Now().Add(-time.Second)); status != http.StatusNoContent {
				t.Fatalf("prepare: %d %+v", status, body)
			}
			_, resp, err := dialDisplay(t, a.url, "ticket-old", portal)
			if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized || !strings.Contains(refusal(resp), "expired") {
				t.Fatalf("answer %v %s, want 401 expired", err, refusal(resp))
			}
		})
	})

	t.Run("a display that dies ends its session", func(t *testing.T) {
		const id = "s-3"
		mustPrepare(t, fb, "vda-d", id, "ticket-k", false)
		v := openViewer(t, a.url, "ticket-k")
		v.awaitBlue(t)
		if err := syscall.Kill(ds.of(id)[0].Pid(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if code := v.closeCode(t); code != vdaproto.CloseDisplayFailed {
			t.Errorf("the viewer of a killed display was closed with %d, want %d", code, vdaproto.CloseDisplayFailed)
		}
		// The logoff alone: no disconnect for the viewer it closed.
		waitFor(t, "the logoff at the broker", func() bool { return slices.Contains(fb.eventsOf(id), "logoff") })
		if got := strings.Join(fb.eventsOf(id), ","); got != "logon,logoff" {
			t.Errorf("the broker heard %s, want logon,logoff", got)
		}
		if _, ok := sessionOf(a.Machine, id); ok {
			t.Error("the session of a killed display is still there")
		}
		waitFor(t, "the session command's logoff", func() bool {
			_, err := os.Stat(filepath.Join(hookDir, id+"-logoff"))
			return err == nil
		})
	})

	t.Run("the agent stops its displays as it stops", func(t *testing.T) {
		mustPrepare(t, fb, "vda-d", "s-4", "ticket-s", false)
		v := openViewer(t, a.url, "ticket-s")
		code := make(chan websocket.StatusCode, 1)
		go func() { code <- v.closeCode(t) }() // answers the close at once, as a browser does
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		if n := ds.Running(); n != 0 {
			t.Errorf("%d displays run after the agent stopped", n)
		}
		if code := <-code; code != vdaproto.CloseDisplayFailed {
			t.Errorf("the agent's stop closed the viewer with %d, want %d", code, vdaproto.CloseDisplayFailed)
		}
	})
}

// TestDisplayStartFailureRefusesSession: a display that cannot start
// refuses the session, as a failing session command does.
func TestDisplayStartFailureRefusesSession(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "Xvnc")
	if err := os.WriteFile(bad, []byte("#!/bin/sh\necho 'Fatal server error: no screens' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	fb := newFakeBroker(t, time.Second, "vda-f")
	ds := newDisplays(t, func(c *xvnc.Config) { c.Program = bad })
	a := startAgent(t, fb, "vda-f", func(c *vda.MachineConfig) { c.Display = ds })
	waitFor(t, "registration", a.Registered)
	status, body := prepareDesktop(fb, "vda-f", "s-1", "ticket-1", false, time.Now().Add(time.Minute))
	if status != http.StatusInternalServerError || !strings.Contains(body.Error.Message, "display") {
		t.Fatalf("prepare with a failing Xvnc: %d %+v, want 500 about the display", status, body)
	}
	if got := a.Sessions(); len(got) != 0 {
		t.Errorf("the refused session is kept: %+v", got)
	}
}

func TestDisplayConfig(t *testing.T) {
	fb := newFakeBroker(t, time.Second, "vda-c")
	ds := &displays{} // never started
	for _, tc := range []struct {
		name string
		mod  func(*vda.MachineConfig)
		says string
	}{
		{"another protocol", func(c *vda.MachineConfig) { c.Display, c.Protocol = ds, "rdp" }, "speaks vnc"},
		{"a bad origin pattern", func(c *vda.MachineConfig) { c.Display, c.DisplayOrigins = ds, []string{"[portal"} }, "not a pattern"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := vda.MachineConfig{Name: "vda-c", Client: fb.newClient(), Secret: testSecret, ControlURL: "http://127.0.0.1:1"}
			tc.mod(&cfg)
			if _, err := vda.NewMachine(cfg); err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("NewMachine: %v, want an error saying %q", err, tc.says)
			}
		})
	}
	t.Run("no displays here", func(t *testing.T) {
		a := startAgent(t, fb, "vda-c", nil)
		_, resp, err := dialDisplay(t, a.url, "ticket", "")
		if err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
			t.Fatalf("the display of a machine without: %v %s", err, refusal(resp))
		}
	})
}

// TestDisplayPingsViewers: the agent pings its viewers; one that stops
// answering is cut, and its session disconnected.
func TestDisplayPingsViewers(t *testing.T) {
	xvnctest.Need(t)
	fb := newFakeBroker(t, time.Second, "vda-p")
	a := startAgent(t, fb, "vda-p", func(c *vda.MachineConfig) {
		c.Display, c.DisplayPingInterval = newDisplays(t, nil), 50*time.Millisecond
	})
	waitFor(t, "registration", a.Registered)
	mustPrepare(t, fb, "vda-p", "s-1", "ticket-1", false)
	var pings atomic.Int32
	var answer atomic.Bool
	answer.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, a.url+vdaproto.PathDisplay, &websocket.DialOptions{
		Subprotocols: []string{vdaproto.DisplaySubprotocol, vdaproto.TicketSubprotocol("ticket-1")},
		OnPingReceived: func(context.Context, []byte) bool {
			pings.Add(1)
			return answer.Load()
		}})
	if err != nil {
		t.Fatalf("open the display: %v (%s)", err, refusal(resp))
	}
	defer ws.CloseNow()
	read := make(chan struct{})
	go func() { // reading is what answers pings
		defer close(read)
		io.Copy(io.Discard, websocket.NetConn(ctx, ws, websocket.MessageBinary))
	}()
	waitFor(t, "three pings", func() bool { return pings.Load() >= 3 })
	if got := fb.eventsOf("s-1"); strings.Join(got, ",") != "logon" {
		t.Fatalf("events %v while the viewer answered pings", got)
	}
	answer.Store(false)
	waitFor(t, "the silent viewer's disconnect", func() bool { return strings.Join(fb.eventsOf("s-1"), ",") == "logon,disconnect" })
	<-read
}
