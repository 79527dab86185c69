package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/blob"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/hotpath"
	"github.com/usher-vdi/usher/internal/site"
)

// Defaults for Config.
const (
	DefaultMaxBodyBytes  = 1 << 20
	DefaultAdminTokenTTL = 12 * time.Hour
	DefaultUserTokenTTL  = 8 * time.Hour
	// DefaultMachineCredentialTTL: a VDA renews its credential, or enrols
	// again, before it expires.
	DefaultMachineCredentialTTL = 30 * 24 * time.Hour
	DefaultPageLimit            = 100
	MaxPageLimit                = 1000
	MinPasswordLen              = 8
	// DefaultBodyTimeout bounds the time a client may take to send a
	// request body, counted from the end of its headers: well under the
	// HTTP server's whole-request ReadTimeout (30 s), so that slow bodies
	// cannot hold connections for long.
	DefaultBodyTimeout = 10 * time.Second
	// DefaultMaxBodyReadersPerAddress bounds the request bodies being
	// received at once from one client address. A body that arrives with
	// its headers is read in microseconds, so honest clients, even behind
	// one proxy, rarely have more than a few in flight.
	DefaultMaxBodyReadersPerAddress = 32
)

// Config configures a Server.
type Config struct {
	Store  site.Store
	Logger *slog.Logger
	// Signer issues and verifies admin bearer tokens.
	Signer *auth.Signer
	// Verified caches verified admin passwords; nil makes a fresh cache.
	Verified *auth.VerifiedCache
	// Guard reserves admin password checks (lock-out and per-source
	// throttling); nil shares the Broker's, or makes one without a Broker.
	Guard *auth.Guard
	// PasswordParams are the argon2id costs for passwords set through the API.
	PasswordParams auth.Params
	MaxBodyBytes   int64
	// BodyTimeout bounds the time to receive a request body (default
	// DefaultBodyTimeout, negative for no bound).
	BodyTimeout time.Duration
	// MaxBodyReadersPerAddress bounds the bodies received at once from
	// one client address (default DefaultMaxBodyReadersPerAddress,
	// negative for no bound); over it a request gets 429.
	MaxBodyReadersPerAddress int
	AdminTokenTTL            time.Duration

	// Broker serves the user API and the VDA API; without it (nil, or a
	// nil *broker.Broker) only the admin API is served.
	Broker Broker
	// EnrolmentSecret is what VDAs present to enrol.
	EnrolmentSecret string
	// UserTokenTTL is the lifetime of an end user's bearer token.
	UserTokenTTL time.Duration
	// MachineCredentialTTL is the lifetime of a VDA's credential.
	MachineCredentialTTL time.Duration
	// Outage, when set, is the broker's Local Host Cache, which the admin
	// API shows and forces. (What brokers ask each other is
	// internal/lhc/peer's, which the server mounts beside this API.)
	Outage Outage
	// Brokers lists the site's brokers (GET /api/v1/admin/brokers); nil
	// answers 503.
	Brokers Brokers

	// Metrics are what /metrics serves, from which the dashboard
	// (GET /api/v1/admin/dashboard and its event stream) reads its
	// figures; without them it answers 503. MaxDashboardStreams bounds
	// the dashboard's event streams open at once (default
	// DefaultMaxDashboardStreams); over it a request gets 429. Closing
	// Stopping ends the open streams, so that a shutdown does not wait
	// for them.
	Metrics             Gatherer
	MaxDashboardStreams int
	Stopping            <-chan struct{}

	// Display, when set, serves GET DisplayPattern: a session's desktop
	// in the browser, as a WebSocket (internal/gateway), which does its
	// own checks and answers (UserAuthenticator authenticates there as
	// here). DisplayURL, when set, is what a launch of a session on a
	// machine that registered vdaproto.ProtocolVNC answers as its
	// display_url.
	Display    http.Handler
	DisplayURL func(ctx context.Context, user, sessionID string) (string, error)
}

