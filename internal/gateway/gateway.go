package gateway

import (
	"cmp"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// Defaults for Config.
const (
	DefaultMaxSessions        = 1000
	DefaultMaxSessionsPerUser = 8
	// DefaultMaxMessageBytes bounds one message either way. Memory does
	// not grow with it: a message larger than the copy buffer is streamed.
	DefaultMaxMessageBytes = 4 << 20
	// DefaultPingInterval: middleboxes cut WebSockets idle for longer.
	DefaultPingInterval = 20 * time.Second
	DefaultPingTimeout  = 15 * time.Second
	DefaultDialTimeout  = 10 * time.Second
)

// Pattern is the route of the display, as net/http patterns spell it.
const Pattern = "GET /api/v1/sessions/{id}/display"

// Path returns the gateway's path of a session's display.
func Path(sessionID string) string {
	return "/api/v1/sessions/" + url.PathEscape(sessionID) + "/display"
}

// Target is where a session's display is served: its machine's agent, at
// the control URL it registered, with the fingerprint of the one
// certificate its listener may show (Pin; "" verifies the URL's host
// against Config.CAs).
type Target struct {
	Machine, URL, Pin string
}

// Resolver finds the agent of a user's session from the site's state.
type Resolver interface {
	// Resolve returns the Target of the user's live session. Errors: an
	// ENotFound site error for a session that is not the user's, has
	// ended or does not exist, alike; any other when the session's machine
	// cannot be told now (EUnavailable: not registered, the site DB down).
	Resolve(ctx context.Context, user, sessionID string) (Target, error)
}

// DisplayTargets is what a site's broker (*broker.Broker) resolves
// displays with.
type DisplayTargets interface {
	DisplayTarget(ctx context.Context, user, sessionID string) (broker.Control, error)
}

// FromBroker is the Resolver of a site's broker.
func FromBroker(b DisplayTargets) Resolver { return brokerResolver{b} }

type brokerResolver struct{ b DisplayTargets }

func (r brokerResolver) Resolve(ctx context.Context, user, id string) (Target, error) {
	c, err := r.b.DisplayTarget(ctx, user, id)
	return Target{Machine: c.Machine, URL: c.URL, Pin: c.Pin}, err
}

var _ DisplayTargets = (*broker.Broker)(nil)

// Config configures a Gateway.
type Config struct {
	// Authenticate returns the user a request is of: the portal's session
	// cookie or a user's bearer token, as the REST API takes them
	// (api.UserAuthenticator). An error refuses the request with 401,
	// or 503 for an EUnavailable one (the directory cannot say).
	Authenticate func(*http.Request) (string, error)
	// Resolver finds sessions' agents (FromBroker).
	Resolver Resolver
	// AllowedOrigins are the origins (scheme://host[:port]) besides the
	// request's own whose pages may open displays: the portal's public
	// name behind a proxy that ends TLS, say.
	AllowedOrigins []string
	// Direct hands browsers the agents' own URLs (DisplayURL) instead of
	// the gateway's path; the Gateway's handler then serves nothing.
	Direct bool
	// CAs verifies https control URLs registered without a pin; nil
	// means the system roots. A registered pin is verified alone.
	CAs *x509.CertPool
	// AllowPlain lets the gateway dial clear (http://) control URLs off
	// loopback (agents run with --insecure-listen): the ticket and the
	// display then cross the network in clear. Loopback is always
	// allowed.
	AllowPlain bool
	// MaxSessions and MaxSessionsPerUser bound the displays open at once
	// (defaults DefaultMaxSessions, DefaultMaxSessionsPerUser; negative:
	// no bound).
	MaxSessions, MaxSessionsPerUser int
	// MaxMessageBytes bounds one message either way (default
	// DefaultMaxMessageBytes); a larger one closes the display with 1009.
	MaxMessageBytes int64
	// PingInterval, PingTimeout and DialTimeout default to
	// DefaultPingInterval, DefaultPingTimeout and DefaultDialTimeout.
	PingInterval, PingTimeout, DialTimeout time.Duration
	// Registerer, when set, gets the gateway's metrics.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Gateway serves displays (an http.Handler of Pattern) and tells where a
// browser opens them (DisplayURL). Close ends the displays open.
type Gateway struct {
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux
	origins map[string]bool
	limits  *limiter
	metrics *metrics

	// ctx is cancelled by Close, which then waits for sessions.
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	open   sync.WaitGroup
}

// New returns a Gateway.
func New(cfg Config) (*Gateway, error) {
	if cfg.Resolver == nil || cfg.Authenticate == nil && !cfg.Direct {
		return nil, errors.New("gateway: Resolver and Authenticate are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.MaxSessions = cmp.Or(cfg.MaxSessions, DefaultMaxSessions)
	cfg.MaxSessionsPerUser = cmp.Or(cfg.MaxSessionsPerUser, DefaultMaxSessionsPerUser)
	cfg.MaxMessageBytes = cmp.Or(max(cfg.MaxMessageBytes, 0), DefaultMaxMessageBytes)
	cfg.PingInterval = cmp.Or(max(cfg.PingInterval, 0), DefaultPingInterval)
	cfg.PingTimeout = cmp.Or(max(cfg.PingTimeout, 0), DefaultPingTimeout)
	cfg.DialTimeout = cmp.Or(max(cfg.DialTimeout, 0), DefaultDialTimeout)
	origins := map[string]bool{}
	for _, o := range cfg.AllowedOrigins {
		norm, ok := origin(o)
		if !ok {
			return nil, fmt.Errorf("gateway: allowed origin %q: want scheme://host[:port]", o)
		}
		origins[norm] = true
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	g := &Gateway{cfg: cfg, log: cfg.Logger.With("component", "gateway"), mux: http.NewServeMux(), origins: origins,
		limits: newLimiter(cfg.MaxSessions, cfg.MaxSessionsPerUser), metrics: m}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.mux.HandleFunc(Pattern, g.serve)
	g.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		g.refuse(w, r, "", http.StatusNotFound, site.ENotFound, "no such display route: "+r.Method+" "+r.URL.Path)
	})
	return g, nil
}

// ServeHTTP serves Pattern.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.mux.ServeHTTP(w, r) }

// Close ends every display open (1001, going away, to both sides) and
// waits for them; later requests get 503.
func (g *Gateway) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.cancel()
	g.open.Wait()
}

// Displays counts the displays open (or being opened) now.
func (g *Gateway) Displays() int { return g.limits.count() }

// DisplayURL returns where a browser opens the display of the user's
// session: the gateway's Path, or in direct mode the agent's own
// WebSocket URL (wss://.../display), which a browser must reach and
// whose certificate it must trust. Errors are the Resolver's, and, in
// direct mode, a control URL the gateway would not dial.
func (g *Gateway) DisplayURL(ctx context.Context, user, sessionID string) (string, error) {
	if !g.cfg.Direct {
		return Path(sessionID), nil
	}
	t, err := g.cfg.Resolver.Resolve(ctx, user, sessionID)
	if err != nil {
		return "", err
	}
	u, err := g.agentURL(t)
	if err != nil {
		return "", err
	}
	return u.String(), nil
}

// Attribute keys of the gateway's logs.
const (
	keyUser    = "user"
	keySession = "session"
	keyMachine = "machine"
	keyRemote  = "remote"
)

// serve opens a display: the checks that answer HTTP errors, then the
// ones that answer through the WebSocket, then the splice.
func (g *Gateway) serve(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	g.mu.Lock()
	if g.closed || g.cfg.Direct {
		g.mu.Unlock()
		msg := "the gateway is shutting down: try again shortly"
		if g.cfg.Direct {
			msg = "displays are opened at their machines directly: use the launch's display_url"
		}
		g.refuse(w, r, "", http.StatusServiceUnavailable, site.EUnavailable, msg)
		return
	}
	g.open.Add(1)
	g.mu.Unlock()
	defer g.open.Done()

	if !isUpgrade(r) {
		g.refuse(w, r, "", http.StatusUpgradeRequired, site.EInvalid, "the display is a WebSocket: open it with the WebSocket upgrade")
		return
	}
	if !g.originAllowed(r) {
		g.refuse(w, r, "", http.StatusForbidden, site.EForbidden, "the display may only be opened from this site's own pages")
		return
	}
	user, err := g.cfg.Authenticate(r)
	if err != nil {
		if site.ErrorCode(err) == site.EUnavailable {
			g.refuse(w, r, "", http.StatusServiceUnavailable, site.EUnavailable, "the user cannot be checked now: try again shortly")
			return
		}
		g.refuse(w, r, "", http.StatusUnauthorized, site.EUnauthorized, "log on first: the display needs the portal's session or a user token")
		return
	}
	ticket := vdaproto.TicketFromSubprotocols(r.Header.Values("Sec-WebSocket-Protocol"))
	if ticket == "" {
		g.refuse(w, r, user, http.StatusUnauthorized, site.EUnauthorized,
			"no ticket: offer the WebSocket subprotocol "+vdaproto.TicketSubprotocolPrefix+"<ticket> with the launch's ticket")
		return
	}
	t, err := g.cfg.Resolver.Resolve(r.Context(), user, id)
	if site.ErrorCode(err) == site.ENotFound {
		g.refuse(w, r, user, http.StatusNotFound, site.ENotFound, "no such session")
		return
	}
	log := g.log.With(keyUser, user, keySession, id)
	if err != nil {
		log.WarnContext(r.Context(), "display: the session's machine cannot be told", "err", err)
		g.acceptAndClose(w, r, outcomeUnavailable, vdaproto.CloseAgentUnreachable, "the session's machine is not available now: try again shortly")
		return
	}
	log = log.With(keyMachine, t.Machine)
	release, err := g.limits.reserve(user)
	if err != nil {
		log.InfoContext(r.Context(), "display refused", "err", err)
		g.acceptAndClose(w, r, outcomeOverLimit, websocket.StatusTryAgainLater, err.Error())
		return
	}
	defer release()

	dctx, cancel := context.WithTimeout(r.Context(), g.cfg.DialTimeout)
	stop := context.AfterFunc(g.ctx, cancel)
	agent, err := g.dial(dctx, t, ticket)
	stop()
	cancel()
	if err != nil && g.ctx.Err() != nil {
		g.acceptAndClose(w, r, outcomeShutdown, websocket.StatusGoingAway, "the gateway is shutting down: open the session again")
		return
	}
	if err != nil {
		g.metrics.dialFailures.Inc()
		log.WarnContext(r.Context(), "display: the session's agent cannot be reached", "err", err)
		g.acceptAndClose(w, r, outcomeUnreachable, vdaproto.CloseAgentUnreachable, unreachableReason(err))
		return
	}
	browser, err := g.accept(w, r)
	if err != nil {
		agent.Close(websocket.StatusGoingAway, "the browser went away")
		g.metrics.sessions.WithLabelValues(outcomeLost).Inc()
		log.InfoContext(r.Context(), "display: the browser's upgrade failed", "err", err)
		return
	}
	g.splice(log, browser, agent)
}

// accept upgrades the browser's request. The Origin was checked already,
// against the configured origins too.
func (g *Gateway) accept(w http.ResponseWriter, r *http.Request) (*websocket.Conn, error) {
	// The HTTP server's deadlines (set for requests) would cut the
	// display: a hijacked connection keeps them.
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{})
	rc.SetWriteDeadline(time.Time{})
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{vdaproto.DisplaySubprotocol},
		InsecureSkipVerify: true})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(g.cfg.MaxMessageBytes)
	return c, nil
}

