package api

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/site"
)

const adminPrefix = "/api/v1/admin"

// ListResponse is one page of a list.
type ListResponse[T any] struct {
	Items []T `json:"items"`
	// Total counts the items on every page.
	Total int `json:"total"`
	// Next is the value of the after parameter for the next page; absent on
	// the last page.
	Next string `json:"next,omitempty"`
}

// SiteInfo describes the site as a whole.
type SiteInfo struct {
	Settings      site.Settings  `json:"settings"`
	ConfigVersion int64          `json:"config_version"`
	Counts        map[string]int `json:"counts"`
}

// PasswordRequest sets a password.
type PasswordRequest struct {
	Password string `json:"password"`
}

// UserRequest is a user with an optional new password. Without a password
// an update keeps the user's current one.
type UserRequest struct {
	site.User
	Password string `json:"password,omitempty"`
}

// AdminRequest creates an admin account.
type AdminRequest struct {
	Name     string `json:"name"`
	Password string `json:"password"`
}

// TokenRequest asks for an admin bearer token.
type TokenRequest struct {
	// TTLSeconds is the token's lifetime; 0 means the server's default.
	TTLSeconds int `json:"ttl_seconds,omitempty"`
	// SessionCookie asks for the token in an HttpOnly, SameSite=Strict
	// cookie (AdminCookieName) instead of the answer, for the console's
	// pages: their scripts never hold it.
	SessionCookie bool `json:"session_cookie,omitempty"`
}

// AdminCookieName is the cookie that carries an admin's token for the
// console (TokenRequest.SessionCookie).
const AdminCookieName = "usher_admin"

