package nfuse

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
)

// address launches an application (Name/AppName), or reconnects to one of
// the user's sessions (Name/SessionName with a SessionId), through the
// broker, and answers as a 7.x broker does: with everything a client needs
// to connect (address, ticket, launch reference, session sharing key), so
// that no RequestTicket needs to follow. A session is named by its
// SessionId (its InName and HostId are not checked), and the broker may
// return the user to another session of the same delivery group, as its
// reconnection policy says. Other Names (a server, a farm, nothing) are
// not supported and answer unspecified, as does an application that does
// not exist or that the user may not use.
func (h *Handler) address(ctx context.Context, x *exchange) []byte {
	snap := h.broker.Snapshot()
	u, failed := h.logon(ctx, x, snap)
	if failed != nil {
		return failed
	}
	name := x.req.Name
	var l *broker.Launch
	var err error
	switch {
	case name.Session != nil && name.Session.SessionID != "":
		l, err = h.broker.Reconnect(ctx, u.Name, name.Session.SessionID, x.req.ClientName)
	case name.AppName != "" || (name.Session != nil && name.Session.InName != ""):
		app := name.AppName
		if app == "" {
			app = name.Session.InName
		}
		res, ok := entitledResource(h.broker.EntitlementsOf(snap, u.Name), app)
		if !ok {
			return h.fail(x, broker.ErrNotEntitled)
		}
		l, err = h.broker.Launch(ctx, broker.LaunchRequest{User: u.Name, Resource: res.Name,
			ClientName: x.req.ClientName, ClientAddress: clientAddress(x)})
	default:
		return h.fail(x, errUnsupported)
	}
	if err != nil {
		return h.fail(x, err)
	}
	p := &pendingLaunch{user: u.Name, ticket: l.Ticket, tag: randomHex(16), ref: randomHex(16), expires: l.ExpiresAt}
	h.launches.add(p)

	addr := hostPortAddress(l.Address)
	x.begin()
	x.w.startAttrs("ServerAddress", "addresstype", addr.Type)
	x.w.b = appendEscaped(x.w.b, addr.Value)
	x.w.end("ServerAddress")
	x.w.elem("ServerType", serverType)
	x.w.elem("ConnectionType", connectionType)
	x.w.elem("ClientType", clientType)
	x.w.elem("TicketTag", p.tag)
	// The broker does not tell the chosen host's load; 0 says "not loaded".
	x.w.elem("FarmLoadHint", "0")
	if l.Protocol == "ica" {
		x.w.startAttrs("CGPAddress", "addresstype", "port")
		x.w.raw(cgpPort)
		x.w.end("CGPAddress")
	}
	x.w.elem("Ticket", l.Ticket)
	x.w.elem("LaunchRef", p.ref)
	x.w.elem("SessionSharingKey", sharingKey(snap, l))
	return x.finish()
}

// entitledResource finds an application or desktop among the user's by
// its internal name, exactly or else in any case.
func entitledResource(e *broker.Entitlements, name string) (*site.Resource, bool) {
	var folded *site.Resource
	for _, r := range e.Resources {
		if r.Name == name {
			return r, true
		}
		if folded == nil && strings.EqualFold(r.Name, name) {
			folded = r
		}
	}
	return folded, folded != nil
}

// sharingKey tells clients which launches may share a session: a user's
// applications of one delivery group share theirs; a desktop has its own.
func sharingKey(snap *broker.Snapshot, l *broker.Launch) string {
	s := l.Session
	scope := s.DeliveryGroup
	if r, ok := snap.Resource(s.Resource); !ok || r.Kind == site.Desktop {
		scope += "\x00" + s.Resource
	}
	sum := sha256.Sum256([]byte("usher session sharing\x00" + s.User + "\x00" + scope))
	return strings.ToUpper(hex.EncodeToString(sum[:16]))
}

// redeem answers RequestTicket (with the launch's Ticket) and
// RequestLaunchRef (with its LaunchRef) for older clients, which ask for
// them after RequestAddress. The launch is named by the TicketTag or
// LaunchRef of the ResponseAddress, must be the same user's, and can be
// redeemed once; an unknown, expired, spent or another user's launch
// answers unspecified alike.
func (h *Handler) redeem(ctx context.Context, x *exchange) []byte {
	snap := h.broker.Snapshot()
	u, failed := h.logon(ctx, x, snap)
	if failed != nil {
		return failed
	}
	key := x.req.TicketTag
	if key == "" {
		key = x.req.LaunchRef
	}
	p, ok := h.launches.take(key, u.Name)
	if !ok {
		return h.fail(x, errNotFound)
	}
	x.begin()
	if x.kind == KindTicket {
		x.w.elem("Ticket", p.ticket)
		x.w.elem("TicketTag", p.tag)
	} else {
		x.w.elem("LaunchRef", p.ref)
		x.w.elem("Ticket", p.ticket)
	}
	return x.finish()
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))
}

// pendingLaunch is a launch that an older client may still redeem.
type pendingLaunch struct {
	user, ticket, tag, ref string
	expires                time.Time
}

// launches remembers recent launches by TicketTag and LaunchRef, at most
// max of them, each until its ticket expires or it is redeemed. When full,
// the oldest goes first.
type launches struct {
	now func() time.Time

	mu    sync.Mutex
	byKey map[string]*pendingLaunch
	// ring holds launches in the order added; spent ones stay until their
	// turn comes.
	ring       []*pendingLaunch
	head, size int
}

func newLaunches(max int, now func() time.Time) *launches {
	return &launches{now: now, byKey: map[string]*pendingLaunch{}, ring: make([]*pendingLaunch, max)}
}

func (l *launches) add(p *pendingLaunch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for l.size > 0 {
		oldest := l.ring[l.head]
		if l.size < len(l.ring) && now.Before(oldest.expires) {
			break
		}
		l.forget(oldest)
		l.ring[l.head] = nil
		l.head = (l.head + 1) % len(l.ring)
		l.size--
	}
	l.ring[(l.head+l.size)%len(l.ring)] = p
	l.size++
	l.byKey[p.tag] = p
	l.byKey[p.ref] = p
}

// take returns and forgets the user's unexpired launch with the key.
func (l *launches) take(key, user string) (*pendingLaunch, bool) {
	if key == "" {
		return nil, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.byKey[key]
	if !ok || p.user != user || !l.now().Before(p.expires) {
		return nil, false
	}
	l.forget(p)
	return p, true
}

func (l *launches) forget(p *pendingLaunch) {
	if l.byKey[p.tag] == p {
		delete(l.byKey, p.tag)
	}
	if l.byKey[p.ref] == p {
		delete(l.byKey, p.ref)
	}
}

// len returns the launches that may still be redeemed, for tests.
func (l *launches) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byKey) / 2
}
