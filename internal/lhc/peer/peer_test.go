package peer

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/lhc"
	"github.com/usher-vdi/usher/internal/site"
)

func TestCandidates(t *testing.T) {
	at := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	rec := func(name, zone string, seen time.Duration) site.BrokerRecord {
		return site.BrokerRecord{Name: name, Zone: zone, Address: name + ":80", Instance: "i", LastSeen: at.Add(seen)}
	}
	noAddress := rec("b2", "z", 0)
	noAddress.Address = ""
	records := []site.BrokerRecord{
		rec("b3", "z", time.Hour),      // self's, kept alive in its copy
		rec("b1", "z", -2*time.Second), // alive
		rec("b0", "z", -time.Minute),   // stale
		rec("a9", "other", 0),          // another zone
		noAddress,
		rec("b4", "z", 0),                // after self
		rec("b1x", "z", -15*time.Second), // on the bound: alive
		rec("b1y", "z", -15*time.Second-time.Millisecond),
	}
	names := func(rs []site.BrokerRecord) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Name)
		}
		return out
	}
	tests := []struct {
		name string
		asOf time.Time
		want []string
	}{
		{name: "against the copy's time", asOf: at, want: []string{"b1", "b1x"}},
		{name: "against a later copy's time", asOf: at.Add(10 * time.Second), want: []string{"b1"}},
		{name: "no copy time: against the newest other record", want: []string{"b1", "b1x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := names(Candidates(records, "b3", "z", tt.asOf, 15*time.Second)); !slices.Equal(got, tt.want) {
				t.Errorf("Candidates: %v, want %v", got, tt.want)
			}
		})
	}
}

// fakeLocal brokers nothing; fakeLHC keeps the handovers learnt.
type fakeLocal struct{}

func (fakeLocal) Launch(_ context.Context, req broker.LaunchRequest) (*broker.Launch, error) {
	return &broker.Launch{Session: site.Session{ID: "s1", User: req.User}, Address: "10.0.0.1:3389", Ticket: "t1"}, nil
}
func (fakeLocal) Reconnect(context.Context, string, string, string) (*broker.Launch, error) {
	return nil, site.Errorf(site.ENotFound, "no such session")
}
func (fakeLocal) Logoff(context.Context, string, string) error     { return nil }
func (fakeLocal) Disconnect(context.Context, string, string) error { return nil }
func (fakeLocal) UserSessions(context.Context, string) ([]site.Session, error) {
	return nil, errors.New("a detail for the log only")
}
func (fakeLocal) DisplayTarget(_ context.Context, user, id string) (broker.Control, error) {
	if user != "alice" || id != "s1" {
		return broker.Control{}, site.NotFound(site.KindSession, id)
	}
	return broker.Control{Machine: "m1", URL: "https://10.0.0.1:9443", Token: "never-sent", Pin: "ab"}, nil
}

type fakeLHC struct {
	mu     sync.Mutex
	learnt []lhc.Handover
}

func (*fakeLHC) InOutage() bool { return true }
func (f *fakeLHC) Learn(_ context.Context, h lhc.Handover) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.learnt = append(f.learnt, h)
	return nil
}

var (
	siteKey  = []byte(strings.Repeat("k", 32))
	otherKey = []byte(strings.Repeat("o", 32))
)

// startPeer serves the Handler of the broker name, with key.
func startPeer(t *testing.T, name string, key []byte) (site.BrokerRecord, *fakeLHC) {
	t.Helper()
	cache := &fakeLHC{}
	h, err := NewHandler(HandlerConfig{Name: name, Key: key, Broker: fakeLocal{}, LHC: cache})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return site.BrokerRecord{Name: name, Address: strings.TrimPrefix(srv.URL, "http://")}, cache
}

