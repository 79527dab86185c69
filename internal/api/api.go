// Package api is usher's REST JSON API: the admin API under /api/v1/admin/
// and its OpenAPI document at /api/openapi.json. It adapts the site domain
// to HTTP; only cmd/usher wires it to a store.
package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// Defaults for Config.
const (
	DefaultMaxBodyBytes  = 1 << 20
	DefaultAdminTokenTTL = 12 * time.Hour
	DefaultUserTokenTTL  = 8 * time.Hour
	// DefaultMachineCredentialTTL: a VDA enrols again, with the site's
	// enrolment secret, when its credential expires.
	DefaultMachineCredentialTTL = 30 * 24 * time.Hour
	DefaultPageLimit            = 100
	MaxPageLimit                = 1000
	MinPasswordLen              = 8
)

// Config configures a Server.
type Config struct {
	Store  site.Store
	Logger *slog.Logger
	// Signer issues and verifies admin bearer tokens.
	Signer *auth.Signer
	// Verified caches verified admin passwords; nil makes a fresh cache.
	Verified *auth.VerifiedCache
	// PasswordParams are the argon2id costs for passwords set through the API.
	PasswordParams auth.Params
	MaxBodyBytes   int64
	AdminTokenTTL  time.Duration

	// Broker serves the user API and the VDA API; without it only the
	// admin API is served.
	Broker *broker.Broker
	// EnrolmentSecret is what VDAs present to enrol.
	EnrolmentSecret string
	// UserTokenTTL is the lifetime of an end user's bearer token.
	UserTokenTTL time.Duration
	// MachineCredentialTTL is the lifetime of a VDA's credential.
	MachineCredentialTTL time.Duration
}

// Server serves the REST API.
type Server struct {
	cfg    Config
	log    *slog.Logger
	mux    *http.ServeMux
	routes []Route
	doc    []byte // the OpenAPI document, built once
	// dummyHash is verified against when an admin name is unknown, so that
	// a wrong name and a wrong password take the same time.
	dummyHash string
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
	if cfg.PasswordParams == (auth.Params{}) {
		cfg.PasswordParams = auth.DefaultParams
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.AdminTokenTTL <= 0 {
		cfg.AdminTokenTTL = DefaultAdminTokenTTL
	}
	if cfg.UserTokenTTL <= 0 {
		cfg.UserTokenTTL = DefaultUserTokenTTL
	}
	if cfg.MachineCredentialTTL <= 0 {
		cfg.MachineCredentialTTL = DefaultMachineCredentialTTL
	}
	if cfg.Broker != nil && len(cfg.EnrolmentSecret) < 16 {
		return nil, errors.New("api: an enrolment secret of at least 16 characters is required with a Broker")
	}
	dummy, err := auth.HashPassword(auth.RandomSecret(16), cfg.PasswordParams)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), dummyHash: dummy}
	s.registerAdmin()
	if cfg.Broker != nil {
		s.registerUser()
		s.registerVDA()
	}
	s.route(Route{Method: "GET", Pattern: "/api/openapi.json", OperationID: "getOpenAPI", Summary: "This OpenAPI document", Tag: "meta", Auth: AuthNone},
		nil)
	s.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, &httpError{status: http.StatusNotFound, code: site.ENotFound, msg: "no such API route: " + r.Method + " " + r.URL.Path})
	})
	s.doc, err = buildOpenAPI(s.routes)
	if err != nil {
		return nil, fmt.Errorf("api: build OpenAPI document: %w", err)
	}
	return s, nil
}

// ServeHTTP serves the API routes; paths outside /api/ are not handled.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Routes returns the registered routes.
func (s *Server) Routes() []Route { return s.routes }

// OpenAPI returns the OpenAPI document.
func (s *Server) OpenAPI() []byte { return s.doc }

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
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		}
		r, err := s.authenticate(w, r, rt.Auth)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		v, err := h(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		switch v := v.(type) {
		case nil:
			w.WriteHeader(http.StatusNoContent)
		case rawJSON:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(rt.Status)
			w.Write(v)
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

// rawJSON is an answer already encoded, such as a pre-rendered enumeration.
type rawJSON []byte

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
}

var statusOf = map[string]int{
	site.EInvalid:      http.StatusBadRequest,
	site.ENotFound:     http.StatusNotFound,
	site.EConflict:     http.StatusConflict,
	site.EUnauthorized: http.StatusUnauthorized,
	site.EForbidden:    http.StatusForbidden,
	site.EUnavailable:  http.StatusServiceUnavailable,
	site.ENoCapacity:   http.StatusServiceUnavailable,
	site.EOverloaded:   http.StatusServiceUnavailable,
	site.EInternal:     http.StatusInternalServerError,
	// A VDA that must register again.
	vdaproto.CodeNotRegistered: http.StatusConflict,
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	var tooBig *http.MaxBytesError
	var body ErrorBody
	status := http.StatusInternalServerError
	switch {
	case errors.As(err, &he):
		status, body.Error = he.status, ErrorDetail{he.code, he.msg}
	case errors.As(err, &tooBig):
		status, body.Error = http.StatusRequestEntityTooLarge, ErrorDetail{site.EInvalid, fmt.Sprintf("request body is larger than %d bytes", tooBig.Limit)}
	default:
		code := site.ErrorCode(err)
		status, body.Error = statusOf[code], ErrorDetail{code, site.ErrorMessage(err)}
		if status == 0 {
			status = http.StatusInternalServerError
		}
		if code == site.EOverloaded || code == site.ENoCapacity {
			w.Header().Set("Retry-After", "2")
		}
	}
	if status >= 500 {
		s.log.ErrorContext(r.Context(), "api request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// decodeJSON reads exactly one JSON value from the body into v, refusing
// unknown fields and trailing data.
func decodeJSON(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return &httpError{http.StatusUnsupportedMediaType, site.EInvalid, "request body must be application/json"}
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
			return site.Errorf(site.EInvalid, "request body: field %q must be %s", typ.Field, typ.Type)
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return site.Errorf(site.EInvalid, "request body: %s", strings.TrimPrefix(err.Error(), "json: "))
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
