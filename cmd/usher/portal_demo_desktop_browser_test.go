package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// The full chain's X tools, the packages scripts/test installs: Xvnc,
// xsetroot and xrandr (the session's size), xclip (its clipboard). xterm
// is optional: without it the typing step is skipped, under CI=true too,
// as scripts/test does not install it yet.
var demoDesktopTools = []string{"Xvnc", "xsetroot", "xrandr", "xclip"}

// TestPortalDemoDesktopInBrowser drives the portal's session view in
// Debian's chromium over the whole chain of the demo: the real site
// (server.Open with its desktop host), a real logon through the portal's
// form, a real launch of the demo desktop, usher's gateway, the
// in-process VDA agent and the session's own Xvnc, whose desktop command
// paints the root window #1f6feb, says where its display is, and runs an
// xterm appending what is typed into it to a file. The browser reaches
// the site through this test's TCP proxy, which can cut the network.
// web/e2e/demo-desktop.mjs checks the session's pixel in the canvas,
// that the session's X screen follows the window's size, that a network
// cut of 5 s comes back to the same Xvnc (its pid, and a file in the
// session's directory written before the cut), the close codes triggered for real (4001 a second page opening
// the session, 4002 a logoff through the API, 4004 a disconnect through
// the API, 4003 the Xvnc killed), typing UTF-8 into the xterm, the
// clipboard both ways, and that logging off ends the Xvnc; axe on the
// view. Skipped without its tools, except under CI=true.
func TestPortalDemoDesktopInBrowser(t *testing.T) {
	dir, err := filepath.Abs(e2eDir)
	if err != nil {
		t.Fatal(err)
	}
	node := e2eTools(t, dir)
	for _, tool := range demoDesktopTools {
		if _, err := exec.LookPath(tool); err != nil {
			e2eUnavailable(t, "%s is not installed (Debian: tigervnc-standalone-server x11-xserver-utils xclip)", tool)
		}
	}
	xterm := "1"
	if _, err := exec.LookPath("xterm"); err != nil && os.Getenv("CI") == "true" {
		t.Fatal("xterm is not installed (Debian: xterm), which the typing step needs (CI=true)")
	} else if err != nil {
		t.Log("xterm is not installed (Debian: xterm): the typing step is skipped")
		xterm = ""
	}
	// The sessions run as this test's account (the demo's default for
	// root is nobody), so that they write into the test's directory.
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the site's log (end):\n%s", tail(logs.String(), 6000))
		}
	})
	// The desktop: the colour, a line "SESSION DISPLAY XAUTHORITY" per
	// session, and a small xterm near the top left corner whose shell
	// appends what is typed to typed-SESSION (-u8: UTF-8 whatever the
	// locale).
	command := fmt.Sprintf(`xsetroot -solid '%s'; echo "$USHER_SESSION_ID $DISPLAY $XAUTHORITY" >> %s/sessions
command -v xterm >/dev/null && exec xterm -u8 -geometry 40x4+40+40 -e sh -c "exec cat >> %s/typed-$USHER_SESSION_ID"`, desktopColour, state, state)
	srv, err := server.Open(context.Background(), server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0",
		Demo: true, DemoPassword: e2eDemoPassword, DemoDesktop: true, DemoDesktopCommand: command, DemoDesktopAccount: me.Username,
		SimVDAs: -1, SourceFree: -1, HeartbeatInterval: 200 * time.Millisecond, PasswordParams: sitetest.Cheap,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if !srv.WaitDemoDesktop(context.Background(), 30*time.Second) {
		t.Fatal("the demo desktop's agents did not register")
	}
	d := srv.DemoDesktop()
	// The demo's pooled desktops reconnect to disconnected sessions only;
	// a second page taking an active session over (4001) needs "always".
	groupURL := srv.URL() + "/api/v1/admin/delivery-groups/" + url.PathEscape(demo.DesktopGroup)
	_, body := get(t, groupURL, demo.Admin, e2eDemoPassword)
	var group map[string]any
	if err := json.Unmarshal(body, &group); err != nil {
		t.Fatalf("the desktop's delivery group: %v: %s", err, body)
	}
	group["reconnect"] = "always"
	raw, _ := json.Marshal(group)
	req, _ := http.NewRequest("PUT", groupURL, bytes.NewReader(raw))
	req.SetBasicAuth(demo.Admin, e2eDemoPassword)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("reconnect always on the desktop's group: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	proxy := newCutProxy(t, srv.Addr())
	ctl := &desktopControl{t: t, state: state, net: proxy}
	test := httptest.NewServer(ctl.routes())
	t.Cleanup(test.Close)
	shots := os.Getenv("SCREENSHOT_DIR")
	if shots == "" {
		shots = filepath.Join(os.TempDir(), "usher-e2e-screenshots")
	}
	err = runE2EScript(t, node, dir, "demo-desktop.mjs", "BASE_URL=http://"+proxy.addr, "DEMO_PASSWORD="+e2eDemoPassword,
		"SCREENSHOT_DIR="+shots, "TEST_URL="+test.URL, "DESKTOP_COLOUR="+desktopColour, "DESKTOP_USER="+d.User,
		"DESKTOP_NAME="+d.Resource, "XTERM="+xterm)
	if err != nil {
		t.Fatalf("demo-desktop.mjs failed (%v); screenshots in %s", err, shots)
	}
}

// ---- the network between the browser and the site ----

// cutProxy forwards TCP connections to the site; cut(true) closes them
// all and refuses new ones until cut(false), as a lost network would.
type cutProxy struct {
	addr string
	mu   sync.Mutex
	down bool
	open map[net.Conn]bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{addr: ln.Addr().String(), open: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); p.cut(true); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.forward(c, target) })
		}
	})
	return p
}

