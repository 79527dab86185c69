package api

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// UserAudience is the token audience of the user API.
const UserAudience = "user"

// LoginRequest logs a user on. Username may be "user", "DOMAIN\user" or
// "user@domain"; a domain must be the site's.
type LoginRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
	// SessionCookie asks for the token in an HttpOnly, SameSite=Strict
	// cookie (SessionCookieName) instead of the answer, for the portal's
	// pages: their scripts never hold it.
	SessionCookie bool `json:"session_cookie,omitempty"`
}

// SessionCookieName is the cookie that carries a user's token for the
// portal (LoginRequest.SessionCookie).
const SessionCookieName = "usher_session"

// SessionMarkerName is a cookie that goes with the portal's session
// cookie and holds nothing secret ("1"): the page, which cannot read the
// HttpOnly session cookie, reads it to know whether a session may be
// there, so that a visitor with none is shown the logon form without a
// request that fails.
const SessionMarkerName = "usher_portal"

// ConsoleMarkerName is SessionMarkerName for the console's session cookie
// (AdminCookieName).
const ConsoleMarkerName = "usher_console"

// LoginResponse carries the user's bearer token.
type LoginResponse struct {
	Token       string    `json:"token,omitempty"`
	ExpiresAt   time.Time `json:"expires_at"`
	User        string    `json:"user"`
	DisplayName string    `json:"display_name,omitempty"`
}

// MeResponse says who the caller is.
type MeResponse struct {
	User        string `json:"user"`
	DisplayName string `json:"display_name,omitempty"`
	Domain      string `json:"domain"`
	Site        string `json:"site"`
}

// ResourceView is a resource as its user sees it.
type ResourceView struct {
	Name        string `json:"name"`
	DisplayName string `json:"display_name"`
	Kind        string `json:"kind"`
	Folder      string `json:"folder,omitempty"`
	Description string `json:"description,omitempty"`
	Icon        string `json:"icon,omitempty"`
	LaunchURL   string `json:"launch_url"`
}

// ResourcesResponse lists a user's resources and their folders.
type ResourcesResponse struct {
	Resources []ResourceView `json:"resources"`
	Folders   []string       `json:"folders"`
}

// LaunchRequestBody optionally names the client.
type LaunchRequestBody struct {
	ClientName string `json:"client_name,omitempty"`
}

// LaunchResponse tells a client where its session is.
type LaunchResponse struct {
	SessionID   string     `json:"session_id"`
	Machine     string     `json:"machine"`
	Host        string     `json:"host"`
	Port        int        `json:"port"`
	Protocol    string     `json:"protocol"`
	Ticket      string     `json:"ticket"`
	ExpiresAt   time.Time  `json:"expires_at"`
	Reconnected bool       `json:"reconnected"`
	LaunchFile  LaunchFile `json:"launch_file"`
	// DisplayURL is where a browser opens the session's desktop as a
	// WebSocket (offering the subprotocols binary and usher.ticket.
	// followed by Ticket), for a machine that registered protocol vnc:
	// the gateway's path on this origin, or in direct mode the machine
	// agent's own wss:// URL; empty for other machines.
	DisplayURL string `json:"display_url"`
}

// LaunchFile is a file a desktop client opens to connect.
type LaunchFile struct {
	Filename    string `json:"filename"`
	ContentType string `json:"content_type"`
	Content     string `json:"content"`
}

