package server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/lhc"
	"github.com/usher-vdi/usher/internal/lhc/peer"
	"github.com/usher-vdi/usher/internal/site"
)

// recorded is a request as a stranger or a proxy between brokers saw it.
type recorded struct {
	Path   string
	Header http.Header
	Body   []byte
}

// requestLog keeps the requests seen.
type requestLog struct {
	mu   sync.Mutex
	reqs []recorded
}

func (l *requestLog) add(r *http.Request) []byte {
	body, _ := io.ReadAll(r.Body)
	l.mu.Lock()
	l.reqs = append(l.reqs, recorded{Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	l.mu.Unlock()
	return body
}

func (l *requestLog) all() []recorded {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]recorded(nil), l.reqs...)
}

// find returns the first request seen for path.
func (l *requestLog) find(path string) (recorded, bool) {
	for _, r := range l.all() {
		if r.Path == path {
			return r, true
		}
	}
	return recorded{}, false
}

// serve serves h on ln until the test ends.
func serve(t *testing.T, ln net.Listener, h http.Handler) {
	t.Helper()
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
}

// countingHandler counts the records whose message holds match, and
// hands every record on.
type countingHandler struct {
	slog.Handler
	match string
	n     *atomic.Int64
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.n.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{Handler: h.Handler.WithAttrs(as), match: h.match, n: h.n}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{Handler: h.Handler.WithGroup(name), match: h.match, n: h.n}
}

// freshCopies makes both brokers' local copies again, from a site DB
// whose broker registry holds both (a copy made as a broker started may
// predate the other's record), with what change did to the site DB
// first, and returns once both copies are made.
func (z *zoneOfTwo) freshCopies(t *testing.T, change func(ctx context.Context, tx site.Tx) error) {
	t.Helper()
	ctx := context.Background()
	copies := map[string]*lhc.Store{"a": z.a.LHC(), "b": z.b.LHC()}
	versions := map[string]int64{}
	for name, s := range copies {
		versions[name] = s.Status().CopyVersion
	}
	start := time.Now()
	err := z.a.Store().Update(ctx, func(tx site.Tx) error {
		if change != nil {
			if err := change(ctx, tx); err != nil {
				return err
			}
		}
		// A configuration change, for both copies to be made again.
		return tx.Zones().Create(ctx, site.Zone{Name: "fresh-copies"})
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range copies {
		waitFor(t, 30*time.Second, "broker "+name+"'s fresh copy", func() bool {
			st := s.Status()
			return st.CopyVersion != versions[name] && st.CopyAt.After(start)
		})
	}
}

// TestPeerStrangerAtLeadersAddress replays the attack of issue 33: the
// zone's leader stops during an outage, and a stranger takes its address
// and answers the peer API with the leader's name (and, were it asked,
// launches with its own host and ticket). The other broker must not take
// it for the leader, must hand it nothing (no handover: no machine's
// control token or credential), and logs its failed proof once, not at
// every probe.
func TestPeerStrangerAtLeadersAddress(t *testing.T) {
	t.Parallel()
	var proofLogs atomic.Int64
	logB := slog.New(countingHandler{Handler: testLogger(t).Handler(), match: "failed its proof", n: &proofLogs})
	z := newZoneOfTwoWith(t, zoneOptions{logB: logB})
	z.freshCopies(t, nil)
	z.cs.wan.Cut()
	waitFor(t, 30*time.Second, "broker b handing its zone to a", z.delegating)
	waitFor(t, 30*time.Second, "broker b handing its sessions to a", z.b.HandedOver)

	addr := z.a.Addr()
	if err := z.a.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "broker b leading once a stopped", func() bool {
		_, elsewhere := z.b.Broker().Leader()
		return !elsewhere
	})

	// The stranger at a's registered address.
	var ln net.Listener
	waitFor(t, 10*time.Second, "a's address free for the stranger", func() bool {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err == nil
	})
	var seen requestLog
	var probes atomic.Int64
	var delegated atomic.Bool
	serve(t, ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.add(r)
		if leader, elsewhere := z.b.Broker().Leader(); elsewhere && leader == "lhc-a" {
			delegated.Store(true)
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case peer.Prefix + peer.OpState:
			probes.Add(1)
			io.WriteString(w, `{"name":"lhc-a","outage":true}`)
		case peer.Prefix + peer.OpLaunch, peer.Prefix + peer.OpReconnect:
			io.WriteString(w, `{"session":{"id":"stranger"},"address":"203.0.113.9:3389","protocol":"rdp","ticket":"stranger-ticket"}`)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	waitFor(t, 20*time.Second, "five probes of the stranger", func() bool { return probes.Load() >= 5 })

	if delegated.Load() || z.delegating() {
		t.Error("broker b took the stranger at a's address for the zone's leader")
	}
	for _, r := range seen.all() {
		if !strings.HasPrefix(r.Path, peer.Prefix) {
			// The VDAs that list a come to the stranger too: whether an
			// agent proves its broker is the VDA protocol's concern, not
			// the brokers'.
			continue
		}
		if r.Path != peer.Prefix+peer.OpState {
			t.Errorf("the stranger was sent %s", r.Path)
		}
		for _, secret := range []string{"control_token", "credential", "sessions"} {
			if bytes.Contains(r.Body, []byte(secret)) {
				t.Errorf("the stranger was sent a body with %q: %s", secret, r.Body)
			}
		}
	}
	if got := proofLogs.Load(); got != 1 {
		t.Errorf("the stranger's failed proof logged %d times over %d probes, want once", got, probes.Load())
	}
}

// recordingProxy is a proxy between brokers that records what passes,
// as one who sniffs the wire would.
type recordingProxy struct {
	requestLog
	addr string
}

func startRecordingProxy(t *testing.T, target string) *recordingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &recordingProxy{addr: ln.Addr().String()}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: target})
	serve(t, ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := p.add(r)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	}))
	return p
}

