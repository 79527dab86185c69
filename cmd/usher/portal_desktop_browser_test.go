package main

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/vdaproto"
	"github.com/usher-vdi/usher/internal/web"
)

// The desktop test's X tools: Debian's tigervnc-standalone-server (Xvnc),
// x11-xserver-utils (xsetroot), websockify and xclip.
var desktopTools = []string{"Xvnc", "xsetroot", "websockify", "xclip"}

// desktopColour is the desktop's root window, which the page must show.
const desktopColour = "#1f6feb"

// TestPortalDesktopInBrowser opens a desktop in the portal's session view
// in Debian's chromium, against a real VNC server: TigerVNC's Xvnc (its
// root window #1f6feb, drawn by xsetroot), with websockify, the yardstick
// the issue names, in front of it as the display's WebSocket.
// web/e2e/desktop.mjs (Playwright, axe-core) logs on to the portal as
// this test's fake user API serves it (the real embedded portal, under
// its real Content-Security-Policy; a launch answer with display_url and
// ticket, as usher's gateway will give), and checks that the canvas
// shows the desktop's colour, that the session is resized to the window,
// that the toolbar works (Ctrl+Alt+Del, full screen, the keyboard's way
// in and out, clipboard both ways through Xvnc's clipboard, read and set
// with xclip, Disconnect, Log off), that an unclean close reconnects with
// a fresh ticket, that close code 4005 (the gateway's) says what it means
// (the agent's, 4001–4004, TestPortalDemoDesktopInBrowser triggers for
// real over the demo's whole chain), that a direct-mode display_url (websockify's own ws://
// origin, which the portal's configuration allows) works, that a launch
// without display_url still downloads its .rdp file, at a phone's width
// too, with axe on each state. Between the page and websockify, this
// test's stand-in for the gateway checks the ticket subprotocol (single
// use) and splices, and can cut the connection or close it with a code.
// Like the other browser tests, it is skipped without its tools, except
// under CI=true, where it fails.
func TestPortalDesktopInBrowser(t *testing.T) {
	dir, err := filepath.Abs(e2eDir)
	if err != nil {
		t.Fatal(err)
	}
	node := e2eTools(t, dir)
	for _, tool := range desktopTools {
		if _, err := exec.LookPath(tool); err != nil {
			e2eUnavailable(t, "%s is not installed (Debian: tigervnc-standalone-server x11-xserver-utils websockify xclip)", tool)
		}
	}
	x := startXvnc(t)
	if out, err := exec.Command("xsetroot", "-display", x.display, "-solid", desktopColour).CombinedOutput(); err != nil {
		t.Fatalf("xsetroot: %v\n%s", err, out)
	}
	upstream := startWebsockify(t, x.socket)
	site := newDesktopSite(t, upstream, x.display)
	shots := os.Getenv("SCREENSHOT_DIR")
	if shots == "" {
		shots = filepath.Join(os.TempDir(), "usher-e2e-screenshots")
	}
	t.Logf("screenshots: %s", shots)
	err = runE2EScript(t, node, dir, "desktop.mjs", "BASE_URL="+site.url, "DEMO_PASSWORD=unused", "SCREENSHOT_DIR="+shots,
		"DESKTOP_COLOUR="+desktopColour)
	if err != nil {
		t.Logf("Xvnc's log (end):\n%s", tail(x.log.String(), 3000))
		t.Fatalf("desktop.mjs failed (%v); screenshots in %s", err, shots)
	}
}

// ---- Xvnc and websockify ----

type testXvnc struct {
	display string // ":N"
	socket  string // its RFB Unix socket
	log     *syncBuffer
}