// DisplayPattern is the route of a session's display (Config.Display).
const DisplayPattern = "/api/v1/sessions/{id}/display"

// Server serves the REST API.
type Server struct {
	cfg    Config
	log    *slog.Logger
	mux    *http.ServeMux
	routes []Route
	doc    []byte // the OpenAPI document, built once
	// secretFingerprint is the enrolment secret's, which credentials
	// enrolled with it record.
	secretFingerprint string
	// dummyHash is verified against when an admin name is unknown, so that
	// a wrong name and a wrong password take the same time.
	dummyHash string
	// readers counts the bodies being received per client address.
	readers addrCounter
	// crossOrigin refuses cross-site requests of unsafe methods.
	crossOrigin *http.CrossOriginProtection
	// credentials remembers machine credentials found current, so that a
	// VDA's heartbeats and session events cost no site-DB read each.
	credentials credentialCache
	// dash is the dashboard's reader of the metrics.
	dash *dashboard
}

// Route is one operation of the API, as registered and as documented.
type Route struct {
	Method      string
	Pattern     string // net/http pattern path, e.g. /api/v1/admin/zones/{name}
	OperationID string
	Summary     string
	Tag         string
	Auth        AuthKind     // who may call it; the zero value is admins only
	Request     reflect.Type // JSON request body, nil for none
	RawBody     []string     // media types of a request body that is not JSON (a file)
	Response    reflect.Type // JSON response body, nil for none
	List        bool         // the response is a page of Response items
	Status      int          // success status
	Query       []QueryParam
}

// QueryParam documents a query parameter.
type QueryParam struct {
	Name, Description string
	Integer           bool
}

// handler is an API operation: it returns a value to send as JSON, or an
// error that the server turns into a JSON error document.
type handler func(r *http.Request) (any, error)

// New returns a Server with every route registered.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Signer == nil {
		return nil, errors.New("api: Store and Signer are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Verified == nil {
		cfg.Verified = auth.NewVerifiedCache(5*time.Minute, 10000)
	}
	cfg.Broker = noBroker(cfg.Broker)
	if cfg.Guard == nil && cfg.Broker != nil {
		cfg.Guard = cfg.Broker.Guard()
	}
	if cfg.Guard == nil {
		cfg.Guard = auth.NewGuard(auth.GuardConfig{})
	}
	if cfg.PasswordParams == (auth.Params{}) {
		cfg.PasswordParams = auth.DefaultParams
	}
	cfg.MaxBodyBytes = cmp.Or(max(cfg.MaxBodyBytes, 0), DefaultMaxBodyBytes)
	cfg.BodyTimeout = cmp.Or(cfg.BodyTimeout, DefaultBodyTimeout)
	cfg.MaxBodyReadersPerAddress = cmp.Or(cfg.MaxBodyReadersPerAddress, DefaultMaxBodyReadersPerAddress)
	cfg.AdminTokenTTL = cmp.Or(max(cfg.AdminTokenTTL, 0), DefaultAdminTokenTTL)
	cfg.UserTokenTTL = cmp.Or(max(cfg.UserTokenTTL, 0), DefaultUserTokenTTL)
	cfg.MachineCredentialTTL = cmp.Or(max(cfg.MachineCredentialTTL, 0), DefaultMachineCredentialTTL)
	if cfg.Broker != nil && len(cfg.EnrolmentSecret) < 16 {
		return nil, errors.New("api: an enrolment secret of at least 16 characters is required with a Broker")
	}
	dummy, err := auth.HashPassword(auth.RandomSecret(16), cfg.PasswordParams)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), dummyHash: dummy,
		readers: addrCounter{n: map[string]int{}}, crossOrigin: http.NewCrossOriginProtection(),
		secretFingerprint: site.SecretFingerprint(cfg.EnrolmentSecret)}
	s.registerAdmin()
	s.registerOutage()
	s.registerBrokers()
	s.registerDashboard()
	if cfg.Broker != nil {
		s.registerUser()
		s.registerPreferences()
		s.registerVDA()
	}
	s.route(Route{Method: "GET", Pattern: "/api/openapi.json", OperationID: "getOpenAPI", Summary: "This OpenAPI document", Tag: "meta", Auth: AuthNone},
		nil)
	s.mux.HandleFunc("/api/", s.noRoute)
	s.doc, err = buildOpenAPI(s.routes)
	if err != nil {
		return nil, fmt.Errorf("api: build OpenAPI document: %w", err)
	}
	return s, nil
}

