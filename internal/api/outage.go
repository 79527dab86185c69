package api

import (
	"context"
	"net/http"
	"reflect"

	"github.com/usher-vdi/usher/internal/lhc"
	"github.com/usher-vdi/usher/internal/site"
)

// Outage is the Local Host Cache of a broker of a PostgreSQL site, as the
// admin API sees and forces it.
type Outage interface {
	Status() lhc.Status
	Force(ctx context.Context, on bool) (lhc.Status, error)
	// Journaled counts the sessions waiting to be written back.
	Journaled(ctx context.Context) (int, error)
}

// OutageRequest forces outage mode on or off.
type OutageRequest struct {
	Forced bool `json:"forced"`
}

// registerOutage adds the outage-mode operations: this broker's state,
// and forcing it (Citrix's OutageModeForced), for disaster-recovery tests
// and site DB maintenance.
func (s *Server) registerOutage() {
	base := adminPrefix + "/outage"
	s.route(Route{Method: "GET", Pattern: base, OperationID: "getOutage", Tag: "outage",
		Summary: "This broker's Local Host Cache: whether it brokers from the site DB or its local copy, and why", Response: reflect.TypeFor[lhc.Status]()},
		func(r *http.Request) (any, error) {
			if s.cfg.Outage == nil {
				return nil, errNoLHC
			}
			st := s.cfg.Outage.Status()
			n, err := s.cfg.Outage.Journaled(r.Context())
			if err != nil {
				return nil, err
			}
			st.Journaled = n
			return st, nil
		})
	s.route(Route{Method: "PUT", Pattern: base, OperationID: "forceOutage", Tag: "outage",
		Summary: "Force outage mode on (broker from the local copy, leaving the site DB alone) or off", Request: reflect.TypeFor[OutageRequest](),
		Response: reflect.TypeFor[lhc.Status]()},
		func(r *http.Request) (any, error) {
			if s.cfg.Outage == nil {
				return nil, errNoLHC
			}
			var req OutageRequest
			if err := decodeJSON(r, &req); err != nil {
				return nil, err
			}
			s.log.WarnContext(r.Context(), "outage mode forced through the admin API", "forced", req.Forced, "by", adminFrom(r.Context()))
			return s.cfg.Outage.Force(r.Context(), req.Forced)
		})
}

var errNoLHC = site.Errorf(site.ENotFound, "this broker has no Local Host Cache: it serves an embedded site DB, which cannot be cut off from it")