// startXvnc starts Xvnc on a display it picks (-displayfd) with its RFB
// on a 0600 Unix socket only, as the agent runs it, and stops it when the
// test ends.
func startXvnc(t *testing.T) *testXvnc {
	t.Helper()
	x := &testXvnc{socket: filepath.Join(t.TempDir(), "rfb.sock"), log: &syncBuffer{}}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command("Xvnc", "-displayfd", "3", "-rfbunixpath", x.socket, "-rfbunixmode", "0600", "-rfbport", "-1",
		"-SecurityTypes", "None", "-geometry", "1024x768", "-depth", "24", "-AcceptSetDesktopSize", "-nolisten", "tcp")
	cmd.ExtraFiles = []*os.File{w}
	cmd.Stdout, cmd.Stderr = x.log, x.log
	if err := cmd.Start(); err != nil {
		w.Close()
		t.Fatalf("Xvnc: %v", err)
	}
	w.Close()
	stopOnCleanup(t, cmd)
	// The display's number, written once it takes connections.
	r.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("Xvnc did not say its display (%v):\n%s", err, x.log.String())
	}
	n, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("Xvnc's display %q: %v", line, err)
	}
	x.display = ":" + strconv.Itoa(n)
	if _, err := os.Stat(x.socket); err != nil {
		t.Fatalf("Xvnc is ready and has no RFB socket: %v", err)
	}
	t.Logf("Xvnc on display %s, RFB at %s", x.display, x.socket)
	return x
}

// startWebsockify starts websockify in front of the Unix socket sock, on a
// listener of this process's on 127.0.0.1 (--inetd: no port to pick and
// hope is free), and returns its address.
func startWebsockify(t *testing.T, sock string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	defer f.Close()
	log := &syncBuffer{}
	cmd := exec.Command("websockify", "--inetd", "--unix-target="+sock)
	cmd.Stdin = f
	cmd.Stdout, cmd.Stderr = log, log
	// websockify forks a process per connection: the group goes at the end.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("websockify: %v", err)
	}
	stopOnCleanup(t, cmd)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("websockify's log (end):\n%s", tail(log.String(), 3000))
		}
	})
	t.Logf("websockify at %s", addr)
	return addr
}

// stopOnCleanup stops cmd (and its process group when it has one of its
// own) when the test ends: SIGTERM, then SIGKILL after a while.
func stopOnCleanup(t *testing.T, cmd *exec.Cmd) {
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		pid := cmd.Process.Pid
		if cmd.SysProcAttr != nil && cmd.SysProcAttr.Setpgid {
			pid = -pid
		}
		syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(pid, syscall.SIGKILL)
			<-done
		}
	})
}

// ---- the site: the portal, a fake user API and a stand-in gateway ----

// desktopSite serves the embedded portal with a user API of its own: the
// resources "desk" (its display through the stand-in gateway, at a
// same-origin display_url), "direct" (websockify's own ws:// URL, as
// direct mode gives an agent's) and "notepad" (no display: a .rdp file).
// Its /test/ routes let the script drive the display and Xvnc's clipboard.
type desktopSite struct {
	t        *testing.T
	url      string
	upstream string // websockify's address
	display  string // Xvnc's X display

	mu        sync.Mutex
	tickets   map[string]bool // issued and not spent
	protocols []string        // the last display request's Sec-WebSocket-Protocol
	counts    map[string]int  // launch, reconnect, disconnect, logoff, display, refused
	splices   map[*splice]bool
	copier    *exec.Cmd // the xclip that holds the clipboard the script set
}

// displayLaunch is a launch answer with the display_url usher's gateway
// adds.
type displayLaunch struct {
	api.LaunchResponse
	DisplayURL string `json:"display_url,omitempty"`
}

var desktopResources = []api.ResourceView{
	{Name: "desk", DisplayName: "Test Desktop", Kind: "desktop", Description: "Xvnc through the stand-in gateway"},
	{Name: "direct", DisplayName: "Direct Desktop", Kind: "desktop", Description: "Xvnc through websockify, direct"},
	{Name: "notepad", DisplayName: "Notepad", Kind: "application", Description: "no display: an .rdp file"},
}

