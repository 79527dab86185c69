package api

import (
	"context"
	"net/http"
	"reflect"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// Brokers is what a broker knows of its site's brokers, as the admin API
// lists them (a *server.Server's).
type Brokers interface {
	// Brokers returns every broker of the site's registry, itself
	// included, in zone and name order; EUnavailable when neither the site
	// DB nor the local copy can be read.
	Brokers(ctx context.Context) ([]BrokerStatus, error)
}

// The states of a BrokerStatus.
const (
	BrokerUp   = "up"   // seen alive within the registry's timeout
	BrokerLost = "lost" // not seen alive for longer: stopped, or cut off
)

// The LHC values of a BrokerStatus.
const (
	LHCNone    = "none"    // the broker serves an embedded site DB: it has no Local Host Cache
	LHCNormal  = "normal"  // it brokers from the site DB
	LHCOutage  = "outage"  // it brokers from its local copy
	LHCUnknown = "unknown" // a peer that did not answer (or prove) its state
)

// BrokerStatus is one broker of the site, as the broker answering sees it.
type BrokerStatus struct {
	Name    string `json:"name"`
	Zone    string `json:"zone"`
	Address string `json:"address"`
	// State is "up" when the broker said it was alive (its record's
	// LastSeen) within the registry's timeout, else "lost".
	State string `json:"state"`
	// LastSeen is its last heartbeat in the registry; LastContact, when
	// this broker last had an answer from it as a peer (zero: never, or
	// it is this broker).
	LastSeen    time.Time `json:"last_seen,omitzero"`
	LastContact time.Time `json:"last_contact,omitzero"`
	StartedAt   time.Time `json:"started_at,omitzero"`
	// Self is true for the broker answering.
	Self bool `json:"self"`
	// ZoneLeader is true for the broker that leads its zone while the
	// site DB is down: in an outage, the one this broker hands its
	// brokering to (or itself); otherwise the one that would lead, the
	// first of its zone by name among those up.
	ZoneLeader bool `json:"zone_leader"`
	// LHC is its Local Host Cache's state: "none", "normal", "outage" or
	// "unknown".
	LHC string `json:"lhc"`
}

// registerBrokers adds the list of the site's brokers.
func (s *Server) registerBrokers() {
	s.route(Route{Method: "GET", Pattern: adminPrefix + "/brokers", OperationID: "listBrokers", Tag: "brokers",
		Summary: "The site's brokers, from the broker registry and what this broker knows of its peers: zone, address, " +
			"state (up or lost), last heartbeat and peer contact, which one leads its zone, and its Local Host Cache's state",
		Response: reflect.TypeFor[BrokerStatus](), List: true},
		func(r *http.Request) (any, error) {
			if s.cfg.Brokers == nil {
				return nil, errNoBrokers
			}
			list, err := s.cfg.Brokers.Brokers(r.Context())
			if err != nil {
				return nil, err
			}
			if list == nil {
				list = []BrokerStatus{}
			}
			return ListResponse[BrokerStatus]{Items: list, Total: len(list)}, nil
		})
}

var errNoBrokers = site.Errorf(site.EUnavailable, "this server keeps no broker registry")
