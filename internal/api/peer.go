package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"reflect"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/lhc"
	"github.com/usher-vdi/usher/internal/site"
)

// The peer API is what brokers of a site ask each other: while the site
// DB is down, the brokers of a zone hand their launches, reconnections,
// logoffs and users' session lists to the zone's leader. A peer request
// carries a bearer token of audience PeerAudience, signed with the site's
// token key, whose subject is PeerSubject of the request's body: it
// opens no other request, and none for long.
const (
	PeerAudience = "peer"
	// PeerTokenTTL bounds a peer token's life. Brokers' clocks must agree
	// within it, hence its length: the token opens only the request it
	// was signed for, whose replay repeats that request.
	PeerTokenTTL = 10 * time.Minute
	peerPrefix   = "/api/v1/peer"
)

// PeerSubject is the subject of a peer token for a request body.
func PeerSubject(body []byte) string {
	sum := sha256.Sum256(body)
	return "body:" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// PeerToken signs a peer request's body.
func PeerToken(s *auth.Signer, body []byte) string {
	token, _ := s.Issue(PeerSubject(body), PeerAudience, PeerTokenTTL)
	return token
}

// PeerRequest is a request a broker hands to its zone's leader, for User,
// whom it has authenticated.
type PeerRequest struct {
	User          string `json:"user"`
	Resource      string `json:"resource,omitempty"`
	SessionID     string `json:"session_id,omitempty"`
	ClientName    string `json:"client_name,omitempty"`
	ClientAddress string `json:"client_address,omitempty"`
}

// PeerLaunch is a launch as the leader placed it.
type PeerLaunch struct {
	Session     site.Session `json:"session"`
	Address     string       `json:"address"`
	Protocol    string       `json:"protocol"`
	Ticket      string       `json:"ticket"`
	ExpiresAt   time.Time    `json:"expires_at"`
	Reconnected bool         `json:"reconnected"`
}

// PeerState is what a broker tells its peers of itself.
type PeerState struct {
	Name string `json:"name"`
	// Outage is set while the broker brokers from its local copy.
	Outage bool `json:"outage"`
}

// PeerSessions lists a user's live sessions.
type PeerSessions struct {
	Sessions []site.Session `json:"sessions"`
}

// authenticatePeer checks a peer token against the request's body.
func (s *Server) authenticatePeer(r *http.Request) error {
	token := bearer(r)
	if token == "" {
		return errUnauthorized
	}
	var body []byte
	if r.Body != nil {
		var err error
		if body, err = io.ReadAll(r.Body); err != nil {
			return err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	c, err := s.cfg.Signer.Verify(token, PeerAudience)
	if err != nil || c.Subject != PeerSubject(body) {
		s.log.WarnContext(r.Context(), "peer request refused: bad token", "remote", clientIP(r))
		return errUnauthorized
	}
	return nil
}

// registerPeer adds the peer API.
func (s *Server) registerPeer() {
	peer := func(op string, resp reflect.Type, h func(ctx context.Context, req PeerRequest) (any, error)) {
		s.route(Route{Method: "POST", Pattern: peerPrefix + "/" + op, OperationID: "peer" + op, Tag: "peer", Auth: AuthPeer,
			Summary: "Between brokers: " + op + " for a user that the calling broker authenticated (a zone's leader while the site DB is down)",
			Request: reflect.TypeFor[PeerRequest](), Response: resp},
			func(r *http.Request) (any, error) {
				var req PeerRequest
				if err := decodeJSON(r, &req); err != nil {
					return nil, err
				}
				if req.User == "" {
					return nil, site.Errorf(site.EInvalid, "peer request: no user")
				}
				// Brokered here: the request never goes round between
				// brokers that disagree on their leader.
				return h(broker.Here(r.Context()), req)
			})
	}
	launched := func(l *broker.Launch, err error) (any, error) {
		if err != nil {
			return nil, err
		}
		return PeerLaunch{Session: l.Session, Address: l.Address, Protocol: l.Protocol, Ticket: l.Ticket,
			ExpiresAt: l.ExpiresAt, Reconnected: l.Reconnected}, nil
	}
	b := s.cfg.Broker
	peer("launch", reflect.TypeFor[PeerLaunch](), func(ctx context.Context, req PeerRequest) (any, error) {
		return launched(b.Launch(ctx, broker.LaunchRequest{User: req.User, Resource: req.Resource,
			ClientName: req.ClientName, ClientAddress: req.ClientAddress}))
	})
	peer("reconnect", reflect.TypeFor[PeerLaunch](), func(ctx context.Context, req PeerRequest) (any, error) {
		return launched(b.Reconnect(ctx, req.User, req.SessionID, req.ClientName))
	})
	peer("logoff", nil, func(ctx context.Context, req PeerRequest) (any, error) {
		return nil, b.Logoff(ctx, req.User, req.SessionID)
	})
	peer("disconnect", nil, func(ctx context.Context, req PeerRequest) (any, error) {
		return nil, b.Disconnect(ctx, req.User, req.SessionID)
	})
	s.route(Route{Method: "POST", Pattern: peerPrefix + "/state", OperationID: "peerState", Tag: "peer", Auth: AuthPeer,
		Summary: "Between brokers: whether this broker brokers from its local copy", Response: reflect.TypeFor[PeerState]()},
		func(r *http.Request) (any, error) {
			if s.cfg.Outage == nil {
				return nil, errNoLHC
			}
			return PeerState{Name: s.cfg.BrokerName, Outage: s.cfg.Outage.Status().Mode == lhc.Outage}, nil
		})
	s.route(Route{Method: "POST", Pattern: peerPrefix + "/learn", OperationID: "peerLearn", Tag: "peer", Auth: AuthPeer,
		Summary: "Between brokers: the sessions a broker wrote before handing its brokering to its zone's leader",
		Request: reflect.TypeFor[lhc.Handover](), Status: http.StatusNoContent},
		func(r *http.Request) (any, error) {
			var req lhc.Handover
			if err := decodeJSON(r, &req); err != nil {
				return nil, err
			}
			if s.cfg.Outage == nil {
				return nil, errNoLHC
			}
			return nil, s.cfg.Outage.Learn(r.Context(), req)
		})
	peer("sessions", reflect.TypeFor[PeerSessions](), func(ctx context.Context, req PeerRequest) (any, error) {
		list, err := b.UserSessions(ctx, req.User)
		if err != nil {
			return nil, err
		}
		return PeerSessions{Sessions: list}, nil
	})
}