// noRoute answers a request that no route takes: 405 with an Allow
// header when the path has routes for other methods, else 404.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, method := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"} {
		probe := r.Clone(r.Context())
		probe.Method = method
		if _, pattern := s.mux.Handler(probe); pattern != "" && pattern != "/api/" {
			allow = append(allow, method)
		}
	}
	if len(allow) == 0 {
		s.writeError(w, r, &httpError{status: http.StatusNotFound, code: site.ENotFound, msg: "no such API route: " + r.Method + " " + r.URL.Path})
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	s.writeError(w, r, &httpError{status: http.StatusMethodNotAllowed, code: CodeMethodNotAllowed,
		msg: fmt.Sprintf("%s %s is not allowed; use %s", r.Method, r.URL.Path, strings.Join(allow, " or "))})
}

// CodeMethodNotAllowed is the error code of a 405 answer: the path exists,
// but not for the request's method.
const CodeMethodNotAllowed = "method_not_allowed"

// ServeHTTP serves the API routes; paths outside /api/ are not handled.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Routes returns the registered routes.
func (s *Server) Routes() []Route { return s.routes }

// OpenAPI returns the OpenAPI document.
func (s *Server) OpenAPI() []byte { return s.doc }

// mount registers rt, served by h alone: none of route's checks, which
// h makes itself.
func (s *Server) mount(rt Route, h http.Handler) {
	s.routes = append(s.routes, rt)
	s.mux.Handle(rt.Method+" "+rt.Pattern, h)
}

