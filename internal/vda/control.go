package vda

import (
	"context"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/vdaproto"
)

// Error codes of the control endpoint, the site's application error codes.
const (
	codeInvalid      = "invalid"
	codeNotFound     = "not_found"
	codeConflict     = "conflict"
	codeUnauthorized = "unauthorized"
	codeForbidden    = "forbidden"
	codeNoCapacity   = "no_capacity"
	codeInternal     = "internal"
)

// controlError is an error answer of the control endpoint. Its message
// goes to the caller, so it names nothing secret.
type controlError struct {
	status    int
	code, msg string
}

func (e *controlError) Error() string { return e.code + ": " + e.msg }

func errorf(status int, code, format string, args ...any) *controlError {
	return &controlError{status, code, fmt.Sprintf(format, args...)}
}

// Handler returns the machine's control endpoint, to be served at its
// ControlURL: POST /prepare, /logoff and /disconnect for the broker, with
// the machine's control token as a bearer token, and POST /connect for
// clients presenting a ticket. A machine that runs displays serves them
// at GET /display, a WebSocket opened with the session's ticket.
func (m *Machine) Handler() http.Handler { return http.HandlerFunc(m.serveControl) }

func (m *Machine) serveControl(w http.ResponseWriter, r *http.Request) {
	op := r.URL.Path
	switch op {
	case vdaproto.PathDisplay:
		m.serveDisplay(w, r)
		return
	case vdaproto.PathPrepare, vdaproto.PathLogoff, vdaproto.PathDisconnect, vdaproto.PathConnect:
	default:
		writeError(w, errorf(http.StatusNotFound, codeNotFound, "no such control operation: %s", op))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, errorf(http.StatusMethodNotAllowed, codeInvalid, "%s wants POST", op))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxControlBody)
	var err error
	switch op {
	case vdaproto.PathConnect:
		var req vdaproto.ConnectRequest
		if err = decodeStrict(r, &req); err == nil {
			var resp vdaproto.ConnectResponse
			if resp, err = m.connect(r.Context(), req); err == nil {
				writeJSON(w, http.StatusOK, resp)
				return
			}
		}
	case vdaproto.PathPrepare:
		var req vdaproto.PrepareRequest
		if err = m.authorize(r); err == nil {
			if err = decodeStrict(r, &req); err == nil {
				err = m.prepare(r.Context(), req)
			}
		}
	default:
		var req vdaproto.SessionRequest
		if err = m.authorize(r); err == nil {
			if err = decodeStrict(r, &req); err == nil && req.SessionID == "" {
				err = errorf(http.StatusBadRequest, codeInvalid, "session_id is required")
			}
			if err == nil && op == vdaproto.PathLogoff {
				err = m.logoff(r.Context(), req.SessionID)
			} else if err == nil {
				err = m.disconnect(r.Context(), req.SessionID)
			}
		}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// authorize checks the broker's bearer token in constant time.
func (m *Machine) authorize(r *http.Request) error {
	auth := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(tok), []byte(m.token)) != 1 {
		return errorf(http.StatusUnauthorized, codeUnauthorized, "a valid control token is required")
	}
	return nil
}

