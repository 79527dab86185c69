package vda

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/usher-vdi/usher/internal/vdaproto"
)

// DisplayStarter starts the displays of a machine's sessions. A machine
// with one (MachineConfig.Display) starts each new session's display when
// the broker prepares the session, before the user's client arrives, and
// serves it to the session's ticket at vdaproto.PathDisplay.
// StartDisplay may be called concurrently, for different sessions.
type DisplayStarter interface {
	// StartDisplay starts s's display and returns it once it accepts
	// connections. An error refuses the session: the control endpoint
	// answers 500 and the broker tries another machine. ctx bounds the
	// start, not the display's life.
	StartDisplay(ctx context.Context, s Session) (Display, error)
}

// Display is one session's running display.
type Display interface {
	// Name is the display's name for the session's programs, the value of
	// DISPLAY (":12").
	Name() string
	// Environ is what a program needs in its environment to reach the
	// display ("DISPLAY=:12", "XAUTHORITY=...").
	Environ() []string
	// Dial connects to the display's RFB stream; it fails once the
	// display stopped.
	Dial(ctx context.Context) (net.Conn, error)
	// Done is closed when the display stopped, by Stop or on its own;
	// Err then says why it stopped on its own (nil after Stop).
	Done() <-chan struct{}
	Err() error
	// Stop ends the display and what runs on it and frees what it holds,
	// waiting for that (bounded; sooner when ctx is done). It is called
	// also after Done, and may be called more than once.
	Stop(ctx context.Context) error
}

const (
	// DefaultDisplayPingInterval is how often the agent pings a viewer's
	// WebSocket: middleboxes cut idle ones, and a viewer that stopped
	// answering is gone.
	DefaultDisplayPingInterval = 20 * time.Second
	// MaxDisplayMessage bounds one WebSocket message from a viewer.
	MaxDisplayMessage = 1 << 20
	// displayBuffer is the buffer of each direction of a splice.
	displayBuffer = 64 << 10
	// displayGoneWait is how long the splice of a display that closed its
	// stream waits to hear whether the display stopped.
	displayGoneWait = 2 * time.Second
	// maxClientName bounds the client_name of a display request.
	maxClientName = 256
)

// Reasons of the agent's close frames, sentences for the user.
const (
	reasonTakenOver    = "The session was opened in another window."
	reasonLoggedOff    = "The session was logged off."
	reasonDisconnected = "The session was disconnected."
	reasonDisplayGone  = "The session's display stopped."
	reasonAgentStopped = "The session host's agent stopped."
	reasonStreamClosed = "The session's display closed the connection."
	reasonBinaryOnly   = "The display takes binary messages only."
)

// viewer is the WebSocket of a session's client. end asks its splice to
// close it; the first end wins.
type viewer struct {
	ws     *websocket.Conn
	once   sync.Once
	ended  chan struct{}
	code   websocket.StatusCode // 0: the client is gone, no close frame
	reason string
	done   chan struct{} // closed when the splice returned
}

func (v *viewer) end(code websocket.StatusCode, reason string) {
	v.once.Do(func() {
		v.code, v.reason = code, reason
		close(v.ended)
	})
}

// takeViewer detaches the session's viewer, for the caller to end. m.mu
// must be held.
func (s *session) takeViewer() *viewer {
	v := s.view
	s.view = nil
	return v
}

// startDisplay starts the display of a new session and records it in s.
func (m *Machine) startDisplay(ctx context.Context, s *Session) (Display, error) {
	if m.cfg.Display == nil {
		return nil, nil
	}
	d, err := m.cfg.Display.StartDisplay(ctx, *s)
	if err != nil {
		m.log.WarnContext(ctx, "could not start the session's display; refusing the session", keySession, s.ID, keyUser, s.User, keyErr, err)
		return nil, errorf(http.StatusInternalServerError, codeInternal, "the machine could not start the session's display")
	}
	s.Display, s.DisplayEnv = d.Name(), d.Environ()
	m.log.Log(ctx, m.chatter, "display started", keySession, s.ID, keyDisplay, s.Display)
	return d, nil
}