// TokenResponse is a new admin bearer token. It is shown once.
type TokenResponse struct {
	Token     string    `json:"token,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
}

// collection describes the admin routes of one kind of configuration object.
type collection[T any] struct {
	kind  site.Kind
	path  string // URL segment, e.g. "delivery-groups"
	get   func(site.Tx) site.Collection[T]
	items func(*site.Config) *[]T
	name  func(*T) *string
	fresh func() T // a new object with its defaults
	// decode reads a request body onto obj; nil means strict JSON of T.
	decode      func(s *Server, r *http.Request, obj *T) error
	requestType reflect.Type
	// present turns stored objects into what the API shows; nil shows them as they are.
	present     func(ctx context.Context, tx site.Tx, objs []T) (any, error)
	presentType reflect.Type
	// del deletes an object for DELETE; nil deletes it from the
	// configuration. delQuery documents its query parameters.
	del      func(s *Server, r *http.Request, name string) error
	delQuery []QueryParam
}

func (s *Server) registerAdmin() {
	register(s, collection[site.Zone]{kind: site.KindZone, path: "zones",
		get: site.Tx.Zones, items: func(c *site.Config) *[]site.Zone { return &c.Zones },
		name: func(z *site.Zone) *string { return &z.Name }, fresh: func() site.Zone { return site.Zone{} }})
	register(s, collection[site.Catalog]{kind: site.KindCatalog, path: "catalogs",
		get: site.Tx.Catalogs, items: func(c *site.Config) *[]site.Catalog { return &c.Catalogs },
		name: func(x *site.Catalog) *string { return &x.Name }, fresh: func() site.Catalog { return site.Catalog{} }})
	register(s, collection[site.Group]{kind: site.KindGroup, path: "groups",
		get: site.Tx.Groups, items: func(c *site.Config) *[]site.Group { return &c.Groups },
		name: func(g *site.Group) *string { return &g.Name }, fresh: func() site.Group { return site.Group{} }})
	register(s, collection[site.User]{kind: site.KindUser, path: "users",
		get: site.Tx.Users, items: func(c *site.Config) *[]site.User { return &c.Users },
		name: func(u *site.User) *string { return &u.Name }, fresh: func() site.User { return site.User{} },
		decode: decodeUser, requestType: reflect.TypeFor[UserRequest]()})
	register(s, collection[site.Machine]{kind: site.KindMachine, path: "machines",
		get: site.Tx.Machines, items: func(c *site.Config) *[]site.Machine { return &c.Machines },
		name: func(m *site.Machine) *string { return &m.Name }, fresh: func() site.Machine { return site.Machine{} },
		present: presentMachines, presentType: reflect.TypeFor[site.MachineState](),
		del: deleteMachine, delQuery: []QueryParam{{Name: "force", Description: "true ends the machine's live sessions first " +
			"(its VDA is asked to log them off); without it a machine with live sessions is not deleted (409 conflict)."}}})
	register(s, collection[site.DeliveryGroup]{kind: site.KindDeliveryGroup, path: "delivery-groups",
		get: site.Tx.DeliveryGroups, items: func(c *site.Config) *[]site.DeliveryGroup { return &c.DeliveryGroups },
		name: func(g *site.DeliveryGroup) *string { return &g.Name }, fresh: func() site.DeliveryGroup { return site.NewDeliveryGroup("") }})
	apps := collection[site.Resource]{kind: site.KindApplication, path: "applications",
		get: site.Tx.Applications, items: func(c *site.Config) *[]site.Resource { return &c.Applications },
		name: func(r *site.Resource) *string { return &r.Name }, fresh: func() site.Resource { return site.Resource{Kind: site.Application} }}
	desktops := collection[site.Resource]{kind: site.KindDesktop, path: "desktops",
		get: site.Tx.Desktops, items: func(c *site.Config) *[]site.Resource { return &c.Desktops },
		name: func(r *site.Resource) *string { return &r.Name }, fresh: func() site.Resource { return site.Resource{Kind: site.Desktop} }}
	register(s, apps)
	register(s, desktops)
	register(s, collection[site.Entitlement]{kind: site.KindEntitlement, path: "entitlements",
		get: site.Tx.Entitlements, items: func(c *site.Config) *[]site.Entitlement { return &c.Entitlements },
		name: func(e *site.Entitlement) *string { return &e.Name }, fresh: func() site.Entitlement { return site.Entitlement{} }})
	register(s, collection[site.Target]{kind: site.KindTarget, path: "targets",
		get: site.Tx.Targets, items: func(c *site.Config) *[]site.Target { return &c.Targets },
		name: func(t *site.Target) *string { return &t.Name }, fresh: func() site.Target { return site.Target{} }})

	s.route(Route{Method: "GET", Pattern: adminPrefix + "/site", OperationID: "getSite", Tag: "site",
		Summary: "The site: settings, configuration version and object counts", Response: reflect.TypeFor[SiteInfo]()}, s.getSite)
	s.route(Route{Method: "GET", Pattern: adminPrefix + "/settings", OperationID: "getSettings", Tag: "site",
		Summary: "The site settings", Response: reflect.TypeFor[site.Settings]()}, s.getSettings)
	s.route(Route{Method: "PUT", Pattern: adminPrefix + "/settings", OperationID: "putSettings", Tag: "site",
		Summary: "Replace the site settings", Request: reflect.TypeFor[site.Settings](), Response: reflect.TypeFor[site.Settings]()}, s.putSettings)
	s.registerDirectory()
	s.route(Route{Method: "PUT", Pattern: adminPrefix + "/users/{name}/password", OperationID: "setUserPassword", Tag: "users",
		Summary: "Set a user's password", Request: reflect.TypeFor[PasswordRequest]()}, s.setUserPassword)
	s.registerSessions()
	s.registerAdmins()
	s.registerMachineCredentials()
	s.registerLockouts()
	s.registerChanges()
	s.registerBoots()
	s.registerIcons(apps, desktops)
}

func register[T any](s *Server, c collection[T]) {
	base := adminPrefix + "/" + c.path
	item := base + "/{name}"
	typ := reflect.TypeFor[T]()
	shown := typ
	if c.presentType != nil {
		shown = c.presentType
	}
	req := typ
	if c.requestType != nil {
		req = c.requestType
	}
	noun := string(c.kind)
	op := camel(c.path)
	s.route(Route{Method: "GET", Pattern: base, OperationID: "list" + op, Tag: c.path, Summary: "List " + c.path + " by name, a page at a time",
		Response: shown, List: true, Query: pageParams}, func(r *http.Request) (any, error) {
		opts, err := pageOptions(r)
		if err != nil {
			return nil, err
		}
		var out listResponse
		err = s.cfg.Store.View(r.Context(), func(tx site.Tx) error {
			page, err := c.get(tx).List(r.Context(), opts)
			if err != nil {
				return err
			}
			out.Total, out.Next = page.Total, page.Next
			out.Items, err = c.show(r.Context(), tx, page.Items)
			return err
		})
		return out, err
	})
	s.route(Route{Method: "POST", Pattern: base, OperationID: "create" + op, Tag: c.path, Summary: "Create a " + noun,
		Request: req, Response: shown, Status: http.StatusCreated}, func(r *http.Request) (any, error) {
		obj := c.fresh()
		if err := c.read(s, r, &obj); err != nil {
			return nil, err
		}
		name := *c.name(&obj)
		return c.change(s, r.Context(), name, func(list *[]T) error {
			if c.index(*list, name) >= 0 {
				return site.Conflict(c.kind, name)
			}
			*list = append(*list, obj)
			return nil
		})
	})
	s.route(Route{Method: "GET", Pattern: item, OperationID: "get" + singular(op), Tag: c.path, Summary: "Get a " + noun,
		Response: shown}, func(r *http.Request) (any, error) {
		var out any
		err := s.cfg.Store.View(r.Context(), func(tx site.Tx) error {
			obj, err := c.get(tx).Get(r.Context(), r.PathValue("name"))
			if err != nil {
				return err
			}
			out, err = c.showOne(r.Context(), tx, obj)
			return err
		})
		return out, err
	})
	s.route(Route{Method: "PUT", Pattern: item, OperationID: "replace" + singular(op), Tag: c.path, Summary: "Replace a " + noun,
		Request: req, Response: shown}, func(r *http.Request) (any, error) {
		name := r.PathValue("name")
		obj := c.fresh()
		if err := c.read(s, r, &obj); err != nil {
			return nil, err
		}
		switch n := c.name(&obj); *n {
		case "":
			*n = name
		case name:
		default:
			return nil, site.Errorf(site.EInvalid, "the body names %s %q but the URL names %q; objects cannot be renamed", c.kind, *n, name).At("name")
		}
		return c.change(s, r.Context(), name, func(list *[]T) error {
			i := c.index(*list, name)
			if i < 0 {
				return site.NotFound(c.kind, name)
			}
			(*list)[i] = obj
			return nil
		})
	})
	s.route(Route{Method: "DELETE", Pattern: item, OperationID: "delete" + singular(op), Tag: c.path, Summary: "Delete a " + noun,
		Status: http.StatusNoContent, Query: c.delQuery}, func(r *http.Request) (any, error) {
		name := r.PathValue("name")
		if c.del != nil {
			return nil, c.del(s, r, name)
		}
		err := s.mutate(r.Context(), func(cfg *site.Config) error {
			list := c.items(cfg)
			i := c.index(*list, name)
			if i < 0 {
				return site.NotFound(c.kind, name)
			}
			*list = slices.Delete(*list, i, i+1)
			return nil
		}, nil)
		if site.ErrorCode(err) == site.EInvalid {
			// Whatever broke is a reference to the deleted object.
			var e *site.Error
			if errors.As(err, &e) && e.Kind != "" && e.Field != "" {
				return nil, site.Errorf(site.EConflict, "%s %q is still in use: %s %q refers to it in its %s", c.kind, name, e.Kind, e.Name, e.Field)
			}
			return nil, site.Errorf(site.EConflict, "%s %q is still in use: %s", c.kind, name, site.ErrorMessage(err))
		}
		return nil, err
	})
}

// listResponse is ListResponse with items already presented.
type listResponse struct {
	Items any    `json:"items"`
	Total int    `json:"total"`
	Next  string `json:"next,omitempty"`
}

func (c collection[T]) index(list []T, name string) int {
	return slices.IndexFunc(list, func(o T) bool { return *c.name(&o) == name })
}

func (c collection[T]) read(s *Server, r *http.Request, obj *T) error {
	if c.decode != nil {
		return c.decode(s, r, obj)
	}
	return decodeJSON(r, obj)
}

// change applies fn to the configuration in one transaction, with the
// whole-site validation of site.Mutate, and returns the stored object. fn
// adds, replaces or deletes whole objects of the list, or sets a field of
// one (see Server.mutate). An error names the object name changes
// (aboutObject), so that its field is shown only for that object.
func (c collection[T]) change(s *Server, ctx context.Context, name string, fn func(*[]T) error) (any, error) {
	var out any
	err := s.mutate(ctx, func(cfg *site.Config) error { return fn(c.items(cfg)) }, func(tx site.Tx) error {
		obj, err := c.get(tx).Get(ctx, name)
		if err != nil {
			return err
		}
		out, err = c.showOne(ctx, tx, obj)
		return err
	})
	return out, aboutObject(err, c.kind, name)
}

func (c collection[T]) show(ctx context.Context, tx site.Tx, objs []T) (any, error) {
	if objs == nil {
		objs = []T{}
	}
	if c.present == nil {
		return objs, nil
	}
	return c.present(ctx, tx, objs)
}

func (c collection[T]) showOne(ctx context.Context, tx site.Tx, obj T) (any, error) {
	if c.present == nil {
		return obj, nil
	}
	v, err := c.present(ctx, tx, []T{obj})
	if err != nil {
		return nil, err
	}
	return reflect.ValueOf(v).Index(0).Interface(), nil
}

func presentMachines(ctx context.Context, tx site.Tx, ms []site.Machine) (any, error) {
	out := make([]site.MachineState, len(ms))
	for i, m := range ms {
		st, err := tx.MachineStatus(ctx, m.Name)
		if err != nil {
			return nil, err
		}
		out[i] = site.MachineState{Machine: m, MachineStatus: st}
	}
	return out, nil
}

func decodeUser(s *Server, r *http.Request, u *site.User) error {
	var req UserRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	*u = req.User
	if req.Password != "" {
		h, err := s.hashPassword(req.Password)
		if err != nil {
			return err
		}
		u.PasswordHash = h
	}
	return nil
}

func (s *Server) hashPassword(pw string) (string, error) {
	if len(pw) < MinPasswordLen {
		return "", site.Errorf(site.EInvalid, "password is shorter than %d characters", MinPasswordLen).At("password")
	}
	return auth.HashPassword(pw, s.cfg.PasswordParams)
}

var pageParams = []QueryParam{
	{Name: "limit", Description: "Most items to return (default 100, at most 1000).", Integer: true},
	{Name: "after", Description: "Return items after this name: the next value of the previous page."},
}

func pageOptions(r *http.Request) (site.ListOptions, error) {
	q := r.URL.Query()
	opts := site.ListOptions{After: q.Get("after"), Limit: DefaultPageLimit}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPageLimit {
			return opts, site.Errorf(site.EInvalid, "limit %q is not a number from 1 to %d", v, MaxPageLimit)
		}
		opts.Limit = n
	}
	return opts, nil
}

func (s *Server) getSite(r *http.Request) (any, error) {
	var info SiteInfo
	err := s.cfg.Store.View(r.Context(), func(tx site.Tx) error {
		v, err := tx.ConfigVersion(r.Context())
		if err != nil {
			return err
		}
		cfg, err := site.LoadConfig(r.Context(), tx)
		if err != nil {
			return err
		}
		sessions, err := tx.Sessions().List(r.Context(), site.SessionFilter{}, site.ListOptions{Limit: 1})
		if err != nil {
			return err
		}
		info = SiteInfo{Settings: cfg.Settings, ConfigVersion: v, Counts: map[string]int{"sessions": sessions.Total}}
		for k, n := range cfg.ObjectCount() {
			info.Counts[string(k)] = n
		}
		return nil
	})
	return info, err
}

func (s *Server) getSettings(r *http.Request) (any, error) {
	var out site.Settings
	err := s.cfg.Store.View(r.Context(), func(tx site.Tx) (err error) {
		out, err = tx.Settings(r.Context())
		return err
	})
	return out, err
}

func (s *Server) putSettings(r *http.Request) (any, error) {
	st := site.DefaultSettings()
	if err := decodeJSON(r, &st); err != nil {
		return nil, err
	}
	if err := s.mutate(r.Context(), func(c *site.Config) error { c.Settings = st; return nil }, nil); err != nil {
		return nil, err
	}
	return s.getSettings(r)
}

func (s *Server) setUserPassword(r *http.Request) (any, error) {
	var req PasswordRequest
	if err := decodeJSON(r, &req); err != nil {
		return nil, err
	}
	hash, err := s.hashPassword(req.Password)
	if err != nil {
		return nil, err
	}
	// A user is named by any spelling of the name, as tx.Users().Get
	// names one.
	key := site.FoldName(r.PathValue("name"))
	return nil, s.mutate(r.Context(), func(c *site.Config) error {
		i := slices.IndexFunc(c.Users, func(u site.User) bool { return site.FoldName(u.Name) == key })
		if i < 0 {
			return site.NotFound(site.KindUser, r.PathValue("name"))
		}
		c.Users[i].PasswordHash = hash
		return nil
	}, nil)
}

func camel(path string) string {
	out := make([]byte, 0, len(path))
	up := true
	for i := 0; i < len(path); i++ {
		switch ch := path[i]; {
		case ch == '-':
			up = true
		case up:
			out = append(out, ch-'a'+'A')
			up = false
		default:
			out = append(out, ch)
		}
	}
	return string(out)
}

func singular(s string) string {
	if len(s) > 1 && s[len(s)-1] == 's' {
		return s[:len(s)-1]
	}
	return s
}