// route registers rt with h. A nil h serves the OpenAPI document.
func (s *Server) route(rt Route, h handler) {
	if rt.Status == 0 {
		rt.Status = http.StatusOK
	}
	s.routes = append(s.routes, rt)
	s.mux.HandleFunc(rt.Method+" "+rt.Pattern, func(w http.ResponseWriter, r *http.Request) {
		if h == nil {
			w.Header().Set("Content-Type", "application/json")
			w.Write(s.doc)
			return
		}
		// A request is checked and its whole body received before it is
		// authenticated or takes a brokering slot, so that no slot is
		// held while a client is sending.
		if err := s.crossOrigin.Check(r); err != nil {
			s.writeError(w, r, &httpError{http.StatusForbidden, site.EForbidden,
				"cross-site requests are refused: " + r.Method + " must come from this site's own pages or from a non-browser client"})
			return
		}
		r, err := s.readBody(w, r, rt.RawBody)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		r, err = s.authenticate(w, r, rt.Auth)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		v, err := h(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if rt.Auth == AuthAdmin && rt.Method != "GET" && s.cfg.Broker != nil {
			// The change takes effect at once on this broker: a
			// configuration change made through Server.mutate is
			// published already, and Refresh then only reads the
			// version (it reloads the site only when something else
			// moved it). Other brokers see the change at their next
			// refresh (broker.DefaultRefreshInterval).
			if err := s.cfg.Broker.Refresh(r.Context()); err != nil {
				s.log.WarnContext(r.Context(), "refresh the broker after an admin change", "err", err)
			}
		}
		if c, ok := v.(withCookie); ok {
			http.SetCookie(w, c.cookie)
			for _, more := range c.more {
				http.SetCookie(w, more)
			}
			v = c.v
		}
		switch v := v.(type) {
		case nil:
			w.WriteHeader(http.StatusNoContent)
		case *blob.Blob:
			h := w.Header()
			h["Content-Type"] = jsonType
			h["Cache-Control"] = noStore
			h["Content-Length"] = v.LengthHeader()
			w.WriteHeader(rt.Status)
			blob.Write(w, v)
		case stream:
			v(w)
		case file:
			w.Header().Set("Content-Type", v.contentType)
			w.Header().Set("Content-Disposition", `attachment; filename="`+v.name+`"`)
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(rt.Status)
			w.Write(v.content)
		default:
			writeJSON(w, rt.Status, v)
		}
	})
}

var (
	jsonType = []string{"application/json"}
	noStore  = []string{"no-store"}
)

// withCookie is an answer v (nil: none) that sets a cookie.
type withCookie struct {
	v      any
	cookie *http.Cookie
	more   []*http.Cookie
}

// stream is an answer that writes itself, such as a stream of
// server-sent events, once route's checks have passed.
type stream func(w http.ResponseWriter)

// retryLater is an error whose answer tells the client when to try again
// (Retry-After, in seconds).
type retryLater struct {
	error
	after string
}

func (e *retryLater) Unwrap() error { return e.error }

// file is an answer sent as a download.
type file struct {
	name, contentType string
	content           []byte
}

// AuthKind says who may call a route.
type AuthKind int

const (
	// AuthAdmin: an admin account (HTTP basic) or an admin bearer token.
	AuthAdmin AuthKind = iota
	// AuthNone: anyone.
	AuthNone
	// AuthUser: an end user's bearer token from POST /api/v1/login.
	AuthUser
	// AuthVDA: a machine credential from POST /api/v1/vda/enrol.
	AuthVDA
)

// httpError is an error whose HTTP status is not implied by its code.
type httpError struct {
	status    int
	code, msg string
}

func (e *httpError) Error() string { return e.msg }

// ErrorBody is the JSON document of every error answer.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the code and the message of an error.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field is the request body's field at fault, as spelled in JSON
	// (dotted when nested, "load_rules.cpu.full_percent"), for a form to
	// show the message beside it; absent when no one field is.
	Field string `json:"field,omitempty"`
}