func newDesktopSite(t *testing.T, upstream, display string) *desktopSite {
	s := &desktopSite{t: t, upstream: upstream, display: display, tickets: map[string]bool{}, counts: map[string]int{},
		splices: map[*splice]bool{}}
	// Direct mode: the page opens websockify's origin itself, which the
	// portal's configuration must allow.
	portal, err := web.Portal(web.PortalConfig{DisplayOrigins: []string{"ws://" + upstream}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", portal)
	mux.Handle("GET /portal/", portal)
	mux.HandleFunc("GET /api/v1/me", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, api.MeResponse{User: "user0001", DisplayName: "User One", Domain: "DEMO", Site: "Desktop test"})
	})
	mux.HandleFunc("GET /api/v1/preferences", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"favourites": []string{}, "recent": []any{}, "updated_at": ""})
	})
	mux.HandleFunc("PUT /api/v1/preferences", func(w http.ResponseWriter, r *http.Request) {
		var doc map[string]any
		json.NewDecoder(r.Body).Decode(&doc)
		doc["updated_at"] = time.Now().UTC().Format(time.RFC3339Nano)
		writeJSON(w, doc)
	})
	mux.HandleFunc("GET /api/v1/resources", func(w http.ResponseWriter, r *http.Request) {
		res := make([]api.ResourceView, len(desktopResources))
		for i, x := range desktopResources {
			x.LaunchURL = "/api/v1/resources/" + x.Name + "/launch"
			res[i] = x
		}
		writeJSON(w, api.ResourcesResponse{Resources: res, Folders: []string{}})
	})
	mux.HandleFunc("POST /api/v1/resources/{name}/launch", func(w http.ResponseWriter, r *http.Request) {
		s.count("launch")
		name := r.PathValue("name")
		if name != "desk" && name != "direct" && name != "notepad" {
			http.Error(w, `{"error":{"code":"not_found","message":"no such resource"}}`, http.StatusNotFound)
			return
		}
		writeJSON(w, s.answer("s-"+name, false))
	})
	mux.HandleFunc("GET /api/v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		var out api.SessionsResponse
		for _, x := range desktopResources {
			out.Sessions = append(out.Sessions, api.SessionView{ID: "s-" + x.Name, Resource: x.Name, Machine: "vm-01", State: "active", CreatedAt: time.Now()})
		}
		writeJSON(w, out)
	})
	mux.HandleFunc("POST /api/v1/sessions/{id}/{action}", func(w http.ResponseWriter, r *http.Request) {
		id, action := r.PathValue("id"), r.PathValue("action")
		if !strings.HasPrefix(id, "s-") {
			http.Error(w, `{"error":{"code":"not_found","message":"no such session"}}`, http.StatusNotFound)
			return
		}
		switch action {
		case "reconnect":
			s.count("reconnect")
			writeJSON(w, s.answer(id, true))
		case "disconnect", "logoff":
			s.count(action)
			w.WriteHeader(http.StatusNoContent)
		default:
			http.NotFound(w, r)
		}
	})
	mux.HandleFunc("GET /api/v1/sessions/{id}/display", s.gateway)
	mux.HandleFunc("GET /test/state", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		writeJSON(w, map[string]any{"counts": s.counts, "protocols": s.protocols, "open": len(s.splices)})
	})
	mux.HandleFunc("POST /test/display/cut", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]int{"cut": s.closeDisplays(0)})
	})
	mux.HandleFunc("POST /test/display/close", func(w http.ResponseWriter, r *http.Request) {
		code, err := strconv.Atoi(r.URL.Query().Get("code"))
		if err != nil || code < 1000 || code > 4999 {
			http.Error(w, "code", http.StatusBadRequest)
			return
		}
		writeJSON(w, map[string]int{"closed": s.closeDisplays(uint16(code))})
	})
	mux.HandleFunc("POST /test/x/copy", s.copyOnDesktop)
	mux.HandleFunc("GET /test/x/clipboard", s.desktopClipboard)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		s.closeDisplays(0)
		srv.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.stopCopier()
	})
	s.url = srv.URL
	return s
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (s *desktopSite) count(what string) {
	s.mu.Lock()
	s.counts[what]++
	s.mu.Unlock()
}

