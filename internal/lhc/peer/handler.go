package peer

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
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/lhc"
	"github.com/usher-vdi/usher/internal/site"
)

// DefaultMaxBody bounds a handover's body: it lists a broker's machines
// and recent sessions. maxRequest bounds any other request's body.
const (
	DefaultMaxBody = 16 << 20
	maxRequest     = 64 << 10
)

// Local is what the receiver of peer requests brokers with: its broker,
// and its Local Host Cache.
type Local interface {
	Launch(ctx context.Context, req broker.LaunchRequest) (*broker.Launch, error)
	Reconnect(ctx context.Context, user, id, clientName string) (*broker.Launch, error)
	Logoff(ctx context.Context, user, id string) error
	Disconnect(ctx context.Context, user, id string) error
	UserSessions(ctx context.Context, user string) ([]site.Session, error)
	DisplayTarget(ctx context.Context, user, id string) (broker.Control, error)
}

// Cache is the receiver's Local Host Cache (an *lhc.Store).
type Cache interface {
	InOutage() bool
	// Learn takes another broker's handover (lhc.Store.Learn).
	Learn(ctx context.Context, h lhc.Handover) error
}

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	// Name is this broker's, as the site's broker registry has it: a
	// token for another broker is refused.
	Name string
	// Key is the site's peer key (auth.Signer.Derive("peer")).
	Key    []byte
	Broker Local
	LHC    Cache
	Logger *slog.Logger
	// Now is the clock tokens are checked against (default time.Now).
	Now func() time.Time
	// MaxBody bounds a handover's body (default DefaultMaxBody).
	MaxBody int64
}

// Handler serves a broker's peers under Prefix.
type Handler struct {
	cfg    HandlerConfig
	key    Key
	tokens *Verifier
	log    *slog.Logger
}

// NewHandler returns the Handler of cfg.Name.
func NewHandler(cfg HandlerConfig) (*Handler, error) {
	key, err := NewKey(cfg.Key)
	if err != nil {
		return nil, err
	}
	if cfg.Name == "" || cfg.Broker == nil || cfg.LHC == nil {
		return nil, errors.New("peer handler: a name, a broker and a local host cache are needed")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	return &Handler{cfg: cfg, key: key, tokens: NewVerifier(key, cfg.Name, cfg.Now),
		log: cfg.Logger.With("component", "peer")}, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok || strings.Contains(op, "/") {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.refuse(w, http.StatusMethodNotAllowed, site.EInvalid, "peer operations are POSTs")
		return
	}
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	t, err := h.tokens.Check(token, op)
	if err != nil {
		h.refused(w, r, op, t, err)
		return
	}
	limit := int64(maxRequest)
	if op == OpLearn {
		limit = h.cfg.MaxBody
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			h.refuse(w, http.StatusRequestEntityTooLarge, site.EInvalid, fmt.Sprintf("peer request body is larger than %d bytes", tooBig.Limit))
			return
		}
		h.log.InfoContext(r.Context(), "peer request: read the body", "remote", remote(r), "from", t.From, "op", op, "err", err)
		h.refuse(w, http.StatusBadRequest, site.EInvalid, "peer request: the body was cut short")
		return
	}
	if err := h.tokens.Take(t, body); err != nil {
		h.refused(w, r, op, t, err)
		return
	}
	out, err := h.serve(broker.DelegatedContext(r.Context()), t, body)
	if err != nil {
		code := site.ErrorCode(err)
		if code == site.EInternal {
			h.log.ErrorContext(r.Context(), "peer request", "from", t.From, "op", op, "err", err)
		}
		var e errorBody
		e.Error.Code, e.Error.Message = code, site.ErrorMessage(err)
		h.answer(w, t, statusOf(code), e)
		return
	}
	if out == nil {
		h.answer(w, t, http.StatusNoContent, nil)
		return
	}
	h.answer(w, t, http.StatusOK, out)
}

