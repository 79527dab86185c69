package api

import (
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// Lockout is an account that the lock-out guard refuses after too many
// failed logons.
type Lockout struct {
	Name string `json:"name"`
	// Kind is "user" or "admin".
	Kind string `json:"kind"`
	// Until is when the lock ends by itself.
	Until time.Time `json:"until"`
	// SecondsLeft is how long it has still to run, rounded up.
	SecondsLeft int64 `json:"seconds_left"`
}

// Account kinds, as the broker and the admin authentication key the guard.
const (
	lockoutUser  = "user"
	lockoutAdmin = "admin"
)

// registerLockouts adds the lock-out operations. Lock-out lives in each
// server's memory (auth.Guard) and, where brokers share a site DB, in the
// site DB as well (broker.Config.SiteLockout): these routes see and clear
// the locks of the server that answers them and the site's.
func (s *Server) registerLockouts() {
	base := adminPrefix + "/lockouts"
	s.route(Route{Method: "GET", Pattern: base, OperationID: "listLockouts", Tag: "lockouts",
		Summary: "List the user and admin accounts locked out after failed logons", Response: reflect.TypeFor[Lockout](), List: true},
		func(r *http.Request) (any, error) {
			cfg := s.cfg.Guard.Config()
			now := cfg.Now()
			out := ListResponse[Lockout]{Items: []Lockout{}}
			add := func(kind, name string, left time.Duration) {
				out.Items = append(out.Items, Lockout{Name: name, Kind: kind, Until: now.Add(left).UTC().Truncate(time.Second),
					SecondsLeft: int64((left + time.Second - 1) / time.Second)})
			}
			if s.cfg.Broker != nil {
				all, err := s.cfg.Broker.Lockouts(r.Context())
				if err != nil {
					return nil, err
				}
				for _, l := range all {
					add(l.Kind, l.Name, l.Left)
				}
			} else {
				for _, l := range s.cfg.Guard.Lockouts() {
					if kind, name, ok := strings.Cut(l.Account, "\x00"); ok {
						add(kind, name, l.Left)
					}
				}
			}
			slices.SortFunc(out.Items, func(a, b Lockout) int {
				return strings.Compare(a.Kind+"\x00"+a.Name, b.Kind+"\x00"+b.Name)
			})
			out.Total = len(out.Items)
			return out, nil
		})
	s.route(Route{Method: "DELETE", Pattern: base + "/{name}", OperationID: "clearLockout", Tag: "lockouts",
		Summary: "Clear a locked-out account's lock and failed logons", Status: http.StatusNoContent,
		Query: []QueryParam{{Name: "kind", Description: "user (the default) or admin."}}},
		func(r *http.Request) (any, error) {
			kind := r.URL.Query().Get("kind")
			switch kind {
			case "":
				kind = lockoutUser
			case lockoutUser, lockoutAdmin:
			default:
				return nil, site.Errorf(site.EInvalid, "kind %q is not user or admin", kind)
			}
			name := r.PathValue("name")
			was := false
			if s.cfg.Broker != nil {
				var err error
				if was, err = s.cfg.Broker.Unlock(r.Context(), kind, name); err != nil {
					return nil, err
				}
			} else {
				was = s.cfg.Guard.Unlock(kind + "\x00" + name)
			}
			if !was {
				return nil, site.Errorf(site.ENotFound, "%s %q is not locked out", kind, name)
			}
			s.log.InfoContext(r.Context(), "lock-out cleared", "kind", kind, "account", name, "by", adminFrom(r.Context()))
			return nil, nil
		})
}