// answer is a launch answer for session id with a new ticket.
func (s *desktopSite) answer(id string, reconnected bool) displayLaunch {
	b := make([]byte, 24)
	rand.Read(b)
	ticket := base64.RawURLEncoding.EncodeToString(b)
	name := strings.TrimPrefix(id, "s-")
	a := displayLaunch{LaunchResponse: api.LaunchResponse{SessionID: id, Machine: "vm-01", Host: "127.0.0.1", Port: 3389, Protocol: "vnc",
		Ticket: ticket, ExpiresAt: time.Now().Add(time.Minute), Reconnected: reconnected,
		LaunchFile: api.LaunchFile{Filename: name + ".rdp", ContentType: "application/x-rdp",
			Content: "full address:s:127.0.0.1:3389\r\nusername:s:user0001\r\n"}}}
	switch name {
	case "desk":
		a.DisplayURL = "/api/v1/sessions/" + id + "/display"
	case "direct":
		a.DisplayURL = "ws://" + s.upstream + "/"
	default:
		a.Protocol = "rdp"
	}
	s.mu.Lock()
	s.tickets[ticket] = true
	s.mu.Unlock()
	return a
}

// gateway stands in for usher's: it spends the ticket that the
// subprotocols carry (401 before the upgrade without one), then splices
// the WebSocket, handshake and frames, to websockify.
func (s *desktopSite) gateway(w http.ResponseWriter, r *http.Request) {
	protocols := r.Header.Values("Sec-WebSocket-Protocol")
	ticket := vdaproto.TicketFromSubprotocols(protocols)
	s.mu.Lock()
	s.protocols = protocols
	ok := s.tickets[ticket]
	delete(s.tickets, ticket)
	if ok {
		s.counts["display"]++
	} else {
		s.counts["refused"]++
	}
	s.mu.Unlock()
	if !ok {
		http.Error(w, `{"error":{"code":"unauthorized","message":"no valid ticket"}}`, http.StatusUnauthorized)
		return
	}
	up, err := net.Dial("tcp", s.upstream)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		return
	}
	if err := r.Write(up); err != nil {
		up.Close()
		c.Close()
		return
	}
	sp := &splice{browser: c, fromBrowser: brw.Reader, up: up}
	s.mu.Lock()
	s.splices[sp] = true
	s.mu.Unlock()
	go func() {
		sp.run()
		s.mu.Lock()
		delete(s.splices, sp)
		s.mu.Unlock()
	}()
}

// closeDisplays ends every display connection: with a close frame of
// code, or, code 0, cut as a network failure would (no close frame). It
// returns how many it ended.
func (s *desktopSite) closeDisplays(code uint16) int {
	s.mu.Lock()
	var all []*splice
	for sp := range s.splices {
		all = append(all, sp)
	}
	s.mu.Unlock()
	for _, sp := range all {
		if code == 0 {
			sp.cut()
		} else {
			sp.closeWith(code, "closed by the test")
		}
	}
	return len(all)
}

// splice copies one display connection: the browser's bytes to
// websockify as they come, websockify's frame by frame, so that a close
// frame can go in between two.
type splice struct {
	browser     net.Conn
	fromBrowser io.Reader
	up          net.Conn
	wmu         sync.Mutex // writes to the browser
	once        sync.Once
	closing     atomic.Bool // a close frame went: the browser's end closes the rest
}

