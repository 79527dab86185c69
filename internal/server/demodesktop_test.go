package server_test

import (
	"context"
	"encoding/json"
	"image/color"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/display/rfb"
	"github.com/usher-vdi/usher/internal/display/xvnc/xvnctest"
	"github.com/usher-vdi/usher/internal/gateway"
	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// TestDemoDesktop: the demo site with its desktop host (Xvnc installed)
// serves the demo's desktop from in-process agents: a user's launch
// through the REST API answers the gateway's display_url, which opens
// with the ticket, and the RFB stream shows the session's desktop colour
// (the test's desktop command, xsetroot). The other machines are left
// to the simulated VDAs. Skipped without Xvnc and xsetroot, except under
// CI=true.
func TestDemoDesktop(t *testing.T) {
	t.Parallel()
	xvnctest.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, _ := openSite(t, func(c *server.Config) {
		c.DemoDesktop, c.DemoDesktopCommand, c.SimVDAs = true, "xsetroot -solid '#1f6feb'", -1
		c.Now = nil
	})
	d := s.DemoDesktop()
	if d.Resource != demo.PooledDesktop || len(d.Machines) != 5 || d.Machines[0] != "pooled-vda-01" || d.Missing != "" {
		t.Fatalf("the demo desktop: %+v", d)
	}
	if !s.WaitDemoDesktop(ctx, 30*time.Second) {
		t.Fatal("the demo desktop's agents did not register")
	}
	if registered, total := s.WaitSimulated(ctx, 30*time.Second); registered != demo.Machines-5 || total != demo.Machines-5 {
		t.Fatalf("%d of %d simulated VDAs registered, want %d: the desktop's machines are the agents'", registered, total, demo.Machines-5)
	}

	c := client("127.0.0.1")
	defer c.CloseIdleConnections()
	var login api.LoginResponse
	if a := post(t, c, s.URL()+"/api/v1/login", "application/json", `{"username":"DEMO\\`+d.User+`","password":"`+demoPassword+`"}`); a.status != 200 {
		t.Fatalf("login: %d %s", a.status, a.body)
	} else if err := json.Unmarshal([]byte(a.body), &login); err != nil || login.Token == "" {
		t.Fatalf("login: %v %s", err, a.body)
	}
	a := post(t, c, s.URL()+"/api/v1/resources/"+strings.ReplaceAll(d.Resource, " ", "%20")+"/launch", "application/json", `{"client_name":"test"}`,
		"Authorization", "Bearer "+login.Token)
	var l api.LaunchResponse
	if err := json.Unmarshal([]byte(a.body), &l); a.status != 200 || err != nil {
		t.Fatalf("launch: %d %s", a.status, a.body)
	}
	if l.Protocol != vdaproto.ProtocolVNC || !strings.HasPrefix(l.Machine, "pooled-vda-") || l.DisplayURL != gateway.Path(l.SessionID) {
		t.Fatalf("launch: %+v, want a vnc session on a desktop machine with the gateway's display_url", l)
	}

	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.URL(), "http")+l.DisplayURL, &websocket.DialOptions{
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + login.Token}},
		Subprotocols: []string{vdaproto.DisplaySubprotocol, vdaproto.TicketSubprotocol(l.Ticket)}})
	if err != nil {
		t.Fatalf("open the display through the gateway: %v (%v)", err, resp)
	}
	defer ws.CloseNow()
	nc := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	rc, err := rfb.Handshake(nc, rfb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w, h := rc.Size()
	blue := color.RGBA{R: 0x1f, G: 0x6f, B: 0xeb, A: 0xff}
	var got color.RGBA
	if err := rc.Await(func(c *rfb.Client) bool { got, _ = c.Pixel(w/2, h/2); return got == blue }); err != nil {
		t.Fatalf("waiting for the desktop's blue at %d,%d of %dx%d (the pixel is %v): %v", w/2, h/2, w, h, got, err)
	}
	// The session's Xvnc (a child of this process, which runs the agents)
	// runs as this account, or as nobody when that is root: a demo user's
	// desktop is no root shell.
	want := os.Getuid()
	if want == 0 {
		u, err := user.Lookup("nobody")
		if err != nil {
			t.Fatal(err)
		}
		want, _ = strconv.Atoi(u.Uid)
	}
	uids := childUIDs(t, "Xvnc")
	if len(uids) == 0 || slices.ContainsFunc(uids, func(u int) bool { return u != want }) {
		t.Errorf("the demo session's Xvnc runs as uid %v, want %d", uids, want)
	}
	ws.Close(websocket.StatusNormalClosure, "")
}

// childUIDs returns the real user IDs of this process's children named
// name, from /proc.
func childUIDs(t *testing.T, name string) []int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/status")
	if err != nil {
		t.Fatal(err)
	}
	var uids []int
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile
		}
		fields := map[string]string{}
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				fields[k] = strings.TrimSpace(v)
			}
		}
		if fields["Name"] != name || fields["PPid"] != strconv.Itoa(os.Getpid()) {
			continue
		}
		uid, _ := strconv.Atoi(strings.Fields(fields["Uid"])[0])
		uids = append(uids, uid)
	}
	return uids
}

// TestDemoDesktopWithoutXvnc: without Xvnc the demo runs no desktop host,
// says how to get one, and the simulated VDAs play every machine.
func TestDemoDesktopWithoutXvnc(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	s, _ := openSite(t, func(c *server.Config) { c.DemoDesktop, c.SimVDAs = true, -1 })
	d := s.DemoDesktop()
	if len(d.Machines) != 0 || d.Missing != server.DemoDesktopHint || !strings.Contains(d.Missing, "apt-get install tigervnc-standalone-server") {
		t.Fatalf("the demo desktop without Xvnc: %+v", d)
	}
	if registered, total := s.WaitSimulated(context.Background(), 30*time.Second); registered != demo.Machines || total != demo.Machines {
		t.Fatalf("%d of %d simulated VDAs registered, want all %d", registered, total, demo.Machines)
	}
}
