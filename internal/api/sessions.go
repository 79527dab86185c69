package api

import (
	"context"
	"net/http"
	"reflect"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/site"
)

// AdminSession is a session as the admin API lists it: with the display
// names of its user and its resource, when the broker's configuration
// has them (absent otherwise: a directory user, a resource since removed).
type AdminSession struct {
	site.Session
	UserDisplayName     string `json:"user_display_name,omitempty"`
	ResourceDisplayName string `json:"resource_display_name,omitempty"`
}

// withDisplayNames returns sessions with the display names that the
// broker's snapshot has for their users and resources.
func (s *Server) withDisplayNames(sessions []site.Session) []AdminSession {
	out := make([]AdminSession, len(sessions))
	var snap interface {
		User(string) (*site.User, bool)
		Resource(string) (*site.Resource, bool)
	}
	if s.cfg.Broker != nil {
		snap = s.cfg.Broker.Snapshot()
	}
	for i, sess := range sessions {
		out[i].Session = sess
		if snap == nil {
			continue
		}
		if u, ok := snap.User(sess.User); ok && u.DisplayName != sess.User {
			out[i].UserDisplayName = u.DisplayName
		}
		if r, ok := snap.Resource(sess.Resource); ok && r.DisplayName != sess.Resource {
			out[i].ResourceDisplayName = r.DisplayName
		}
	}
	return out
}

func (s *Server) registerSessions() {
	base := adminPrefix + "/sessions"
	s.route(Route{Method: "GET", Pattern: base, OperationID: "listSessions", Tag: "sessions",
		Summary:  "List sessions by ID, a page at a time, optionally filtered, with the display names of their users and resources",
		Response: reflect.TypeFor[AdminSession](), List: true,
		Query: append([]QueryParam{
			{Name: "user", Description: "Only this user's sessions."},
			{Name: "machine", Description: "Only sessions on this machine."},
			{Name: "group", Description: "Only the sessions of this group's members (its members now)."},
			{Name: "state", Description: "Only sessions in this state: pending, active, disconnected or logged-off."},
		}, pageParams...)}, func(r *http.Request) (any, error) {
		opts, err := pageOptions(r)
		if err != nil {
			return nil, err
		}
		q := r.URL.Query()
		f := site.SessionFilter{User: q.Get("user"), Machine: q.Get("machine"), State: site.SessionState(q.Get("state")), Group: q.Get("group")}
		switch f.State {
		case "", site.SessionPending, site.SessionActive, site.SessionDisconnected, site.SessionLoggedOff:
		default:
			return nil, site.Errorf(site.EInvalid, "state %q is not pending, active, disconnected or logged-off", f.State)
		}
		var out ListResponse[AdminSession]
		err = s.cfg.Store.View(r.Context(), func(tx site.Tx) error {
			p, err := tx.Sessions().List(r.Context(), f, opts)
			out = ListResponse[AdminSession]{Items: s.withDisplayNames(p.Items), Total: p.Total, Next: p.Next}
			return err
		})
		return out, err
	})
	s.route(Route{Method: "GET", Pattern: base + "/{id}", OperationID: "getSession", Tag: "sessions",
		Summary: "Get a session", Response: reflect.TypeFor[site.Session]()}, func(r *http.Request) (any, error) {
		var out site.Session
		err := s.cfg.Store.View(r.Context(), func(tx site.Tx) (err error) {
			out, err = tx.Sessions().Get(r.Context(), r.PathValue("id"))
			return err
		})
		return out, err
	})
	if s.cfg.Broker != nil {
		// What a user may do to their own session, an admin may do to
		// anyone's: through the broker, so that the VDA hears of it.
		for _, action := range []struct {
			verb, op string
			do       func(ctx context.Context, user, id string) error
		}{{"logoff", "logoffAnySession", s.cfg.Broker.Logoff}, {"disconnect", "disconnectAnySession", s.cfg.Broker.Disconnect}} {
			s.route(Route{Method: "POST", Pattern: base + "/{id}/" + action.verb, OperationID: action.op, Tag: "sessions", Status: http.StatusNoContent,
				Summary: "Have the session's machine " + map[string]string{"logoff": "log it off", "disconnect": "disconnect it"}[action.verb]},
				func(r *http.Request) (any, error) {
					var sess site.Session
					err := s.cfg.Store.View(r.Context(), func(tx site.Tx) (err error) {
						sess, err = tx.Sessions().Get(r.Context(), r.PathValue("id"))
						return err
					})
					if err != nil {
						return nil, err
					}
					s.log.InfoContext(r.Context(), "admin session "+action.verb, "admin", adminFrom(r.Context()), "session", sess.ID, "user", sess.User)
					return nil, action.do(r.Context(), sess.User, sess.ID)
				})
		}
	}
	s.route(Route{Method: "DELETE", Pattern: base + "/{id}", OperationID: "deleteSession", Tag: "sessions",
		Summary: "Delete a session record", Status: http.StatusNoContent}, func(r *http.Request) (any, error) {
		return nil, s.cfg.Store.Update(r.Context(), func(tx site.Tx) error {
			return tx.Sessions().Delete(r.Context(), r.PathValue("id"))
		})
	})
}