func (sp *splice) run() {
	defer func() {
		if !sp.closing.Load() {
			sp.cut()
		}
	}()
	go func() {
		io.Copy(sp.up, sp.fromBrowser)
		sp.cut()
	}()
	br := bufio.NewReader(sp.up)
	// The upgrade's answer, as it is.
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		if _, err := io.WriteString(sp.browser, line); err != nil {
			return
		}
		if line == "\r\n" {
			break
		}
	}
	for {
		frame, err := readFrame(br)
		if err != nil {
			return
		}
		sp.wmu.Lock()
		if sp.closing.Load() {
			// A frame read before closeWith let websockify go: after the
			// close frame, the browser would fail the connection (1006).
			sp.wmu.Unlock()
			return
		}
		_, err = sp.browser.Write(frame)
		sp.wmu.Unlock()
		if err != nil {
			return
		}
	}
}

// readFrame reads one WebSocket frame, whole.
func readFrame(r *bufio.Reader) ([]byte, error) {
	head := make([]byte, 2, 14)
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, err
	}
	n := uint64(head[1] & 0x7f)
	switch n {
	case 126:
		ext := make([]byte, 2)
		if _, err := io.ReadFull(r, ext); err != nil {
			return nil, err
		}
		head = append(head, ext...)
		n = uint64(binary.BigEndian.Uint16(ext))
	case 127:
		ext := make([]byte, 8)
		if _, err := io.ReadFull(r, ext); err != nil {
			return nil, err
		}
		head = append(head, ext...)
		n = binary.BigEndian.Uint64(ext)
	}
	if head[1]&0x80 != 0 {
		n += 4 // a mask, which a server does not send
	}
	if n > 64<<20 {
		return nil, errors.New("frame too large")
	}
	frame := make([]byte, len(head)+int(n))
	copy(frame, head)
	if _, err := io.ReadFull(r, frame[len(head):]); err != nil {
		return nil, err
	}
	return frame, nil
}

// closeWith sends the browser a close frame of code between two frames,
// lets websockify go, and waits for the browser's side of the close.
func (sp *splice) closeWith(code uint16, reason string) {
	frame := []byte{0x88, byte(2 + len(reason)), byte(code >> 8), byte(code)}
	frame = append(frame, reason...)
	sp.wmu.Lock()
	sp.closing.Store(true)
	sp.browser.Write(frame)
	sp.wmu.Unlock()
	sp.up.Close()
	// The browser answers with its close frame and closes: the copy of its
	// bytes ends then, and cuts the rest.
	if tc, ok := sp.browser.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	sp.browser.SetReadDeadline(time.Now().Add(10 * time.Second))
}

// cut closes both ends, with no close frame.
func (sp *splice) cut() {
	sp.once.Do(func() {
		sp.browser.Close()
		sp.up.Close()
	})
}

// copyOnDesktop puts the request's body on Xvnc's clipboard, as an
// application on the desktop copying it: an xclip that holds it until
// another owner (Xvnc, given the browser's text) takes it.
func (s *desktopSite) copyOnDesktop(w http.ResponseWriter, r *http.Request) {
	text, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cmd := exec.Command("xclip", "-display", s.display, "-selection", "clipboard", "-quiet")
	cmd.Stdin = strings.NewReader(string(text))
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopCopier()
	if err := cmd.Start(); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	s.copier = cmd
	go cmd.Wait()
	w.WriteHeader(http.StatusNoContent)
}

func (s *desktopSite) stopCopier() {
	if s.copier != nil {
		s.copier.Process.Kill()
		s.copier = nil
	}
}

// desktopClipboard answers the text on Xvnc's clipboard (as xclip -o
// reads it), or 409 when there is none.
func (s *desktopSite) desktopClipboard(w http.ResponseWriter, r *http.Request) {
	cmd := exec.CommandContext(r.Context(), "xclip", "-display", s.display, "-selection", "clipboard", "-o")
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		http.Error(w, fmt.Sprintf("xclip -o: %v", err), http.StatusConflict)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write(out)
}
