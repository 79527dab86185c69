package peer

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/lhc"
	"github.com/usher-vdi/usher/internal/site"
)

// How a zone's brokers find their leader while the site DB is down.
const (
	// LeaderEvery is how often a broker in outage mode looks for its
	// zone's leader; leaderProbe bounds each probe of a peer.
	LeaderEvery = 300 * time.Millisecond
	leaderProbe = 500 * time.Millisecond
	// LeaderLost is how long the leader may leave probes unanswered
	// before this broker stops handing it requests: one probe lost to a
	// loaded machine must not split the zone in two, each broker seating
	// launches that the other does not know of.
	LeaderLost = 2 * time.Second
)

// Candidates returns the brokers of records that self would take for
// its zone's leader, in the order it tries them: those of zone named
// before self, with an address, whose record was alive within stale of
// asOf, when the registry was read from the site DB (the local copy's
// time; zero: the newest LastSeen of another broker's record). In an
// outage the registry is the local copy's, frozen when the copy was
// made, so its records age against that, not the clock, nor against
// this broker's own record, which it keeps alive in its copy: a record
// already older than stale then is a broker that had stopped without
// removing it (or a forged one), and is never a candidate.
func Candidates(records []site.BrokerRecord, self, zone string, asOf time.Time, stale time.Duration) []site.BrokerRecord {
	if asOf.IsZero() {
		for _, r := range records {
			if r.Name != self && r.LastSeen.After(asOf) {
				asOf = r.LastSeen
			}
		}
	}
	var out []site.BrokerRecord
	for _, r := range records {
		if r.Zone != zone || r.Name >= self || r.Address == "" || asOf.Sub(r.LastSeen) > stale {
			continue
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b site.BrokerRecord) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// LeaderConfig configures a Leader.
type LeaderConfig struct {
	// Name and Zone are this broker's.
	Name, Zone string
	LHC        *lhc.Store
	Client     *Client
	// Stale is the broker registry's timeout: a broker not seen alive
	// for it is taken for gone.
	Stale  time.Duration
	Logger *slog.Logger
}

// Leader chooses the zone's leader while the broker brokers from its
// local copy, and carries requests to it (broker.Delegate). The leader is
// the first broker of the zone, by name, among this one and the
// Candidates of the copy's broker registry that answer with their proof:
// every broker that reaches the same peers chooses the same one, and a
// leader that stops answering is replaced at the next look. While the
// site DB answers, every broker brokers for itself.
type Leader struct {
	cfg LeaderConfig
	log *slog.Logger

	mu        sync.Mutex
	leader    site.BrokerRecord
	elsewhere bool
	// heard is when the leader last answered a probe.
	heard time.Time
	// told is the leader this broker handed its sessions to: until then
	// requests for the leader wait (answer retry shortly).
	told string
	// candidates are the last candidates logged, if listed.
	candidates string
	listed     bool
	// unproven is, per peer, the address and instance of its last
	// failed proof, logged once.
	unproven map[string]string
}

var _ broker.Delegate = (*Leader)(nil)

// NewLeader returns the Leader of the broker cfg.Name; Run runs it.
func NewLeader(cfg LeaderConfig) *Leader {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Leader{cfg: cfg, log: cfg.Logger.With("component", "zone-leader"), unproven: map[string]string{}}
}

// Leader reports the zone's leader, and whether it is another broker.
func (z *Leader) Leader() (string, bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.leader.Name, z.elsewhere
}

// Run looks for the leader every LeaderEvery while in outage mode, until
// ctx ends.
func (z *Leader) Run(ctx context.Context) {
	t := time.NewTicker(LeaderEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if z.cfg.LHC.InOutage() {
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
		z.set(site.BrokerRecord{Name: z.cfg.Name}, false)
		z.mu.Lock()
		z.told = ""
		z.mu.Unlock()
	}
}

// elect probes the candidates in name order, and takes the first that
// proves its answer for leader; none: this broker leads.
func (z *Leader) elect(ctx context.Context) {
	var records []site.BrokerRecord
	err := z.cfg.LHC.View(ctx, func(tx site.Tx) error {
		p, err := tx.Brokers().List(ctx, site.ListOptions{})
		records = p.Items
		return err
	})
	if err != nil {
		z.log.Warn("read the zone's brokers", "err", err)
		return
	}
	z.mu.Lock()
	was, wasElsewhere := z.leader.Name, z.elsewhere
	z.mu.Unlock()
	candidates := Candidates(records, z.cfg.Name, z.cfg.Zone, z.cfg.LHC.Status().CopyAt, z.cfg.Stale)
	z.logCandidates(candidates)
	for _, p := range candidates {
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
		z.log.Warn("the zone's leader stopped answering", "leader", was, "for", LeaderLost)
		z.cfg.LHC.HoldNewSessions()
		z.mu.Lock()
		z.told = ""
		z.mu.Unlock()
	}
	z.set(site.BrokerRecord{Name: z.cfg.Name}, false)
}

// logCandidates logs the brokers this one would take for leader, when
// they change.
func (z *Leader) logCandidates(candidates []site.BrokerRecord) {
	names := make([]string, 0, len(candidates))
	for _, c := range candidates {
		names = append(names, c.Name)
	}
	list := strings.Join(names, ",")
	z.mu.Lock()
	changed := list != z.candidates || !z.listed
	z.candidates, z.listed = list, true
	z.mu.Unlock()
	if changed {
		z.log.Info("the zone's brokers that may lead before this one (named before it, in its zone, alive in the registry)",
			"zone", z.cfg.Zone, "candidates", names)
	}
}

// answered records that the leader answered a probe.
func (z *Leader) answered() {
	z.mu.Lock()
	z.heard = time.Now()
	z.mu.Unlock()
}

// HandedOver reports whether requests go to the leader and it has this
// broker's sessions.
func (z *Leader) HandedOver() bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.elsewhere && z.told == z.leader.Name
}

// silent reports whether the leader has answered no probe for
// LeaderLost.
func (z *Leader) silent() bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return time.Since(z.heard) >= LeaderLost
}

// tell hands the leader, which has just proved itself, the sessions this
// broker wrote to the site DB since its copy was read and its machines,
// once per leader, so that the leader's launches find them (a user's
// session to go back to) before their VDAs report them. The handover is
// sealed for the leader (Client.Handover).
func (z *Leader) tell(ctx context.Context, leader site.BrokerRecord) {
	z.mu.Lock()
	done := z.told == leader.Name
	z.mu.Unlock()
	if done {
		return
	}
	body, err := z.cfg.LHC.Handover(ctx)
	if err != nil {
		z.log.Warn("read this broker's sessions for the zone's leader", "err", err)
		return
	}
	if err := z.cfg.Client.Handover(ctx, leader, body); err != nil {
		z.log.Info("the zone's leader did not take this broker's recent sessions yet", "leader", leader.Name, "err", err)
		return
	}
	if err := z.cfg.LHC.HandedOver(ctx, body); err != nil {
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
// it does not answer with its proof. A failed proof is logged once per
// peer until the peer proves itself or fails otherwise.
func (z *Leader) state(ctx context.Context, p site.BrokerRecord) (State, bool) {
	ctx, cancel := context.WithTimeout(ctx, leaderProbe)
	defer cancel()
	st, err := z.cfg.Client.State(ctx, p)
	// What failed, as little as tells one change from another: not the
	// error's text, which may change with every probe.
	var failed string
	if errors.Is(err, ErrUnproven) {
		failed = p.Address + " " + p.Instance
	}
	z.mu.Lock()
	last := z.unproven[p.Name]
	if failed == "" {
		delete(z.unproven, p.Name)
	} else {
		z.unproven[p.Name] = failed
	}
	z.mu.Unlock()
	if failed != "" && failed != last {
		z.log.Warn("a peer failed its proof: not taken for the zone's leader", "peer", p.Name, "address", p.Address, "err", err)
	}
	return st, err == nil
}

func (z *Leader) set(leader site.BrokerRecord, elsewhere bool) {
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
		case z.cfg.LHC.InOutage():
			z.log.Warn("this broker leads its zone while the site DB is down", "zone", z.cfg.Zone)
		default:
			z.log.Info("this broker brokers for itself again", "zone", z.cfg.Zone)
		}
	}
}

// call hands a request to the leader and decodes its answer into out.
func (z *Leader) call(ctx context.Context, op string, req Request, out any) error {
	z.mu.Lock()
	leader, elsewhere, told := z.leader, z.elsewhere, z.told
	z.mu.Unlock()
	switch {
	case !elsewhere:
		return site.Errorf(site.EUnavailable, "the zone's leader changed: retry")
	case told != leader.Name:
		return site.Errorf(site.EUnavailable, "this broker is handing its brokering to the zone's leader %q: retry", leader.Name)
	}
	err := z.cfg.Client.Call(ctx, leader, op, req, out)
	if err == nil || site.ErrorCode(err) != site.EUnavailable && !errors.Is(err, ErrUnproven) {
		z.answered() // the leader answered, if only to refuse
	}
	if errors.Is(err, ErrUnproven) {
		// Not the leader's answer: the user is told to retry, never
		// what a stranger said.
		z.log.Warn("an answer from the zone's leader without its proof", "leader", leader.Name, "op", op, "err", err)
		return site.Errorf(site.EUnavailable, "the zone's leader %q did not prove its answer: retry", leader.Name)
	}
	return err
}

func (z *Leader) launched(ctx context.Context, op string, req Request) (*broker.Launch, error) {
	var l Launch
	if err := z.call(ctx, op, req, &l); err != nil {
		return nil, err
	}
	return &broker.Launch{Session: l.Session, Address: l.Address, Protocol: l.Protocol, Ticket: l.Ticket,
		ExpiresAt: l.ExpiresAt, Reconnected: l.Reconnected}, nil
}

func (z *Leader) Launch(ctx context.Context, req broker.LaunchRequest) (*broker.Launch, error) {
	return z.launched(ctx, OpLaunch, Request{User: req.User, Resource: req.Resource, ClientName: req.ClientName,
		ClientAddress: req.ClientAddress})
}

func (z *Leader) Reconnect(ctx context.Context, user, id, clientName string) (*broker.Launch, error) {
	return z.launched(ctx, OpReconnect, Request{User: user, SessionID: id, ClientName: clientName})
}

func (z *Leader) Logoff(ctx context.Context, user, id string) error {
	return z.call(ctx, OpLogoff, Request{User: user, SessionID: id}, nil)
}

func (z *Leader) Disconnect(ctx context.Context, user, id string) error {
	return z.call(ctx, OpDisconnect, Request{User: user, SessionID: id}, nil)
}

func (z *Leader) UserSessions(ctx context.Context, user string) ([]site.Session, error) {
	var out Sessions
	if err := z.call(ctx, OpSessions, Request{User: user}, &out); err != nil {
		return nil, err
	}
	return out.Sessions, nil
}

func (z *Leader) DisplayTarget(ctx context.Context, user, id string) (broker.Control, error) {
	var d Display
	if err := z.call(ctx, OpDisplay, Request{User: user, SessionID: id}, &d); err != nil {
		return broker.Control{}, err
	}
	return broker.Control{Machine: d.Machine, URL: d.URL, Pin: d.Pin}, nil
}