// watchDisplay reports the session ended when its display stops on its
// own: the viewer is closed with CloseDisplayFailed and the broker hears
// of a logoff. A display that stops because its session ended (release)
// is no longer the session's, and is not reported.
func (m *Machine) watchDisplay(id string, d Display) {
	if d == nil {
		return
	}
	go func() {
		<-d.Done()
		m.mu.Lock()
		s := m.sessions[id]
		if s == nil || s.display != d {
			m.mu.Unlock()
			return
		}
		delete(m.sessions, id)
		m.queue(id, vdaproto.EventLogoff, "")
		s.display = nil
		v := s.takeViewer()
		m.mu.Unlock()
		m.save()
		m.log.Warn("the session's display stopped on its own; the session ended", keySession, id, keyUser, s.User, keyDisplay, s.Display, keyErr, d.Err())
		if v != nil {
			v.end(vdaproto.CloseDisplayFailed, reasonDisplayGone)
		}
		ctx := context.Background()
		d.Stop(ctx)
		if m.cfg.Hook != nil {
			if err := m.cfg.Hook.Session(ctx, HookLogoff, s.Session); err != nil {
				m.log.Warn("session command failed", keySession, id, keyEvent, HookLogoff, keyErr, err)
			}
		}
	}()
}

// release closes the viewer of a session that ended (no longer in
// m.sessions) with code and stops its display.
func (m *Machine) release(ctx context.Context, s *session, code websocket.StatusCode, reason string) {
	m.mu.Lock()
	v, d := s.takeViewer(), s.display
	s.display = nil
	m.mu.Unlock()
	if v != nil {
		v.end(code, reason)
	}
	if d != nil {
		if err := d.Stop(ctx); err != nil {
			m.log.WarnContext(ctx, "stop the session's display", keySession, s.ID, keyErr, err)
		}
	}
}

// stopDisplays ends every session that has a display, as the agent
// stops: its display would not outlive the agent. The broker hears of
// the logoffs at the next registration, or finds the sessions gone.
func (m *Machine) stopDisplays(ctx context.Context) {
	m.mu.Lock()
	var ended []*session
	for id, s := range m.sessions {
		if s.display != nil {
			delete(m.sessions, id)
			m.queue(id, vdaproto.EventLogoff, "")
			ended = append(ended, s)
		}
	}
	m.mu.Unlock()
	if len(ended) == 0 {
		return
	}
	m.save()
	var wg sync.WaitGroup
	for _, s := range ended {
		wg.Go(func() {
			m.mu.Lock()
			v := s.view
			m.mu.Unlock()
			m.release(ctx, s, vdaproto.CloseDisplayFailed, reasonAgentStopped)
			if v != nil {
				<-v.done
			}
		})
	}
	wg.Wait()
	m.log.InfoContext(ctx, "the agent stopped; its sessions' displays with it", "sessions", len(ended))
}

// dropRestored forgets the sessions of the state file when the machine
// runs displays: their displays did not outlive the agent that started
// them. The broker hears of the logoffs.
func (m *Machine) dropRestored() {
	m.mu.Lock()
	n := len(m.sessions)
	for id := range m.sessions {
		delete(m.sessions, id)
		m.queue(id, vdaproto.EventLogoff, "")
	}
	m.mu.Unlock()
	if n > 0 {
		m.save()
		m.log.Warn("the sessions of the state file ended with the agent that ran their displays", "sessions", n)
	}
}