// refused answers a request whose token was not taken.
func (h *Handler) refused(w http.ResponseWriter, r *http.Request, op string, t Token, err error) {
	// Logged with what the token claims, which may not be proven.
	h.log.WarnContext(r.Context(), "peer request refused", "remote", remote(r), "op", op, "claimed_from", t.From, "err", err)
	switch {
	case errors.Is(err, ErrBusy):
		w.Header().Set("Retry-After", "1")
		h.refuse(w, http.StatusServiceUnavailable, site.EUnavailable, "too many peer requests: retry")
		return
	case errors.Is(err, ErrOtherRun):
		w.Header().Set("Retry-After", "1")
		h.refuse(w, http.StatusServiceUnavailable, site.EUnavailable, "this broker restarted: ask its state again and retry")
		return
	}
	h.refuse(w, http.StatusUnauthorized, site.EUnauthorized, "peer request refused: "+err.Error())
}

// serve runs op; out nil answers 204.
func (h *Handler) serve(ctx context.Context, t Token, body []byte) (any, error) {
	op := t.Op
	switch op {
	case OpState:
		return State{Name: h.cfg.Name, Outage: h.cfg.LHC.InOutage(), Run: h.tokens.Run()}, nil
	case OpLearn:
		var req sealed
		if err := decode(body, &req); err != nil {
			return nil, err
		}
		hand, err := h.key.openHandover(t.From, h.cfg.Name, req)
		if err != nil {
			return nil, site.Errorf(site.EInvalid, "peer request: %v", err)
		}
		return nil, h.cfg.LHC.Learn(ctx, hand)
	case OpLaunch, OpReconnect, OpLogoff, OpDisconnect, OpSessions, OpDisplay:
	default:
		return nil, site.Errorf(site.ENotFound, "no peer operation %q", op)
	}
	var req Request
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if req.User == "" {
		return nil, site.Errorf(site.EInvalid, "peer request: no user")
	}
	b := h.cfg.Broker
	switch op {
	case OpLaunch:
		return launched(b.Launch(ctx, broker.LaunchRequest{User: req.User, Resource: req.Resource,
			ClientName: req.ClientName, ClientAddress: req.ClientAddress}))
	case OpReconnect:
		return launched(b.Reconnect(ctx, req.User, req.SessionID, req.ClientName))
	case OpLogoff:
		return nil, b.Logoff(ctx, req.User, req.SessionID)
	case OpDisconnect:
		return nil, b.Disconnect(ctx, req.User, req.SessionID)
	case OpDisplay:
		c, err := b.DisplayTarget(ctx, req.User, req.SessionID)
		if err != nil {
			return nil, err
		}
		return Display{Machine: c.Machine, URL: c.URL, Pin: c.Pin}, nil
	default: // OpSessions
		list, err := b.UserSessions(ctx, req.User)
		if err != nil {
			return nil, err
		}
		return Sessions{Sessions: list}, nil
	}
}

func launched(l *broker.Launch, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return Launch{Session: l.Session, Address: l.Address, Protocol: l.Protocol, Ticket: l.Ticket,
		ExpiresAt: l.ExpiresAt, Reconnected: l.Reconnected}, nil
}

func decode(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return site.Errorf(site.EInvalid, "peer request: %v", err)
	}
	return nil
}

// answer writes the answer to the request of t, with this broker's proof.
func (h *Handler) answer(w http.ResponseWriter, t Token, status int, v any) {
	var body []byte
	if v != nil {
		var err error
		if body, err = json.Marshal(v); err != nil {
			h.log.Error("peer answer", "op", t.Op, "err", err)
			status, body = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"internal error"}}`)
		}
	}
	n := nonce(16)
	w.Header().Set(HeaderNonce, n)
	w.Header().Set(HeaderProof, h.key.answerProof(h.cfg.Name, t, n, status, body))
	if body != nil {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	w.Write(body)
}

// refuse answers a request whose token was not taken: without a proof,
// which the caller takes for a refusal whatever it says.
func (h *Handler) refuse(w http.ResponseWriter, status int, code, msg string) {
	var e errorBody
	e.Error.Code, e.Error.Message = code, msg
	body, _ := json.Marshal(e)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

func statusOf(code string) int {
	switch code {
	case site.EInvalid:
		return http.StatusBadRequest
	case site.ENotFound:
		return http.StatusNotFound
	case site.EConflict:
		return http.StatusConflict
	case site.EUnauthorized:
		return http.StatusUnauthorized
	case site.EForbidden:
		return http.StatusForbidden
	case site.EUnavailable, site.ESiteDBUnavailable, site.ENoCapacity, site.EOverloaded:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func remote(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