// prepare records a session the broker placed here, or a new ticket for a
// session the user returns to. A new session's display starts, then the
// session goes through the hook.
func (m *Machine) prepare(ctx context.Context, req vdaproto.PrepareRequest) error {
	if err := validPrepare(req); err != nil {
		return err
	}
	m.mu.Lock()
	old := m.sessions[req.SessionID]
	switch {
	case old == nil && req.Reconnect:
		m.mu.Unlock()
		return errorf(http.StatusNotFound, codeNotFound, "no session %q to reconnect to", req.SessionID)
	case old == nil && m.cfg.MaxSessions > 0 && len(m.sessions) >= m.cfg.MaxSessions:
		m.mu.Unlock()
		return errorf(http.StatusServiceUnavailable, codeNoCapacity, "the machine has its %d sessions", m.cfg.MaxSessions)
	case old != nil && old.User != req.User:
		m.mu.Unlock()
		return errorf(http.StatusConflict, codeConflict, "session %q belongs to another user", req.SessionID)
	}
	m.mu.Unlock()

	now := m.now()
	s := Session{ID: req.SessionID, User: req.User, Resource: req.Resource, CommandLine: req.CommandLine, State: StatePending, Since: now}
	var disp Display
	if old == nil {
		var err error
		if disp, err = m.startDisplay(ctx, &s); err != nil {
			return err
		}
	}
	if old == nil && m.cfg.Hook != nil {
		if err := m.cfg.Hook.Session(ctx, HookPrepare, s); err != nil {
			m.log.WarnContext(ctx, "session command failed; refusing the session", keySession, s.ID, keyEvent, HookPrepare, keyErr, err)
			if disp != nil {
				disp.Stop(ctx)
			}
			return errorf(http.StatusInternalServerError, codeInternal, "the machine could not prepare the session")
		}
	}

	m.mu.Lock()
	cur := m.sessions[req.SessionID]
	if cur == nil {
		cur = &session{Session: s, display: disp}
		m.sessions[s.ID] = cur
		m.watchDisplay(s.ID, disp)
		disp = nil
	} else if t := m.tickets[cur.ticket]; t != nil && !t.used {
		t.superseded = true
	}
	cur.ticket = req.TicketHash
	cur.idle = time.Duration(max(req.IdleDisconnectMS, 0)) * time.Millisecond
	m.tickets[req.TicketHash] = &ticket{session: s.ID, expires: req.ExpiresAt}
	state := cur.State
	m.mu.Unlock()
	if disp != nil { // a concurrent prepare of the session won, with its own
		disp.Stop(ctx)
	}
	m.save()

	m.log.DebugContext(ctx, "session prepared", keySession, s.ID, keyUser, s.User, "state", state, "reconnect", req.Reconnect)
	if m.obs != nil {
		m.obs.prepared(m, s.ID, req.TicketHash, req.ExpiresAt)
	}
	return nil
}

func validPrepare(req vdaproto.PrepareRequest) error {
	switch {
	case req.SessionID == "" || len(req.SessionID) > 256:
		return errorf(http.StatusBadRequest, codeInvalid, "session_id is required, at most 256 bytes")
	case req.User == "":
		return errorf(http.StatusBadRequest, codeInvalid, "user is required")
	case req.ExpiresAt.IsZero():
		return errorf(http.StatusBadRequest, codeInvalid, "expires_at is required")
	}
	if b, err := hex.DecodeString(req.TicketHash); err != nil || len(b) != 32 {
		return errorf(http.StatusBadRequest, codeInvalid, "ticket_hash must be a hex SHA-256")
	}
	return nil
}

// connect spends a ticket a client presents: the session turns active and
// the broker hears of the logon or reconnection.
func (m *Machine) connect(ctx context.Context, req vdaproto.ConnectRequest) (vdaproto.ConnectResponse, error) {
	if req.Ticket == "" {
		return vdaproto.ConnectResponse{}, errorf(http.StatusBadRequest, codeInvalid, "ticket is required")
	}
	return m.connectHash(ctx, vdaproto.TicketHash(req.Ticket), req.ClientName)
}

// connectHash is connect for a ticket known by its hash. The simulator's
// clients, which never see tickets, come in here.
func (m *Machine) connectHash(ctx context.Context, hash, client string) (vdaproto.ConnectResponse, error) {
	now := m.now()
	m.mu.Lock()
	t := m.tickets[hash]
	var s *session
	if t != nil {
		s = m.sessions[t.session]
	}
	var err error
	switch {
	case t == nil:
		err = errorf(http.StatusUnauthorized, codeUnauthorized, "unknown ticket")
	case t.used:
		err = errorf(http.StatusUnauthorized, codeUnauthorized, "ticket already used")
	case !now.Before(t.expires):
		err = errorf(http.StatusUnauthorized, codeUnauthorized, "ticket expired")
	case t.superseded:
		err = errorf(http.StatusUnauthorized, codeUnauthorized, "ticket replaced by a newer launch")
	case s == nil:
		err = errorf(http.StatusUnauthorized, codeUnauthorized, "the session of this ticket has ended")
	}
	if err != nil {
		m.mu.Unlock()
		return vdaproto.ConnectResponse{}, err
	}
	t.used = true
	logon := s.State == StatePending
	event := vdaproto.EventReconnect
	if logon {
		event = vdaproto.EventLogon
	}
	s.State, s.ClientName, s.Since = StateActive, client, now
	m.queue(s.ID, event, client)
	resp := vdaproto.ConnectResponse{SessionID: s.ID, User: s.User, Resource: s.Resource}
	m.mu.Unlock()
	m.save()

	m.log.Log(ctx, m.chatter, "client connected", keySession, resp.SessionID, keyUser, resp.User, keyEvent, event)
	if m.obs != nil {
		m.obs.connected(m, resp.SessionID, logon)
	}
	return resp, nil
}