// SessionView is one of the user's sessions.
type SessionView struct {
	ID         string    `json:"id"`
	Resource   string    `json:"resource"`
	Machine    string    `json:"machine"`
	State      string    `json:"state"`
	ClientName string    `json:"client_name,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
}

// SessionsResponse lists the user's live sessions.
type SessionsResponse struct {
	Sessions []SessionView `json:"sessions"`
}

type userKey struct{}

func withUser(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, userKey{}, name)
}

func userFrom(ctx context.Context) string {
	name, _ := ctx.Value(userKey{}).(string)
	return name
}

func (s *Server) registerUser() {
	s.route(Route{Method: "POST", Pattern: "/api/v1/login", OperationID: "login", Tag: "user", Auth: AuthNone,
		Summary: "Log a user on: user name and password to a short-lived bearer token",
		Request: reflect.TypeFor[LoginRequest](), Response: reflect.TypeFor[LoginResponse]()}, s.admitted(s.login))
	s.route(Route{Method: "POST", Pattern: "/api/v1/logout", OperationID: "logout", Tag: "user", Auth: AuthNone, Status: http.StatusNoContent,
		Summary: "Log the portal or the console off: clear their session cookies"}, s.logout)
	s.route(Route{Method: "GET", Pattern: "/api/v1/me", OperationID: "whoAmI", Tag: "user", Auth: AuthUser,
		Summary: "The user the token (or session cookie) is of, and the site", Response: reflect.TypeFor[MeResponse]()}, s.me)
	s.route(Route{Method: "GET", Pattern: "/api/v1/resources", OperationID: "listResources", Tag: "user", Auth: AuthUser,
		Summary:  "The applications and desktops the user may launch, with their folders",
		Response: reflect.TypeFor[ResourcesResponse]()}, s.admitted(s.resources))
	s.route(Route{Method: "POST", Pattern: "/api/v1/resources/{name}/launch", OperationID: "launchResource", Tag: "user", Auth: AuthUser,
		Summary: "Launch a resource: where to connect and a single-use ticket (format=rdp or format=ica downloads the launch file)",
		Query:   []QueryParam{{Name: "format", Description: "json (default), rdp or ica."}},
		Request: reflect.TypeFor[LaunchRequestBody](), Response: reflect.TypeFor[LaunchResponse]()}, s.admitted(s.launch))
	s.route(Route{Method: "GET", Pattern: "/api/v1/sessions", OperationID: "listOwnSessions", Tag: "user", Auth: AuthUser,
		Summary: "The user's live sessions", Response: reflect.TypeFor[SessionsResponse]()}, s.ownSessions)
	s.route(Route{Method: "POST", Pattern: "/api/v1/sessions/{id}/reconnect", OperationID: "reconnectSession", Tag: "user", Auth: AuthUser,
		Summary: "Reconnect to one of the user's sessions", Request: reflect.TypeFor[LaunchRequestBody](),
		Response: reflect.TypeFor[LaunchResponse]()}, s.admitted(s.reconnect))
	if s.cfg.Display != nil {
		s.mount(Route{Method: "GET", Pattern: DisplayPattern, OperationID: "openSessionDisplay", Tag: "user", Auth: AuthUser,
			Status: http.StatusSwitchingProtocols,
			Summary: "Open the session's desktop in the browser: a WebSocket (subprotocols binary and usher.ticket.<ticket>) " +
				"that the gateway splices to the session's machine; refusals before the upgrade are JSON errors, " +
				"after it close codes 4001-4005 and 1013"}, s.cfg.Display)
	}
	s.route(Route{Method: "POST", Pattern: "/api/v1/sessions/{id}/disconnect", OperationID: "disconnectSession", Tag: "user", Auth: AuthUser,
		Summary: "Disconnect one of the user's sessions"}, func(r *http.Request) (any, error) {
		return nil, s.cfg.Broker.Disconnect(r.Context(), userFrom(r.Context()), r.PathValue("id"))
	})
	s.route(Route{Method: "POST", Pattern: "/api/v1/sessions/{id}/logoff", OperationID: "logoffSession", Tag: "user", Auth: AuthUser,
		Summary: "Log off one of the user's sessions"}, func(r *http.Request) (any, error) {
		return nil, s.cfg.Broker.Logoff(r.Context(), userFrom(r.Context()), r.PathValue("id"))
	})
}

// admitted runs a handler in one of the broker's transaction slots, or
// answers at once that the broker is busy.
func (s *Server) admitted(h handler) handler {
	return func(r *http.Request) (any, error) {
		release, err := s.cfg.Broker.Admit()
		if err != nil {
			return nil, err
		}
		defer release()
		return h(r)
	}
}

func (s *Server) login(r *http.Request) (any, error) {
	done := s.cfg.Broker.Begin(broker.OpLogin)
	var req LoginRequest
	if err := decodeJSON(r, &req); err != nil {
		done(err)
		return nil, err
	}
	u, err := s.loginUser(r.Context(), req, clientIP(r))
	done(err)
	if err != nil {
		s.log.InfoContext(r.Context(), "user logon failed", "user", req.Username, "remote", r.RemoteAddr, "code", site.ErrorCode(err))
		return nil, err
	}
	tok, exp := s.cfg.Signer.IssueClaims(auth.Claims{Subject: u.Name, Audience: UserAudience,
		Expires: s.cfg.Signer.Now().Add(s.cfg.UserTokenTTL), Stamp: s.cfg.Signer.Stamp(u.Credential())})
	resp := LoginResponse{Token: tok, ExpiresAt: exp, User: u.Name, DisplayName: u.DisplayName}
	if !req.SessionCookie {
		return resp, nil
	}
	resp.Token = ""
	return withCookie{v: resp, cookie: sessionCookie(r, SessionCookieName, tok, exp), more: []*http.Cookie{sessionMarker(r, SessionMarkerName, exp)}}, nil
}

// logout clears the session cookies (the portal's and the console's).
// The tokens they held stay valid until they expire or the password
// changes; the browser no longer has them.
func (s *Server) logout(r *http.Request) (any, error) {
	var cookies []*http.Cookie
	for _, name := range []string{SessionCookieName, AdminCookieName} {
		c := sessionCookie(r, name, "", time.Time{})
		c.MaxAge = -1
		cookies = append(cookies, c)
	}
	for _, name := range []string{SessionMarkerName, ConsoleMarkerName} {
		marker := sessionMarker(r, name, time.Time{})
		marker.MaxAge = -1
		cookies = append(cookies, marker)
	}
	return withCookie{cookie: cookies[0], more: cookies[1:]}, nil
}

// sessionMarker is the marker cookie name of a session until exp:
// readable by the page, SameSite=Strict, Secure over TLS.
func sessionMarker(r *http.Request, name string, exp time.Time) *http.Cookie {
	return &http.Cookie{Name: name, Value: "1", Path: "/", Expires: exp, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode}
}

// sessionCookie is a session cookie holding token until exp: HttpOnly,
// SameSite=Strict, and Secure when the request came over TLS.
func sessionCookie(r *http.Request, name, token string, exp time.Time) *http.Cookie {
	return &http.Cookie{Name: name, Value: token, Path: "/", Expires: exp,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode}
}

func (s *Server) loginUser(ctx context.Context, req LoginRequest, source string) (*site.User, error) {
	name := broker.LogonName(s.cfg.Broker.Snapshot().Settings.Domain, req.Username, "")
	if name == "" || req.Password == "" {
		return nil, broker.ErrBadCredentials
	}
	return s.cfg.Broker.Authenticate(ctx, name, req.Password, source)
}

// authenticateUser accepts a user token of an enabled user: a bearer
// token, or the portal's session cookie.
func (s *Server) authenticateUser(r *http.Request) (string, error) {
	return authenticateUser(r, s.cfg.Signer, s.cfg.Broker)
}

// UserAuthenticator returns what authenticates an end user's request as
// the user API does: a user bearer token or the portal's session cookie,
// of an enabled user, issued under the user's current password. It
// returns the user's name; its errors are EUnauthorized, or EUnavailable
// (or broker.ErrWouldWait) when the directory cannot say. The display
// gateway (internal/gateway), which serves beside the API's routes,
// authenticates with it.
func UserAuthenticator(signer *auth.Signer, b Broker) func(*http.Request) (string, error) {
	return func(r *http.Request) (string, error) { return authenticateUser(r, signer, b) }
}

func authenticateUser(r *http.Request, signer *auth.Signer, b Broker) (string, error) {
	token := bearer(r)
	if token == "" {
		if c, err := r.Cookie(SessionCookieName); err == nil {
			token = c.Value
		}
	}
	if token == "" {
		return "", errUnauthorized
	}
	claims, err := signer.Verify(token, UserAudience)
	if err != nil {
		return "", errUnauthorized
	}
	u, err := b.User(r.Context(), claims.Subject)
	if site.ErrorCode(err) == site.EUnavailable || errors.Is(err, broker.ErrWouldWait) {
		return "", err // a directory user, and the directory cannot say (or not without waiting)
	}
	// A token issued under an older password (another stamp) is revoked.
	if err != nil || !hmac.Equal([]byte(claims.Stamp), []byte(signer.Stamp(u.Credential()))) {
		return "", errUnauthorized
	}
	return u.Name, nil
}

func (s *Server) me(r *http.Request) (any, error) {
	snap := s.cfg.Broker.Snapshot()
	name := userFrom(r.Context())
	out := MeResponse{User: name, Domain: snap.Settings.Domain, Site: snap.Settings.Name}
	if u, err := s.cfg.Broker.User(r.Context(), name); err == nil {
		out.DisplayName = u.DisplayName
	}
	return out, nil
}

func (s *Server) resources(r *http.Request) (any, error) {
	e := s.cfg.Broker.Resources(r.Context(), userFrom(r.Context()))
	return e.Rendered("rest/v1", func() []byte {
		out := ResourcesResponse{Resources: make([]ResourceView, 0, len(e.Resources)), Folders: []string{}}
		seen := map[string]bool{}
		for _, res := range e.Resources {
			out.Resources = append(out.Resources, ResourceView{
				Name: res.Name, DisplayName: res.DisplayName, Kind: string(res.Kind), Folder: res.Folder,
				Description: res.Description, Icon: res.Icon,
				LaunchURL: "/api/v1/resources/" + url.PathEscape(res.Name) + "/launch",
			})
			if res.Folder != "" && !seen[res.Folder] {
				seen[res.Folder] = true
				out.Folders = append(out.Folders, res.Folder)
			}
		}
		b, _ := json.Marshal(out)
		return b
	}), nil
}

func (s *Server) launch(r *http.Request) (any, error) {
	var body LaunchRequestBody
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &body); err != nil {
			return nil, err
		}
		if err := site.ValidateText("client_name", body.ClientName); err != nil {
			return nil, err
		}
	}
	user := userFrom(r.Context())
	l, err := s.cfg.Broker.Launch(r.Context(), broker.LaunchRequest{User: user, Resource: r.PathValue("name"),
		ClientName: body.ClientName, ClientAddress: clientIP(r)})
	if err != nil {
		return nil, err
	}
	return s.launchAnswer(r, user, l)
}

func (s *Server) reconnect(r *http.Request) (any, error) {
	var body LaunchRequestBody
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &body); err != nil {
			return nil, err
		}
		if err := site.ValidateText("client_name", body.ClientName); err != nil {
			return nil, err
		}
	}
	user := userFrom(r.Context())
	l, err := s.cfg.Broker.Reconnect(r.Context(), user, r.PathValue("id"), body.ClientName)
	if err != nil {
		return nil, err
	}
	return s.launchAnswer(r, user, l)
}

func (s *Server) launchAnswer(r *http.Request, user string, l *broker.Launch) (any, error) {
	// The address came from the site DB or a VDA's registration, both
	// validated; checked again because it is written into launch files.
	if err := site.ValidateAddress(l.Address); err != nil {
		s.log.ErrorContext(r.Context(), "launch refused: the machine's address is unsafe", "machine", l.Session.Machine, "err", err)
		return nil, site.Errorf(site.EInternal, "machine %q has an invalid address", l.Session.Machine)
	}
	snap := s.cfg.Broker.Snapshot()
	res, _ := snap.Resource(l.Session.Resource)
	host, portStr, err := net.SplitHostPort(l.Address)
	if err != nil {
		host, portStr = l.Address, "3389"
	}
	port, _ := strconv.Atoi(portStr)
	lf := launchFile(snap.Settings.Domain, user, res, l, host, port)
	switch format := r.URL.Query().Get("format"); format {
	case "", "json":
	case "rdp", "ica":
		if format != lf.ext {
			return nil, site.Errorf(site.EInvalid, "the session's protocol is %s; ask for format=%s", l.Protocol, lf.ext)
		}
		return file{name: lf.Filename, contentType: lf.ContentType, content: []byte(lf.Content)}, nil
	default:
		return nil, site.Errorf(site.EInvalid, "format %q is not json, rdp or ica", format)
	}
	resp := LaunchResponse{SessionID: l.Session.ID, Machine: l.Session.Machine, Host: host, Port: port, Protocol: l.Protocol,
		Ticket: l.Ticket, ExpiresAt: l.ExpiresAt, Reconnected: l.Reconnected, LaunchFile: lf.LaunchFile}
	if l.Protocol == vdaproto.ProtocolVNC && s.cfg.DisplayURL != nil {
		u, err := s.cfg.DisplayURL(r.Context(), user, l.Session.ID)
		if err != nil {
			// The session is placed and its ticket good: the user may
			// launch again once the machine's display can be told.
			s.log.WarnContext(r.Context(), "launch: no display URL for the session", "machine", l.Session.Machine,
				"session", l.Session.ID, "err", err)
		}
		resp.DisplayURL = u
	}
	return resp, nil
}

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (s *Server) ownSessions(r *http.Request) (any, error) {
	sessions, err := s.cfg.Broker.UserSessions(r.Context(), userFrom(r.Context()))
	if err != nil {
		return nil, err
	}
	out := SessionsResponse{Sessions: make([]SessionView, 0, len(sessions))}
	for _, x := range sessions {
		out.Sessions = append(out.Sessions, SessionView{ID: x.ID, Resource: x.Resource, Machine: x.Machine,
			State: string(x.State), ClientName: x.ClientName, CreatedAt: x.CreatedAt})
	}
	return out, nil
}