var statusOf = map[string]int{
	site.EInvalid:      http.StatusBadRequest,
	site.ENotFound:     http.StatusNotFound,
	site.EConflict:     http.StatusConflict,
	site.EUnauthorized: http.StatusUnauthorized,
	site.EForbidden:    http.StatusForbidden,
	site.EUnavailable:  http.StatusServiceUnavailable,
	// What waits for the site DB while a broker serves from its copy.
	site.ESiteDBUnavailable: http.StatusServiceUnavailable,
	site.ENoCapacity:        http.StatusServiceUnavailable,
	site.EOverloaded:        http.StatusServiceUnavailable,
	site.EInternal:          http.StatusInternalServerError,
	// A VDA that must register again (vdaproto.CodeNotRegistered).
	broker.ENotRegistered: http.StatusConflict,
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, broker.ErrWouldWait) && hotpath.Defer(w) {
		return // run again off the event loop, where it may wait
	}
	var he *httpError
	var tooBig *http.MaxBytesError
	var body ErrorBody
	if rl := (*retryLater)(nil); errors.As(err, &rl) {
		w.Header().Set("Retry-After", rl.after)
	}
	status := http.StatusInternalServerError
	switch {
	case errors.As(err, &he):
		status, body.Error = he.status, ErrorDetail{Code: he.code, Message: he.msg}
	case errors.As(err, &tooBig):
		status, body.Error = http.StatusRequestEntityTooLarge, ErrorDetail{Code: site.EInvalid, Message: fmt.Sprintf("request body is larger than %d bytes", tooBig.Limit)}
	default:
		code := site.ErrorCode(err)
		status, body.Error = statusOf[code], ErrorDetail{Code: code, Message: site.ErrorMessage(err), Field: fieldOf(err)}
		if status == 0 {
			status = http.StatusInternalServerError
		}
		switch code {
		case site.EOverloaded, site.ENoCapacity:
			w.Header().Set("Retry-After", retryAfter(err))
		case site.EUnavailable:
			// The site DB, for a moment: the broker brokers from its local
			// copy within seconds, and a VDA that waited longer would be
			// timed out meanwhile.
			w.Header().Set("Retry-After", "1")
		}
	}
	switch {
	case status == http.StatusServiceUnavailable && site.ErrorCode(err) == site.EUnavailable:
		// The site DB is down: the Local Host Cache and the store log
		// that once per change; a line per refused call would bury it.
		s.log.DebugContext(r.Context(), "api request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	case status >= 500:
		s.log.ErrorContext(r.Context(), "api request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeJSON(w, status, body)
}

// objectError is an error of a request that changes one configuration
// object, knowing which (see fieldOf).
type objectError struct {
	error
	kind site.Kind
	name string
}

func (e *objectError) Unwrap() error { return e.error }

// aboutObject marks err as the answer to a change of the object kind/name.
func aboutObject(err error, kind site.Kind, name string) error {
	if err == nil {
		return nil
	}
	return &objectError{err, kind, name}
}

// fieldOf is the request's field at fault in err: a field of the object
// the request changes (aboutObject), not of another object the change
// broke, or a field of the request body itself (an error naming no
// object).
func fieldOf(err error) string {
	var oe *objectError
	if errors.As(err, &oe) {
		return site.ErrorField(err, oe.kind, oe.name)
	}
	return site.ErrorField(err, "", "")
}

// retryAfter is the Retry-After value for an overloaded or full answer:
// a throttled logon's real wait, rounded up to seconds, else 2.
func retryAfter(err error) string {
	var throttled *broker.ThrottledError
	if errors.As(err, &throttled) {
		return strconv.FormatInt(int64(max((throttled.RetryAfter+time.Second-1)/time.Second, 1)), 10)
	}
	return "2"
}

// RequireAdmin serves h to admins only (HTTP basic or an admin bearer
// token, as the admin API), answering others as the admin API does.
func (s *Server) RequireAdmin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, err := s.authenticate(w, r, AuthAdmin)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// errNotJSON answers a request body that is not declared as JSON. Only
// JSON bodies are taken, so that a page on another site cannot send one
// from a form or without a CORS preflight.
var errNotJSON = &httpError{http.StatusUnsupportedMediaType, site.EInvalid, "request body must be Content-Type: application/json"}

// isJSON reports whether a Content-Type header value is application/json,
// with or without parameters such as charset.
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// readBody receives the request's whole body, at most MaxBodyBytes within
// BodyTimeout, and returns the request with the body in memory. A request
// with a body must be application/json, or of one of the media types raw
// when not nil (a route taking a file: Route.RawBody). Over
// MaxBodyReadersPerAddress bodies at once from the client's address, it
// answers 429 at once.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, raw []string) (*http.Request, error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return r, nil
	}
	wrongType := errNotJSON
	typeOK := isJSON
	if raw != nil {
		// None of these types can be sent across sites without a CORS
		// preflight either: only a form's types can.
		wrongType = &httpError{http.StatusUnsupportedMediaType, site.EInvalid, "request body must be Content-Type: " + strings.Join(raw, ", ")}
		typeOK = func(ct string) bool {
			mt, _, err := mime.ParseMediaType(ct)
			return err == nil && slices.Contains(raw, mt)
		}
	}
	if r.ContentLength > 0 && !typeOK(r.Header.Get("Content-Type")) {
		return r, wrongType
	}
	if r.ContentLength > s.cfg.MaxBodyBytes {
		return r, &http.MaxBytesError{Limit: s.cfg.MaxBodyBytes}
	}
	addr := clientIP(r)
	if !s.readers.add(addr, s.cfg.MaxBodyReadersPerAddress) {
		w.Header().Set("Retry-After", "2")
		w.Header().Set("Connection", "close")
		return r, &httpError{http.StatusTooManyRequests, site.EOverloaded, "too many request bodies being sent at once from " + addr}
	}
	defer s.readers.done(addr)
	rc := http.NewResponseController(w)
	if s.cfg.BodyTimeout > 0 {
		// Cleared once the body is in, so that the handler's work does
		// not count; net/http sets its own deadlines for the next request.
		if rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout)) == nil {
			defer rc.SetReadDeadline(time.Time{})
		}
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return r, err
		}
		w.Header().Set("Connection", "close")
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return r, &httpError{http.StatusRequestTimeout, site.EInvalid, fmt.Sprintf("request body not received within %s", s.cfg.BodyTimeout)}
		}
		return r, site.Errorf(site.EInvalid, "read request body: %v", err)
	}
	if len(b) > 0 && !typeOK(r.Header.Get("Content-Type")) {
		return r, wrongType
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	return r, nil
}