// logoff ends a session at the broker's request.
func (m *Machine) logoff(ctx context.Context, id string) error {
	m.mu.Lock()
	s := m.sessions[id]
	m.mu.Unlock()
	if s == nil {
		return errorf(http.StatusNotFound, codeNotFound, "no session %q", id)
	}
	if m.cfg.Hook != nil {
		if err := m.cfg.Hook.Session(ctx, HookLogoff, s.Session); err != nil {
			m.log.WarnContext(ctx, "session command failed", keySession, id, keyEvent, HookLogoff, keyErr, err)
			return errorf(http.StatusInternalServerError, codeInternal, "the machine could not log the session off")
		}
	}
	m.end(ctx, id, "logged off by the broker")
	return nil
}

// end forgets a session and tells the broker it logged off; it does nothing
// for a session already gone.
func (m *Machine) end(ctx context.Context, id, why string) {
	m.mu.Lock()
	s, ok := m.sessions[id]
	if ok {
		delete(m.sessions, id)
		m.queue(id, vdaproto.EventLogoff, "")
	}
	m.mu.Unlock()
	if ok {
		m.save()
		m.log.Log(ctx, m.chatter, "session ended: "+why, keySession, id, keyUser, s.User)
		m.release(ctx, s, vdaproto.CloseSessionEnded, reasonLoggedOff)
	}
}

// disconnect disconnects an active session at the broker's request; a
// session already disconnected stays so.
func (m *Machine) disconnect(ctx context.Context, id string) error {
	m.mu.Lock()
	s := m.sessions[id]
	var snap Session
	if s != nil {
		snap = s.Session
	}
	m.mu.Unlock()
	switch {
	case s == nil:
		return errorf(http.StatusNotFound, codeNotFound, "no session %q", id)
	case snap.State == StateDisconnected:
		return nil
	case snap.State == StatePending:
		return errorf(http.StatusConflict, codeConflict, "session %q has no client yet", id)
	}
	if m.cfg.Hook != nil {
		if err := m.cfg.Hook.Session(ctx, HookDisconnect, snap); err != nil {
			m.log.WarnContext(ctx, "session command failed", keySession, id, keyEvent, HookDisconnect, keyErr, err)
			return errorf(http.StatusInternalServerError, codeInternal, "the machine could not disconnect the session")
		}
	}
	m.mu.Lock()
	changed := false
	var v *viewer
	if s := m.sessions[id]; s != nil && s.State == StateActive {
		s.State, s.Since = StateDisconnected, m.now()
		m.queue(id, vdaproto.EventDisconnect, "")
		changed = true
		v = s.takeViewer()
	}
	m.mu.Unlock()
	if v != nil {
		v.end(vdaproto.CloseDisconnected, reasonDisconnected)
	}
	if changed {
		m.save()
		m.log.Log(ctx, m.chatter, "session disconnected", keySession, id)
	}
	return nil
}

// decodeStrict reads exactly one JSON object into v, refusing unknown
// fields, trailing data and other content types.
func decodeStrict(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return errorf(http.StatusUnsupportedMediaType, codeInvalid, "request body must be application/json")
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var tooBig *http.MaxBytesError
	if err == nil {
		if _, err2 := dec.Token(); errors.As(err2, &tooBig) {
			err = err2
		} else if !errors.Is(err2, io.EOF) {
			err = errors.New("data after the JSON value")
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.As(err, &tooBig):
		return errorf(http.StatusRequestEntityTooLarge, codeInvalid, "request body is larger than %d bytes", tooBig.Limit)
	case errors.Is(err, io.EOF):
		return errorf(http.StatusBadRequest, codeInvalid, "request body is empty")
	}
	return errorf(http.StatusBadRequest, codeInvalid, "request body: %s", strings.TrimPrefix(err.Error(), "json: "))
}

func writeError(w http.ResponseWriter, err error) {
	ce, ok := err.(*controlError)
	if !ok {
		ce = errorf(http.StatusInternalServerError, codeInternal, "internal error")
	}
	if ce.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="usher-vda"`)
	}
	var body vdaproto.ErrorBody
	body.Error.Code, body.Error.Message = ce.code, ce.msg
	writeJSON(w, ce.status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// ServeControl serves h on ln until ctx is done, then shuts the server down
// gracefully (for up to five seconds) and returns nil. It returns the
// server's error if serving fails.
func ServeControl(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	if log == nil {
		log = discard
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    16 << 10,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("control server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	<-errc
	return nil
}
