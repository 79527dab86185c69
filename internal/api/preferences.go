package api

import (
	"net/http"
	"reflect"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
)

// registerPreferences adds the user's own preferences in the portal
// (site.Preferences): favourites and recent launches, kept in the site DB
// so that they follow the user to any browser.
//
// Each user reads and writes only their own: the user is the token's,
// never a parameter. A PUT replaces the whole document (a list left out
// is emptied); of concurrent PUTs the last to commit wins, whole. Names
// of resources the user may not launch (no longer entitled, deleted, or
// never there) are dropped, not refused, both when written and when read,
// so that a portal holding a stale favourite is not locked out of saving,
// and an answer never tells whether a resource the user cannot see
// exists. While the broker serves from its local copy (the Local Host
// Cache), a GET answers no preferences (no updated_at) and a PUT fails
// with site_db_unavailable.
func (s *Server) registerPreferences() {
	const path = "/api/v1/preferences"
	s.route(Route{Method: "GET", Pattern: path, OperationID: "getPreferences", Tag: "user", Auth: AuthUser,
		Summary:  "The user's favourites and recent launches; updated_at is absent when none were ever saved (or the site DB is unavailable)",
		Response: reflect.TypeFor[site.Preferences]()}, s.getPreferences)
	s.route(Route{Method: "PUT", Pattern: path, OperationID: "putPreferences", Tag: "user", Auth: AuthUser,
		Summary: "Replace the user's favourites and recent launches, whole (updated_at is the server's); " +
			"names of resources the user may not launch are dropped; answers the preferences as saved",
		Request: reflect.TypeFor[site.Preferences](), Response: reflect.TypeFor[site.Preferences]()}, s.putPreferences)
}

func (s *Server) getPreferences(r *http.Request) (any, error) {
	ctx, user := r.Context(), userFrom(r.Context())
	var p site.Preferences
	err := site.ReadOnce(ctx, s.cfg.Store, func(tx site.Tx) (err error) {
		p, err = tx.Preferences().Get(ctx, user)
		return err
	})
	if err != nil {
		return nil, err
	}
	return launchable(p, s.cfg.Broker.EntitlementsOf(s.cfg.Broker.Snapshot(), user)), nil
}

func (s *Server) putPreferences(r *http.Request) (any, error) {
	var req site.Preferences
	if err := decodeJSON(r, &req); err != nil {
		return nil, err
	}
	// Refused as a whole when malformed, before any name is dropped, so
	// that a bad document is never saved in part.
	if err := req.Validate(); err != nil {
		return nil, err
	}
	ctx, user := r.Context(), userFrom(r.Context())
	req = launchable(req, s.cfg.Broker.EntitlementsOf(s.cfg.Broker.Snapshot(), user))
	var out site.Preferences
	err := s.cfg.Store.Update(ctx, func(tx site.Tx) (err error) {
		out, err = tx.Preferences().Put(ctx, user, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// launchable returns p without the resources that e does not let its user
// launch, the lists never nil.
func launchable(p site.Preferences, e *broker.Entitlements) site.Preferences {
	out := site.Preferences{Favourites: make([]string, 0, len(p.Favourites)), Recent: make([]site.RecentLaunch, 0, len(p.Recent)),
		UpdatedAt: p.UpdatedAt}
	for _, name := range p.Favourites {
		if e.Groups(name) != nil {
			out.Favourites = append(out.Favourites, name)
		}
	}
	for _, l := range p.Recent {
		if e.Groups(l.Resource) != nil {
			out.Recent = append(out.Recent, l)
		}
	}
	return out
}