// serveDisplay serves GET PathDisplay: the session's display as a
// WebSocket, to the session's ticket.
func (m *Machine) serveDisplay(w http.ResponseWriter, r *http.Request) {
	if m.cfg.Display == nil {
		writeError(w, errorf(http.StatusNotFound, codeNotFound, "this machine runs no displays"))
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, errorf(http.StatusMethodNotAllowed, codeInvalid, "%s wants GET and a WebSocket upgrade", vdaproto.PathDisplay))
		return
	}
	protocols := r.Header.Values("Sec-WebSocket-Protocol")
	var err error
	switch {
	case !headerHas(r.Header, "Connection", "upgrade") || !headerHas(r.Header, "Upgrade", "websocket") ||
		r.Header.Get("Sec-WebSocket-Version") != "13" || r.Header.Get("Sec-WebSocket-Key") == "":
		w.Header().Set("Upgrade", "websocket")
		err = errorf(http.StatusUpgradeRequired, codeInvalid, "%s is a WebSocket (version 13)", vdaproto.PathDisplay)
	case m.originRefused(r.Header.Get("Origin")):
		err = errorf(http.StatusForbidden, codeForbidden, "the page's origin may not open this machine's displays")
	case vdaproto.TicketFromSubprotocols(protocols) == "":
		err = errorf(http.StatusUnauthorized, codeUnauthorized, "the session's ticket is required, as the WebSocket subprotocol %sTICKET", vdaproto.TicketSubprotocolPrefix)
	case !headerHas(r.Header, "Sec-WebSocket-Protocol", vdaproto.DisplaySubprotocol):
		err = errorf(http.StatusBadRequest, codeInvalid, "offer the WebSocket subprotocol %q", vdaproto.DisplaySubprotocol)
	case len(r.URL.Query().Get(vdaproto.DisplayClientParam)) > maxClientName:
		err = errorf(http.StatusBadRequest, codeInvalid, "%s is longer than %d bytes", vdaproto.DisplayClientParam, maxClientName)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	ctx := context.WithoutCancel(r.Context())
	resp, err := m.connectHash(ctx, vdaproto.TicketHash(vdaproto.TicketFromSubprotocols(protocols)), r.URL.Query().Get(vdaproto.DisplayClientParam))
	if err != nil {
		writeError(w, err)
		return
	}
	id := resp.SessionID
	m.mu.Lock()
	var d Display
	if s := m.sessions[id]; s != nil {
		d = s.display
	}
	m.mu.Unlock()
	var conn net.Conn
	if d != nil {
		conn, err = d.Dial(ctx)
	}
	if d == nil || err != nil {
		m.log.WarnContext(ctx, "the session's display cannot be reached; the session ended", keySession, id, keyErr, err)
		m.end(ctx, id, "its display cannot be reached")
		writeError(w, errorf(http.StatusInternalServerError, codeInternal, "the session's display cannot be reached"))
		return
	}
	// The control server's timeouts are for requests, not for a display
	// that stays open for hours: the splice pings instead.
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{})
	rc.SetWriteDeadline(time.Time{})
	// The origin is checked above, against DisplayOrigins alone.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{vdaproto.DisplaySubprotocol}, InsecureSkipVerify: true})
	if err != nil {
		conn.Close()
		m.log.WarnContext(ctx, "display upgrade failed", keySession, id, keyErr, err)
		m.viewerGone(ctx, id, nil)
		return
	}
	ws.SetReadLimit(MaxDisplayMessage)
	v := &viewer{ws: ws, ended: make(chan struct{}), done: make(chan struct{})}
	defer close(v.done)
	m.mu.Lock()
	s := m.sessions[id]
	var old *viewer
	var idle time.Duration
	if s != nil && s.display == d {
		old, s.view, idle = s.view, v, s.idle
	}
	m.mu.Unlock()
	if s == nil || s.display != d {
		conn.Close()
		ws.Close(vdaproto.CloseSessionEnded, reasonLoggedOff)
		return
	}
	if old != nil {
		old.end(vdaproto.CloseTakenOver, reasonTakenOver)
	}
	m.splice(d, v, conn, idle)
	m.viewerGone(ctx, id, v)
}

// viewerGone reports a disconnect when v was the session's viewer (nil:
// the session has no viewer) and the session is still active: the client
// went away. A viewer the agent ended (taken over, disconnected, logged
// off) is no longer the session's, and a session whose display stopped
// is ending (watchDisplay reports its logoff, which may not have taken
// the session yet: both wake at the display's Done).
func (m *Machine) viewerGone(ctx context.Context, id string, v *viewer) {
	m.mu.Lock()
	s := m.sessions[id]
	changed := s != nil && s.view == v && s.State == StateActive && !stopped(s.display)
	if changed {
		s.view = nil
		s.State, s.Since = StateDisconnected, m.now()
		m.queue(id, vdaproto.EventDisconnect, "")
	}
	m.mu.Unlock()
	if changed {
		m.save()
		m.log.Log(ctx, m.chatter, "the client left; session disconnected", keySession, id)
	}
}

// stopped reports whether d is a display that has stopped.
func stopped(d Display) bool {
	if d == nil {
		return false
	}
	select {
	case <-d.Done():
		return true
	default:
		return false
	}
}

