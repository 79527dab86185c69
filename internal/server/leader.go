package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/lhc"
	"github.com/usher-vdi/usher/internal/site"
)

// How a zone's brokers find their leader while the site DB is down.
const (
	// leaderEvery is how often a broker in outage mode looks for its
	// zone's leader; leaderProbe bounds each probe of a peer.
	leaderEvery = 300 * time.Millisecond
	leaderProbe = 500 * time.Millisecond
	// leaderLost is how long the leader may leave probes unanswered
	// before this broker stops handing it requests: one probe lost to a
	// loaded machine must not split the zone in two, each broker seating
	// launches that the other does not know of.
	leaderLost = 2 * time.Second
	// peerTimeout bounds a request handed to the leader.
	peerTimeout = 10 * time.Second
)

// zoneLeader chooses the zone's leader while the broker brokers from its
// local copy, and carries requests to it (broker.Delegate). The leader is
// the first broker of the zone, by name, among this one and the peers of
// the copy's broker registry that answer: every broker that reaches the
// same peers chooses the same one, and a leader that stops answering is
// replaced at the next look. While the site DB answers, every broker
// brokers for itself.
type zoneLeader struct {
	self, zone string
	lh         *lhc.Store
	signer     *auth.Signer
	client     *http.Client
	scheme     string // of the peers' URLs: http or https
	log        *slog.Logger

	mu        sync.Mutex
	leader    site.BrokerRecord
	elsewhere bool
	// heard is when the leader last answered a probe.
	heard time.Time
	// told is the leader this broker handed its sessions to: until then
	// requests for the leader wait (answer retry shortly).
	told string
}

var _ broker.Delegate = (*zoneLeader)(nil)

func newZoneLeader(self, zone string, lh *lhc.Store, signer *auth.Signer, client *http.Client, scheme string, log *slog.Logger) *zoneLeader {
	return &zoneLeader{self: self, zone: zone, lh: lh, signer: signer, log: log.With("component", "zone-leader"),
		client: client, scheme: scheme}
}

func (z *zoneLeader) Leader() (string, bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.leader.Name, z.elsewhere
}

// run looks for the leader every leaderEvery while in outage mode.
func (z *zoneLeader) run(ctx context.Context) {
	t := time.NewTicker(leaderEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if z.lh.InOutage() {
			z.elect(ctx)
			continue
		}
		// Back on the site DB, this broker still hands its brokering to
		// a leader that brokers from its copy, until the leader is back
		// too (or gone): the zone leaves outage mode as one, and no
		// launch here misses a session the leader holds.
		z.mu.Lock()
		leader, elsewhere := z.leader, z.elsewhere
		z.mu.Unlock()
		if elsewhere {
			st, ok := z.state(ctx, leader)
			if ok && st.Outage {
				z.answered()
				continue
			}
			if !ok && !z.silent() {
				continue
			}
		}
		z.set(site.BrokerRecord{Name: z.self}, false)
		z.mu.Lock()
		z.told = ""
		z.mu.Unlock()
	}
}

// elect probes the peers named before this broker, in name order, and
// takes the first that answers for leader; none: this broker leads.
func (z *zoneLeader) elect(ctx context.Context) {
	var peers []site.BrokerRecord
	err := z.lh.View(ctx, func(tx site.Tx) error {
		p, err := tx.Brokers().List(ctx, site.ListOptions{})
		peers = p.Items
		return err
	})
	if err != nil {
		z.log.Warn("read the zone's brokers", "err", err)
		return
	}
	slices.SortFunc(peers, func(a, b site.BrokerRecord) int { return strings.Compare(a.Name, b.Name) })
	z.mu.Lock()
	was, wasElsewhere := z.leader.Name, z.elsewhere
	z.mu.Unlock()
	for _, p := range peers {
		if p.Zone != z.zone || p.Name >= z.self || p.Address == "" {
			continue
		}
		if _, ok := z.state(ctx, p); ok {
			z.set(p, true)
			z.tell(ctx, p)
			return
		}
		if wasElsewhere && p.Name == was && !z.silent() {
			// Not answering for a moment: still the leader.
			return
		}
	}
	if wasElsewhere {
		// The leader this broker handed its brokering to stopped
		// answering: what it brokered is known again only as its VDAs
		// come here, and a leader found again later is handed this
		// broker's sessions anew.
		z.log.Warn("the zone's leader stopped answering", "leader", was, "for", leaderLost)
		z.lh.Rebuild()
		z.mu.Lock()
		z.told = ""
		z.mu.Unlock()
	}
	z.set(site.BrokerRecord{Name: z.self}, false)
}

// answered records that the leader answered a probe.
func (z *zoneLeader) answered() {
	z.mu.Lock()
	z.heard = time.Now()
	z.mu.Unlock()
}

// handedOver reports whether requests go to the leader and it has this
// broker's sessions.
func (z *zoneLeader) handedOver() bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.elsewhere && z.told == z.leader.Name
}

// silent reports whether the leader has answered no probe for
// leaderLost.
func (z *zoneLeader) silent() bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return time.Since(z.heard) >= leaderLost
}