func newClient(t *testing.T, name string, key []byte) *Client {
	t.Helper()
	c, err := NewClient(ClientConfig{Name: name, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClientAndHandler(t *testing.T) {
	ctx := context.Background()
	p, cache := startPeer(t, "b1", siteKey)
	c := newClient(t, "b2", siteKey)

	t.Run("state proved", func(t *testing.T) {
		st, err := c.State(ctx, p)
		if err != nil || st.Name != "b1" || !st.Outage {
			t.Fatalf("State: %+v, %v", st, err)
		}
	})
	t.Run("launch proved", func(t *testing.T) {
		var l Launch
		if err := c.Call(ctx, p, OpLaunch, Request{User: "alice", Resource: "Desktop"}, &l); err != nil || l.Ticket != "t1" {
			t.Fatalf("launch: %+v, %v", l, err)
		}
	})
	t.Run("an error keeps its code", func(t *testing.T) {
		err := c.Call(ctx, p, OpReconnect, Request{User: "alice", SessionID: "x"}, &Launch{})
		if site.ErrorCode(err) != site.ENotFound {
			t.Fatalf("reconnect: %v, want not found", err)
		}
		err = c.Call(ctx, p, OpSessions, Request{User: "alice"}, &Sessions{})
		if site.ErrorCode(err) != site.EInternal || strings.Contains(err.Error(), "detail") {
			t.Fatalf("sessions: %v, want an internal error without its detail", err)
		}
	})
	t.Run("display target proved, without the control token", func(t *testing.T) {
		var d Display
		if err := c.Call(ctx, p, OpDisplay, Request{User: "alice", SessionID: "s1"}, &d); err != nil ||
			d != (Display{Machine: "m1", URL: "https://10.0.0.1:9443", Pin: "ab"}) {
			t.Fatalf("display: %+v, %v", d, err)
		}
		err := c.Call(ctx, p, OpDisplay, Request{User: "mallory", SessionID: "s1"}, &d)
		if site.ErrorCode(err) != site.ENotFound {
			t.Fatalf("another user's display: %v, want not found", err)
		}
	})
	t.Run("handover sealed and learnt", func(t *testing.T) {
		h := lhc.Handover{Machines: []lhc.HandedMachine{{Name: "m1", ControlToken: "ctl-secret", Credential: "cred-secret"}}}
		if err := c.Handover(ctx, p, h); err != nil {
			t.Fatal(err)
		}
		cache.mu.Lock()
		defer cache.mu.Unlock()
		if len(cache.learnt) != 1 || cache.learnt[0].Machines[0].ControlToken != "ctl-secret" {
			t.Fatalf("learnt %+v", cache.learnt)
		}
	})
	t.Run("a caller without the key is refused", func(t *testing.T) {
		err := newClient(t, "b2", otherKey).Call(ctx, p, OpLaunch, Request{User: "alice"}, &Launch{})
		if !errors.Is(err, ErrUnproven) || !strings.Contains(err.Error(), `"b1"`) {
			t.Fatalf("launch with another key: %v, want refused (unproven), naming the peer", err)
		}
	})
	t.Run("a peer under another name is not taken", func(t *testing.T) {
		wrong := p
		wrong.Name = "b0"
		if _, err := c.State(ctx, wrong); !errors.Is(err, ErrUnproven) {
			t.Fatalf("State of b1 as b0: %v, want ErrUnproven", err)
		}
	})
}

// TestClientTakesNoStranger: whoever answers at a peer's address without
// the site's key, however right its answer looks, is not taken for it,
// and is handed no handover.
func TestClientTakesNoStranger(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var paths []string
	stranger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		w.Header().Set(HeaderNonce, "bm9uY2U")
		w.Header().Set(HeaderProof, strings.Repeat("A", 43))
		io.WriteString(w, `{"name":"b1","outage":true,"address":"203.0.113.9:3389","ticket":"x"}`)
	}))
	defer stranger.Close()
	p := site.BrokerRecord{Name: "b1", Address: strings.TrimPrefix(stranger.URL, "http://")}
	c := newClient(t, "b2", siteKey)
	if _, err := c.State(ctx, p); !errors.Is(err, ErrUnproven) {
		t.Fatalf("State of a stranger: %v, want ErrUnproven", err)
	}
	if err := c.Call(ctx, p, OpLaunch, Request{User: "alice"}, &Launch{}); !errors.Is(err, ErrUnproven) {
		t.Fatalf("launch at a stranger: %v, want ErrUnproven", err)
	}
	// A peer of another site (another key) proves nothing here either.
	other, _ := startPeer(t, "b1", otherKey)
	if _, err := c.State(ctx, other); !errors.Is(err, ErrUnproven) {
		t.Fatalf("State of another site's broker: %v, want ErrUnproven", err)
	}
}

