package main

import (
	"context"
	"encoding/json"
	"image/color"
	"io"
	"net"
	"net/http"
	"os/user"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/usher-vdi/usher/internal/display/rfb"
	"github.com/usher-vdi/usher/internal/display/xvnc/xvnctest"
	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// TestVDADisplayInBrowser runs usher vda --display xvnc against a real
// site: a launch of the demo's Office Desktop starts the session's Xvnc,
// a viewer opens the display WebSocket with the launch's ticket and sees
// the desktop's colour, leaves (the broker hears of the disconnect),
// relaunches into the same session, and is closed with 4002 when the
// user logs off.
func TestVDADisplayInBrowser(t *testing.T) {
	xvnctest.Need(t)
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	srv, err := server.Open(ctx, server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Demo: true, DemoPassword: "demo-pass-1",
		HeartbeatInterval: 200 * time.Millisecond, AllowVDAAddressChange: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	_, secretFile := srv.EnrolmentSecret()
	agent := startVDA(t, "--broker", srv.URL(), "--machine", "office-vda-01", "--enrolment-secret-file", secretFile,
		"--listen", "127.0.0.1:0", "--address", "127.0.0.1:3389",
		"--display", "xvnc", "--display-account", me.Username, "--display-geometry", "320x240",
		"--display-command", "xsetroot -solid '#1f6feb'", "--display-origin", "https://portal.example.com")
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
		Protocol    string `json:"protocol"`
		Ticket      string `json:"ticket"`
		Reconnected bool   `json:"reconnected"`
	}
	launch := func() launchAnswer {
		t.Helper()
		code, body := postJSON(t, srv.URL()+"/api/v1/resources/Office%20Desktop/launch", login.Token, `{"client_name":"laptop-42"}`)
		var l launchAnswer
		json.Unmarshal(body, &l)
		if code != 200 || l.Ticket == "" || l.Machine != "office-vda-01" || l.Protocol != vdaproto.ProtocolVNC {
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
	view := func(ticket string) (*websocket.Conn, net.Conn) {
		t.Helper()
		ctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		ws, resp, err := websocket.Dial(ctx, control+vdaproto.PathDisplay, &websocket.DialOptions{
			Subprotocols: []string{vdaproto.DisplaySubprotocol, vdaproto.TicketSubprotocol(ticket)},
			HTTPHeader:   http.Header{"Origin": {"https://portal.example.com"}}})
		if err != nil {
			status := "no answer"
			if resp != nil {
				status = resp.Status
			}
			t.Fatalf("open the display: %v (%s)", err, status)
		}
		t.Cleanup(func() { ws.CloseNow() })
		nc := websocket.NetConn(ctx, ws, websocket.MessageBinary)
		nc.SetDeadline(time.Now().Add(20 * time.Second))
		c, err := rfb.Handshake(nc, rfb.Options{})
		if err != nil {
			t.Fatal(err)
		}
		blue := color.RGBA{R: 0x1f, G: 0x6f, B: 0xeb, A: 0xff}
		var got color.RGBA
		if err := c.Await(func(c *rfb.Client) bool { got, _ = c.Pixel(160, 120); return got == blue }); err != nil {
			t.Fatalf("waiting for the desktop's blue (the pixel is %v): %v", got, err)
		}
		nc.SetDeadline(time.Time{})
		return ws, nc
	}

	l := launch()
	ws, _ := view(l.Ticket)
	waitFor(t, "the session active at the broker", func() bool { return state() == "active" })
	ws.Close(websocket.StatusNormalClosure, "")
	waitFor(t, "the disconnect at the broker", func() bool { return state() == "disconnected" })

	r := launch()
	if !r.Reconnected || r.SessionID != l.SessionID {
		t.Fatalf("the relaunch did not return to the session: %+v", r)
	}
	_, nc := view(r.Ticket)
	waitFor(t, "the reconnection at the broker", func() bool { return state() == "active" })

	if code, body := postJSON(t, srv.URL()+"/api/v1/sessions/"+l.SessionID+"/logoff", login.Token, ""); code != 204 {
		t.Fatalf("logoff: %d %s", code, body)
	}
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.Copy(io.Discard, nc); websocket.CloseStatus(err) != vdaproto.CloseSessionEnded {
		t.Errorf("the logoff closed the viewer with %v, want %d", err, vdaproto.CloseSessionEnded)
	}
	waitFor(t, "the logoff at the broker", func() bool { return state() == "none" })

	if code := agent.stop(t); code != 0 {
		t.Fatalf("usher vda exited with %d: %s", code, agent.stderr.String())
	}
	if strings.Contains(agent.stderr.String(), l.Ticket) {
		t.Error("the agent logged a ticket")
	}
}