// resend sends a recorded request again, to the broker at addr, at path.
func resend(t *testing.T, addr, path string, r recorded) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, bytes.NewReader(r.Body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestPeerTokenReplayed: a peer request captured between two running
// brokers (a launch that b hands to its zone's leader a) is sent again:
// twice to a, to b, and to a as another operation. Each is refused: a
// peer token opens one request, once, at one broker.
func TestPeerTokenReplayed(t *testing.T) {
	t.Parallel()
	var proxy *recordingProxy
	z := newZoneOfTwoWith(t, zoneOptions{advertiseA: func(listen string) string {
		proxy = startRecordingProxy(t, listen)
		return proxy.addr
	}})
	z.freshCopies(t, nil)
	h := newHistory()
	stop := z.load(h, z.a.URL)
	defer stop()
	z.cs.wan.Cut()
	waitFor(t, 30*time.Second, "broker b handing its zone to a", z.delegating)
	const launch = peer.Prefix + peer.OpLaunch
	waitFor(t, 30*time.Second, "a launch handed to a", func() bool { _, ok := proxy.find(launch); return ok })
	got, _ := proxy.find(launch)

	for i := range 2 {
		status, body := resend(t, z.a.Addr(), launch, got)
		if status != http.StatusUnauthorized || !strings.Contains(body, "used before") {
			t.Errorf("launch replayed to a (%d): %d %s, want 401 used before", i+1, status, body)
		}
	}
	if status, body := resend(t, z.b.Addr(), launch, got); status != http.StatusUnauthorized || !strings.Contains(body, "another broker") {
		t.Errorf("a's launch sent to b: %d %s, want 401 for another broker", status, body)
	}
	for _, op := range []string{peer.OpLogoff, peer.OpDisconnect, peer.OpReconnect} {
		if status, body := resend(t, z.a.Addr(), peer.Prefix+op, got); status != http.StatusUnauthorized || !strings.Contains(body, "another operation") {
			t.Errorf("a launch's token for %s: %d %s, want 401 for another operation", op, status, body)
		}
	}
	// A handover captured: sealed for a, and spent.
	if learn, ok := proxy.find(peer.Prefix + peer.OpLearn); ok {
		for _, secret := range []string{"control_token", "credential"} {
			if bytes.Contains(learn.Body, []byte(secret)) {
				t.Errorf("the handover crossed the wire readable: it holds %q", secret)
			}
		}
		if status, body := resend(t, z.a.Addr(), peer.Prefix+peer.OpLearn, learn); status != http.StatusUnauthorized {
			t.Errorf("handover replayed: %d %s, want 401", status, body)
		}
	} else {
		t.Error("no handover seen between b and a")
	}
}

// fakeCache is a local host cache in outage mode that learns nothing.
type fakeCache struct{}

func (fakeCache) InOutage() bool                            { return true }
func (fakeCache) Learn(context.Context, lhc.Handover) error { return nil }

// TestPeerStaleRecordNotCandidate: the broker registry holds a record
// named before both brokers of the zone, whose broker proves itself with
// the site's key, but whose record was last seen longer ago than the
// registry's timeout when the site DB went down. Neither broker takes it
// for the zone's leader, nor even asks it: a leads, b hands it its zone.
func TestPeerStaleRecordNotCandidate(t *testing.T) {
	t.Parallel()
	z := newZoneOfTwo(t)
	ctx := context.Background()
	key, err := site.EnsureSecret(ctx, z.a.Store(), site.SecretTokenKey, func() ([]byte, error) {
		return nil, errors.New("the site has no token key")
	})
	if err != nil {
		t.Fatal(err)
	}
	signer, err := auth.NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int64
	h, err := peer.NewHandler(peer.HandlerConfig{Name: "lhc-0", Key: signer.Derive("peer"), Broker: z.a.Broker(), LHC: fakeCache{},
		Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	stale := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		h.ServeHTTP(w, r)
	}))
	defer stale.Close()
	now := time.Now()
	rec := site.BrokerRecord{Name: "lhc-0", Zone: z.a.Zone(), Address: strings.TrimPrefix(stale.URL, "http://"), Instance: "gone",
		StartedAt: now.Add(-time.Hour), LastSeen: now.Add(-time.Minute)}
	// It proves itself: only its record's age keeps it from leading.
	c, err := peer.NewClient(peer.ClientConfig{Name: "lhc-test", Key: signer.Derive("peer")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.State(ctx, rec); err != nil {
		t.Fatalf("the stale record's broker does not prove itself: %v", err)
	}
	asked.Store(0)

	z.freshCopies(t, func(ctx context.Context, tx site.Tx) error { return tx.Brokers().Create(ctx, rec) })
	z.cs.wan.Cut()
	for _, s := range []*lhc.Store{z.a.LHC(), z.b.LHC()} {
		waitFor(t, 30*time.Second, "outage mode", s.InOutage)
	}
	waitFor(t, 30*time.Second, "broker b handing its zone to a", z.delegating)
	waitFor(t, 30*time.Second, "broker b handing its sessions to a", z.b.HandedOver)
	if leader, elsewhere := z.a.Broker().Leader(); elsewhere {
		t.Errorf("broker a hands its zone to %q", leader)
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the stale record's broker was asked %d times, want never", n)
	}
}