// addrCounter counts something per client address, such as the request
// bodies being received.
type addrCounter struct {
	mu sync.Mutex
	n  map[string]int
}

// add counts one more for addr and reports true, or reports false when
// addr already has max (max < 0 is no bound).
func (c *addrCounter) add(addr string, max int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if max >= 0 && c.n[addr] >= max {
		return false
	}
	c.n[addr]++
	return true
}

// done counts one less for addr.
func (c *addrCounter) done(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[addr] <= 1 {
		delete(c.n, addr)
		return
	}
	c.n[addr]--
}

// jsonPath is a field's path as a request body spells it: encoding/json
// names a field of an embedded struct through the Go name of the struct
// ("User.display_name"), which no body holds. Every JSON name of the API
// is lower case, so the segments that begin with an upper-case letter
// are those Go names.
func jsonPath(field string) string {
	var keep []string
	for _, seg := range strings.Split(field, ".") {
		if seg != "" && !unicode.IsUpper([]rune(seg)[0]) {
			keep = append(keep, seg)
		}
	}
	return strings.Join(keep, ".")
}

// decodeJSON reads exactly one JSON value from the body into v, refusing
// unknown fields and trailing data.
func decodeJSON(r *http.Request, v any) error {
	if r.ContentLength != 0 && !isJSON(r.Header.Get("Content-Type")) {
		return errNotJSON
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &tooBig):
			return err
		case errors.Is(err, io.EOF):
			return site.Errorf(site.EInvalid, "request body is empty")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return site.Errorf(site.EInvalid, "request body is not valid JSON (it ends early)")
		case errors.As(err, &syn):
			return site.Errorf(site.EInvalid, "request body is not valid JSON (at byte %d)", syn.Offset)
		case errors.As(err, &typ):
			field := jsonPath(typ.Field)
			if typ.Type == reflect.TypeFor[site.Duration]() {
				return site.Errorf(site.EInvalid, "request body: field %q: %s is not a duration like 15m, 8h or 1h30m", field, typ.Value).At(field)
			}
			return site.Errorf(site.EInvalid, "request body: field %q must be %s", field, typ.Type).At(field)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			e := site.Errorf(site.EInvalid, "request body: %s", strings.TrimPrefix(err.Error(), "json: "))
			if f, err := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field ")); err == nil {
				e.At(f)
			}
			return e
		default:
			return site.Errorf(site.EInvalid, "request body: %v", err)
		}
	}
	if dec.More() {
		return site.Errorf(site.EInvalid, "request body has data after the JSON value")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return err
		}
		return site.Errorf(site.EInvalid, "request body has data after the JSON value")
	}
	return nil
}