func (p *cutProxy) forward(c net.Conn, target string) {
	up, err := net.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.open[c], p.open[up] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
	p.mu.Lock()
	delete(p.open, c)
	delete(p.open, up)
	p.mu.Unlock()
}

// cut takes the network down (closing every connection) or up, and
// returns how many connections it closed.
func (p *cutProxy) cut(down bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	n := 0
	if down {
		for c := range p.open {
			c.Close()
			n++
		}
	}
	return n / 2
}

// ---- the session's X server, as the script sees it ----

// desktopControl serves the script's look at the sessions' X servers:
//
//	GET  /test/session            the newest session: id, display, Xvnc's pid, its screen's size, its marker
//	POST /test/session/mark?v=V   set the marker (a file in the session's directory) to V
//	POST /test/session/kill       SIGKILL the newest session's Xvnc
//	GET  /test/alive?pid=N        whether process N runs
//	GET  /test/typed?id=ID        what was typed in session ID's xterm
//	POST /test/net?down=1|0       cut the network between the browser and the site, or mend it
//	POST /test/x/copy             put the body on the session's clipboard (an xclip holds it)
//	GET  /test/x/clipboard        the session's clipboard
type desktopControl struct {
	t     *testing.T
	state string
	net   *cutProxy

	mu     sync.Mutex
	copier *exec.Cmd
}

type xSession struct {
	ID, Display, XAuthority string
	Pid                     int
	Width, Height           int
	Mark                    string
}

var currentRE = regexp.MustCompile(`current (\d+) x (\d+),`)

// newest reads the newest session's line, its Xvnc's pid (the process
// whose command line names the session's directory), its size and its marker.
func (c *desktopControl) newest(ctx context.Context) (xSession, error) {
	raw, err := os.ReadFile(filepath.Join(c.state, "sessions"))
	if err != nil {
		return xSession{}, err
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) != 3 {
		return xSession{}, fmt.Errorf("sessions line %q", lines[len(lines)-1])
	}
	s := xSession{ID: f[0], Display: f[1], XAuthority: f[2]}
	if s.Pid, err = xvncPid(filepath.Dir(s.XAuthority)); err != nil {
		return s, err
	}
	out, err := c.x(ctx, s, "xrandr", "--current").Output()
	if err != nil {
		return s, fmt.Errorf("xrandr: %w", err)
	}
	if m := currentRE.FindSubmatch(out); m != nil {
		s.Width, _ = strconv.Atoi(string(m[1]))
		s.Height, _ = strconv.Atoi(string(m[2]))
	}
	// The marker: a file in the session's directory, which goes with the
	// session.
	mark, _ := os.ReadFile(filepath.Join(filepath.Dir(s.XAuthority), "usher-test-mark"))
	s.Mark = string(mark)
	return s, nil
}