func (s *Server) registerAdmins() {
	base := adminPrefix + "/admins"
	s.route(Route{Method: "GET", Pattern: base, OperationID: "listAdmins", Tag: "admins",
		Summary: "List admin accounts", Response: reflect.TypeFor[site.Admin](), List: true, Query: pageParams},
		func(r *http.Request) (any, error) {
			opts, err := pageOptions(r)
			if err != nil {
				return nil, err
			}
			var out ListResponse[site.Admin]
			err = s.cfg.Store.View(r.Context(), func(tx site.Tx) error {
				p, err := tx.Admins().List(r.Context(), opts)
				out = ListResponse[site.Admin]{Items: p.Items, Total: p.Total, Next: p.Next}
				return err
			})
			if out.Items == nil {
				out.Items = []site.Admin{}
			}
			return out, err
		})
	s.route(Route{Method: "POST", Pattern: base, OperationID: "createAdmin", Tag: "admins",
		Summary: "Create an admin account", Request: reflect.TypeFor[AdminRequest](), Response: reflect.TypeFor[site.Admin](),
		Status: http.StatusCreated}, func(r *http.Request) (any, error) {
		var req AdminRequest
		if err := decodeJSON(r, &req); err != nil {
			return nil, err
		}
		if err := site.ValidateName(site.KindAdmin, req.Name); err != nil {
			return nil, err
		}
		hash, err := s.hashPassword(req.Password)
		if err != nil {
			return nil, err
		}
		a := site.Admin{Name: req.Name, PasswordHash: hash, CreatedAt: time.Now().UTC()}
		err = s.cfg.Store.Update(r.Context(), func(tx site.Tx) error {
			if err := tx.Admins().Create(r.Context(), a); err != nil {
				return err
			}
			if a, err = tx.Admins().Get(r.Context(), a.Name); err != nil {
				return err
			}
			return tx.History().Record(r.Context(), site.ChangeRecord{Actor: adminActor(r.Context()), Op: site.OpCreate,
				Kind: site.KindAdmin, Name: a.Name})
		})
		return a, err
	})
	s.route(Route{Method: "GET", Pattern: base + "/{name}", OperationID: "getAdmin", Tag: "admins",
		Summary: "Get an admin account", Response: reflect.TypeFor[site.Admin]()}, func(r *http.Request) (any, error) {
		var out site.Admin
		err := s.cfg.Store.View(r.Context(), func(tx site.Tx) (err error) {
			out, err = tx.Admins().Get(r.Context(), r.PathValue("name"))
			return err
		})
		return out, err
	})
	s.route(Route{Method: "PUT", Pattern: base + "/{name}/password", OperationID: "setAdminPassword", Tag: "admins",
		Summary: "Set an admin's password", Request: reflect.TypeFor[PasswordRequest]()}, func(r *http.Request) (any, error) {
		var req PasswordRequest
		if err := decodeJSON(r, &req); err != nil {
			return nil, err
		}
		hash, err := s.hashPassword(req.Password)
		if err != nil {
			return nil, err
		}
		return nil, s.cfg.Store.Update(r.Context(), func(tx site.Tx) error {
			a, err := tx.Admins().Get(r.Context(), r.PathValue("name"))
			if err != nil {
				return err
			}
			a.PasswordHash = hash
			if err := tx.Admins().Update(r.Context(), a); err != nil {
				return err
			}
			return tx.History().Record(r.Context(), site.ChangeRecord{Actor: adminActor(r.Context()), Op: site.OpUpdate,
				Kind: site.KindAdmin, Name: a.Name, Fields: []string{"password_hash"}})
		})
	})
	s.route(Route{Method: "DELETE", Pattern: base + "/{name}", OperationID: "deleteAdmin", Tag: "admins",
		Summary: "Delete an admin account (not the last one, nor yourself)", Status: http.StatusNoContent}, func(r *http.Request) (any, error) {
		name := r.PathValue("name")
		return nil, s.cfg.Store.Update(r.Context(), func(tx site.Tx) error {
			p, err := tx.Admins().List(r.Context(), site.ListOptions{Limit: 1})
			if err != nil {
				return err
			}
			if p.Total <= 1 {
				return site.Errorf(site.EConflict, "cannot delete the last admin account")
			}
			a, err := tx.Admins().Get(r.Context(), name)
			if err != nil {
				return err
			}
			// As stored: names match whatever their case, and so must this.
			if a.Name == adminFrom(r.Context()) {
				return site.Errorf(site.EConflict, "an admin cannot delete their own account")
			}
			if err := tx.Admins().Delete(r.Context(), a.Name); err != nil {
				return err
			}
			return tx.History().Record(r.Context(), site.ChangeRecord{Actor: adminActor(r.Context()), Op: site.OpDelete,
				Kind: site.KindAdmin, Name: a.Name})
		})
	})
	s.route(Route{Method: "POST", Pattern: adminPrefix + "/tokens", OperationID: "createToken", Tag: "admins",
		Summary: "Issue a bearer token for the calling admin", Request: reflect.TypeFor[TokenRequest](),
		Response: reflect.TypeFor[TokenResponse](), Status: http.StatusCreated}, func(r *http.Request) (any, error) {
		var req TokenRequest
		if r.ContentLength != 0 {
			if err := decodeJSON(r, &req); err != nil {
				return nil, err
			}
		}
		ttl := s.cfg.AdminTokenTTL
		if req.TTLSeconds != 0 {
			if req.TTLSeconds < 60 || req.TTLSeconds > 30*24*3600 {
				return nil, site.Errorf(site.EInvalid, "ttl_seconds %d is outside 60..2592000", req.TTLSeconds)
			}
			ttl = time.Duration(req.TTLSeconds) * time.Second
		}
		name, hash := adminFrom(r.Context()), adminCredential(r.Context())
		exp := s.cfg.Signer.Now().Add(ttl)
		// A token mints no token that outlives it.
		if limit := adminTokenExpiry(r.Context()); !limit.IsZero() && exp.After(limit) {
			exp = limit
		}
		tok, exp := s.cfg.Signer.IssueClaims(auth.Claims{Subject: name, Audience: AdminAudience, Expires: exp, Stamp: s.cfg.Signer.Stamp(hash)})
		if req.SessionCookie {
			return withCookie{v: TokenResponse{ExpiresAt: exp}, cookie: sessionCookie(r, AdminCookieName, tok, exp),
				more: []*http.Cookie{sessionMarker(r, ConsoleMarkerName, exp)}}, nil
		}
		return TokenResponse{Token: tok, ExpiresAt: exp}, nil
	})
}