// splice copies binary WebSocket messages from v to conn and what conn
// sends to v, each through one buffer, until one side ends or v is ended;
// it pings v meanwhile. With idle set, it ends v with CloseDisconnected
// once v sent no message (input) for idle: viewerGone then reports the
// disconnect. It closes both and returns when all is done.
func (m *Machine) splice(d Display, v *viewer, conn net.Conn, idle time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var lastInput atomic.Int64 // UnixNano of the viewer's last message
	lastInput.Store(time.Now().UnixNano())
	if idle > 0 {
		wg.Go(func() {
			t := time.NewTimer(idle)
			defer t.Stop()
			for {
				select {
				case <-v.ended:
					return
				case <-t.C:
				}
				since := time.Since(time.Unix(0, lastInput.Load()))
				if since >= idle {
					v.end(vdaproto.CloseDisconnected, idleReason(idle))
					return
				}
				t.Reset(idle - since)
			}
		})
	}
	wg.Go(func() { // viewer to display
		buf := make([]byte, displayBuffer)
		for {
			typ, r, err := v.ws.Reader(ctx)
			lastInput.Store(time.Now().UnixNano())
			if err != nil {
				v.end(0, "")
				return
			}
			if typ != websocket.MessageBinary {
				v.end(websocket.StatusUnsupportedData, reasonBinaryOnly)
				return
			}
			for {
				n, err := r.Read(buf)
				if n > 0 {
					if _, werr := conn.Write(buf[:n]); werr != nil {
						m.streamClosed(d, v)
						return
					}
				}
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					v.end(0, "")
					return
				}
			}
		}
	})
	wg.Go(func() { // display to viewer
		buf := make([]byte, displayBuffer)
		for {
			n, err := conn.Read(buf)
			if n > 0 {
				if werr := v.ws.Write(ctx, websocket.MessageBinary, buf[:n]); werr != nil {
					v.end(0, "")
					return
				}
			}
			if err != nil {
				m.streamClosed(d, v)
				return
			}
		}
	})
	wg.Go(func() {
		t := time.NewTicker(m.cfg.DisplayPingInterval)
		defer t.Stop()
		for {
			select {
			case <-v.ended:
				return
			case <-t.C:
			}
			pctx, pcancel := context.WithTimeout(ctx, m.cfg.DisplayPingInterval)
			err := v.ws.Ping(pctx)
			pcancel()
			if err != nil {
				v.end(0, "")
				return
			}
		}
	})
	<-v.ended
	if v.code == 0 {
		v.ws.CloseNow()
	} else {
		v.ws.Close(v.code, v.reason)
	}
	conn.Close()
	cancel()
	wg.Wait()
}

// idleReason is the close reason of a viewer ended by the idle timer.
func idleReason(idle time.Duration) string {
	if idle%time.Minute == 0 {
		if n := int64(idle / time.Minute); n != 1 {
			return fmt.Sprintf("The session was disconnected after %d minutes without input.", n)
		}
		return "The session was disconnected after 1 minute without input."
	}
	return fmt.Sprintf("The session was disconnected after %s without input.", idle)
}

// streamClosed ends a viewer whose display closed its stream: with
// CloseDisplayFailed when the display stopped (the session ends:
// watchDisplay), else as a stream cut, which a reconnection mends.
func (m *Machine) streamClosed(d Display, v *viewer) {
	t := time.NewTimer(displayGoneWait)
	defer t.Stop()
	select {
	case <-d.Done():
		v.end(vdaproto.CloseDisplayFailed, reasonDisplayGone)
	case <-v.ended:
	case <-t.C:
		v.end(websocket.StatusInternalError, reasonStreamClosed)
	}
}

// originRefused reports whether a browser page of origin may not open
// the machine's displays: a request without Origin (usher's gateway, a
// client that is no browser) is not refused, the ticket is its
// credential; a page's origin must match one of DisplayOrigins.
func (m *Machine) originRefused(origin string) bool {
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return true
	}
	for _, p := range m.cfg.DisplayOrigins {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(target)); ok {
			return false
		}
	}
	return true
}

// headerHas reports whether the comma-separated values of header key
// hold token, in any case.
func headerHas(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