// tell hands the leader the sessions this broker wrote to the site DB
// since its copy was read, once per leader, so that the leader's launches
// find them (a user's session to go back to) before their VDAs report
// them.
func (z *zoneLeader) tell(ctx context.Context, leader site.BrokerRecord) {
	z.mu.Lock()
	done := z.told == leader.Name
	z.mu.Unlock()
	if done {
		return
	}
	body, err := z.lh.Handover(ctx)
	if err != nil {
		z.log.Warn("read this broker's sessions for the zone's leader", "err", err)
		return
	}
	if err := z.post(ctx, leader, "learn", body, nil); err != nil {
		z.log.Info("the zone's leader did not take this broker's recent sessions yet", "leader", leader.Name, "err", err)
		return
	}
	if err := z.lh.HandedOver(ctx, body); err != nil {
		z.log.Warn("record the machines handed to the zone's leader", "err", err)
	}
	z.mu.Lock()
	z.told = leader.Name
	z.mu.Unlock()
	z.answered() // a handover can take a while: the leader answered now
	z.log.Info("the zone's leader took this broker's sessions and machines", "leader", leader.Name, "sessions", len(body.Sessions),
		"machines", len(body.Machines))
}

// state asks a peer whether it brokers from its copy; ok is false when
// it does not answer.
func (z *zoneLeader) state(ctx context.Context, p site.BrokerRecord) (api.PeerState, bool) {
	ctx, cancel := context.WithTimeout(ctx, leaderProbe)
	defer cancel()
	var st api.PeerState
	if err := z.post(ctx, p, "state", struct{}{}, &st); err != nil {
		return st, false
	}
	return st, st.Name == p.Name
}

func (z *zoneLeader) set(leader site.BrokerRecord, elsewhere bool) {
	z.mu.Lock()
	changed := z.leader.Name != leader.Name || z.elsewhere != elsewhere
	quiet := z.leader.Name == "" && !elsewhere // the first look, at start
	z.leader, z.elsewhere = leader, elsewhere
	if elsewhere {
		z.heard = time.Now() // a leader is chosen as it answers
	}
	z.mu.Unlock()
	if changed && !quiet {
		switch {
		case elsewhere:
			z.log.Warn("the zone's leader brokers for this broker while the site DB is down", "leader", leader.Name, "address", leader.Address)
		case z.lh.InOutage():
			z.log.Warn("this broker leads its zone while the site DB is down", "zone", z.zone)
		default:
			z.log.Info("this broker brokers for itself again", "zone", z.zone)
		}
	}
}

// call hands a request to the leader and decodes its answer into out.
func (z *zoneLeader) call(ctx context.Context, op string, req api.PeerRequest, out any) error {
	z.mu.Lock()
	leader, elsewhere, told := z.leader, z.elsewhere, z.told
	z.mu.Unlock()
	switch {
	case !elsewhere:
		return site.Errorf(site.EUnavailable, "the zone's leader changed: retry")
	case told != leader.Name:
		return site.Errorf(site.EUnavailable, "this broker is handing its brokering to the zone's leader %q: retry", leader.Name)
	}
	err := z.post(ctx, leader, op, req, out)
	if err == nil || site.ErrorCode(err) != site.EUnavailable {
		z.answered() // the leader answered, if only to refuse
	}
	return err
}

// post sends a peer request to the leader and decodes its answer into out.
func (z *zoneLeader) post(ctx context.Context, leader site.BrokerRecord, op string, req, out any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, z.scheme+"://"+leader.Address+"/api/v1/peer/"+op, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+api.PeerToken(z.signer, body))
	resp, err := z.client.Do(hr)
	if err != nil {
		return site.Errorf(site.EUnavailable, "the zone's leader %q does not answer: retry", leader.Name)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return site.Errorf(site.EUnavailable, "the zone's leader %q: %v", leader.Name, err)
	}
	if resp.StatusCode >= 300 {
		var e api.ErrorBody
		if json.Unmarshal(raw, &e) == nil && e.Error.Code != "" {
			return site.Errorf(e.Error.Code, "%s", e.Error.Message)
		}
		return fmt.Errorf("the zone's leader %q: %s", leader.Name, resp.Status)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("the zone's leader %q: %w", leader.Name, err)
	}
	return nil
}

func (z *zoneLeader) launched(ctx context.Context, op string, req api.PeerRequest) (*broker.Launch, error) {
	var l api.PeerLaunch
	if err := z.call(ctx, op, req, &l); err != nil {
		return nil, err
	}
	return &broker.Launch{Session: l.Session, Address: l.Address, Protocol: l.Protocol, Ticket: l.Ticket,
		ExpiresAt: l.ExpiresAt, Reconnected: l.Reconnected}, nil
}

func (z *zoneLeader) Launch(ctx context.Context, req broker.LaunchRequest) (*broker.Launch, error) {
	return z.launched(ctx, "launch", api.PeerRequest{User: req.User, Resource: req.Resource, ClientName: req.ClientName,
		ClientAddress: req.ClientAddress})
}

func (z *zoneLeader) Reconnect(ctx context.Context, user, id, clientName string) (*broker.Launch, error) {
	return z.launched(ctx, "reconnect", api.PeerRequest{User: user, SessionID: id, ClientName: clientName})
}

func (z *zoneLeader) Logoff(ctx context.Context, user, id string) error {
	return z.call(ctx, "logoff", api.PeerRequest{User: user, SessionID: id}, nil)
}

func (z *zoneLeader) Disconnect(ctx context.Context, user, id string) error {
	return z.call(ctx, "disconnect", api.PeerRequest{User: user, SessionID: id}, nil)
}

func (z *zoneLeader) UserSessions(ctx context.Context, user string) ([]site.Session, error) {
	var out api.PeerSessions
	if err := z.call(ctx, "sessions", api.PeerRequest{User: user}, &out); err != nil {
		return nil, err
	}
	return out.Sessions, nil
}