// TestClientPeerGoesAway: a peer that stops mid-answer, or never
// answers, gives a clear error naming it, within the call's bound.
func TestClientPeerGoesAway(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hold := make(chan struct{})
	defer close(hold)
	go func() {
		for i := 0; ; i++ {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				http.ReadRequest(r)
				if i == 0 {
					io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"name\":")
					return // closes mid-way
				}
				<-hold // never answers
			}()
		}
	}()
	p := site.BrokerRecord{Name: "b1", Address: ln.Addr().String()}
	c := newClient(t, "b2", siteKey)
	_, err = c.State(context.Background(), p)
	if site.ErrorCode(err) != site.EUnavailable || !strings.Contains(err.Error(), `peer "b1"`) || !strings.Contains(err.Error(), "mid-way") {
		t.Fatalf("a peer closing mid-way: %v, want unavailable, mid-way, naming the peer", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = c.State(ctx, p)
	if site.ErrorCode(err) != site.EUnavailable || !strings.Contains(err.Error(), `peer "b1"`) {
		t.Fatalf("a silent peer: %v, want unavailable, naming the peer", err)
	}
}

func TestSealedHandover(t *testing.T) {
	k, o := mustKey(t, 1), mustKey(t, 2)
	h := lhc.Handover{Machines: []lhc.HandedMachine{{Name: "m1", ControlToken: "ctl", Credential: "cred"}}}
	s, err := k.sealHandover("a", "b", h)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(s.Box), "ctl") {
		t.Fatal("the sealed handover holds the control token in the clear")
	}
	if got, err := k.openHandover("a", "b", s); err != nil || got.Machines[0].Credential != "cred" {
		t.Fatalf("open: %+v, %v", got, err)
	}
	for _, tt := range []struct {
		name     string
		key      Key
		from, to string
	}{{"another key", o, "a", "b"}, {"another receiver", k, "a", "c"}, {"another sender", k, "x", "b"}} {
		if _, err := tt.key.openHandover(tt.from, tt.to, s); err == nil {
			t.Errorf("a handover sealed for b opened with %s", tt.name)
		}
	}
}

// TestClientAcrossARestart: a broker that restarts forgets the tokens it
// took, so a launch token captured before is refused by its next run
// (it is bound to the last one), and a caller that knew the last run is
// told to retry once, then learns the new run and is served.
func TestClientAcrossARestart(t *testing.T) {
	ctx := context.Background()
	var current atomic.Pointer[Handler]
	var mu sync.Mutex
	var captured *http.Request
	var capturedBody []byte
	newRun := func() {
		h, err := NewHandler(HandlerConfig{Name: "b1", Key: siteKey, Broker: fakeLocal{}, LHC: &fakeLHC{}})
		if err != nil {
			t.Fatal(err)
		}
		current.Store(h)
	}
	newRun()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, OpLaunch) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			captured, capturedBody = r.Clone(context.Background()), body
			mu.Unlock()
			r.Body = io.NopCloser(strings.NewReader(string(body)))
		}
		current.Load().ServeHTTP(w, r)
	}))
	defer srv.Close()
	p := site.BrokerRecord{Name: "b1", Address: strings.TrimPrefix(srv.URL, "http://")}
	c := newClient(t, "b2", siteKey)
	launch := func() error {
		var l Launch
		return c.Call(ctx, p, OpLaunch, Request{User: "alice", Resource: "Desktop"}, &l)
	}
	if err := launch(); err != nil {
		t.Fatalf("launch: %v", err)
	}
	mu.Lock()
	replay, body := captured.Header.Get("Authorization"), capturedBody
	mu.Unlock()

	newRun() // b1 restarts at the same address
	req, _ := http.NewRequest(http.MethodPost, srv.URL+Prefix+OpLaunch, strings.NewReader(string(body)))
	req.Header.Set("Authorization", replay)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("the last run's launch token replayed at the next run: %s, want 503", resp.Status)
	}
	if err := launch(); site.ErrorCode(err) != site.EUnavailable {
		t.Fatalf("the first launch after the restart: %v, want unavailable (retry)", err)
	}
	if err := launch(); err != nil {
		t.Fatalf("the launch after learning the new run: %v", err)
	}
}