// xvncPid finds the Xvnc whose command line names a file of dir, the
// session's directory (its socket and X authority file are there).
func xvncPid(dir string) (int, error) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), dir+"/") {
			continue
		}
		if comm, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "comm")); strings.TrimSpace(string(comm)) == "Xvnc" {
			return strconv.Atoi(filepath.Base(filepath.Dir(p)))
		}
	}
	return 0, fmt.Errorf("no Xvnc runs for %s", dir)
}

// x is a command on session s's display.
func (c *desktopControl) x(ctx context.Context, s xSession, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "DISPLAY="+s.Display, "XAUTHORITY="+s.XAuthority)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

func (c *desktopControl) routes() http.Handler {
	mux := http.NewServeMux()
	fail := func(w http.ResponseWriter, err error) { http.Error(w, err.Error(), http.StatusConflict) }
	mux.HandleFunc("GET /test/session", func(w http.ResponseWriter, r *http.Request) {
		s, err := c.newest(r.Context())
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, s)
	})
	mux.HandleFunc("POST /test/session/mark", func(w http.ResponseWriter, r *http.Request) {
		s, err := c.newest(r.Context())
		if err == nil {
			err = os.WriteFile(filepath.Join(filepath.Dir(s.XAuthority), "usher-test-mark"), []byte(r.URL.Query().Get("v")), 0o600)
		}
		if err != nil {
			fail(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /test/session/kill", func(w http.ResponseWriter, r *http.Request) {
		s, err := c.newest(r.Context())
		if err == nil {
			err = syscall.Kill(s.Pid, syscall.SIGKILL)
		}
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, s)
	})
	mux.HandleFunc("GET /test/alive", func(w http.ResponseWriter, r *http.Request) {
		pid, err := strconv.Atoi(r.URL.Query().Get("pid"))
		if err != nil || pid <= 0 {
			http.Error(w, "pid", http.StatusBadRequest)
			return
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		writeJSON(w, map[string]any{"alive": err == nil, "comm": strings.TrimSpace(string(comm))})
	})
	mux.HandleFunc("GET /test/typed", func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		if strings.ContainsAny(id, "/.") || id == "" {
			http.Error(w, "id", http.StatusBadRequest)
			return
		}
		b, err := os.ReadFile(filepath.Join(c.state, "typed-"+id))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			fail(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(b)
	})
	mux.HandleFunc("POST /test/net", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]int{"cut": c.net.cut(r.URL.Query().Get("down") == "1")})
	})
	mux.HandleFunc("POST /test/x/copy", func(w http.ResponseWriter, r *http.Request) {
		text, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		s, serr := c.newest(r.Context())
		if err = errors.Join(err, serr); err != nil {
			fail(w, err)
			return
		}
		// Not the request's context: the xclip holds the clipboard after
		// the answer, until another owner takes it.
		cmd := c.x(context.Background(), s, "xclip", "-selection", "clipboard", "-quiet")
		cmd.Stdin = strings.NewReader(string(text))
		c.mu.Lock()
		defer c.mu.Unlock()
		c.stopCopier()
		if err := cmd.Start(); err != nil {
			fail(w, err)
			return
		}
		c.copier = cmd
		go cmd.Wait()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /test/x/clipboard", func(w http.ResponseWriter, r *http.Request) {
		s, err := c.newest(r.Context())
		var out []byte
		if err == nil {
			out, err = c.x(r.Context(), s, "xclip", "-selection", "clipboard", "-o").Output()
		}
		if err != nil {
			fail(w, err)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write(out)
	})
	c.t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.stopCopier()
	})
	return mux
}

func (c *desktopControl) stopCopier() {
	if c.copier != nil {
		c.copier.Process.Kill()
		c.copier = nil
	}
}