// acceptAndClose tells the browser why it gets no display: accepted and
// closed with code and reason, which the page reads.
func (g *Gateway) acceptAndClose(w http.ResponseWriter, r *http.Request, outcome string, code websocket.StatusCode, reason string) {
	g.metrics.sessions.WithLabelValues(outcome).Inc()
	c, err := g.accept(w, r)
	if err != nil {
		return
	}
	c.Close(code, closeReason(reason))
}

// errorBody is the JSON document of an error answer, as the REST API's.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// refuse answers a request before the upgrade with a JSON error.
func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, user string, status int, code, msg string) {
	g.metrics.sessions.WithLabelValues(outcomeRefused).Inc()
	var e errorBody
	e.Error.Code, e.Error.Message = code, msg
	body, _ := json.Marshal(e)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(body)
	// A page of another site, or a session not the user's, is worth a
	// line; a page logged off that tries again is not.
	level := slog.LevelDebug
	if status == http.StatusForbidden || status == http.StatusNotFound {
		level = slog.LevelInfo
	}
	g.log.Log(r.Context(), level, "display refused", "status", status, "code", code, keyUser, user,
		keySession, r.PathValue("id"), keyRemote, r.RemoteAddr)
}

func isUpgrade(r *http.Request) bool {
	return headerHas(r.Header, "Connection", "upgrade") && headerHas(r.Header, "Upgrade", "websocket")
}

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

// originAllowed reports whether the request's Origin is its own
// (the scheme it came over and its Host) or one allowed. A request
// without an Origin comes from no browser (browsers always send it on a
// WebSocket), which page scripts of other sites cannot be: it is allowed.
func (g *Gateway) originAllowed(r *http.Request) bool {
	values := r.Header.Values("Origin")
	if len(values) == 0 {
		return true
	}
	if len(values) > 1 {
		return false
	}
	o, ok := origin(values[0])
	if !ok {
		return false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return o == scheme+"://"+strings.ToLower(r.Host) || g.origins[o]
}

// origin returns the normal form of an origin, scheme://host[:port] in
// lower case; false for anything else ("null", a path, a user).
func origin(s string) (string, bool) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", false
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), true
}

// closeReason cuts a reason to what a close frame carries (123 bytes),
// on a character boundary.
func closeReason(s string) string {
	const maxReason = 123
	if len(s) <= maxReason {
		return s
	}
	s = s[:maxReason]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
