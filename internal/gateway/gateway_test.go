package gateway_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/broker/vdacontrol"
	"github.com/usher-vdi/usher/internal/gateway"
	"github.com/usher-vdi/usher/internal/gateway/gatewaytest"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitetest"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// TestMain fails the package's tests when one leaves a goroutine behind:
// a splice's pumps or pingers, a dial.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testSite has a multi-session machine desk-01 publishing the desktop
// "desk" and another, gone-01, publishing "gone", and users u0001..u0008.
func testSite() *site.Config {
	c := &site.Config{Settings: site.Settings{Name: "t", Domain: "T"}}
	c.Zones = []site.Zone{{Name: "z", Primary: true}}
	c.Catalogs = []site.Catalog{{Name: "vnc", Kind: site.MultiSession, Zone: "z"}, {Name: "gone", Kind: site.MultiSession, Zone: "z"}}
	c.Machines = []site.Machine{{Name: "desk-01", Catalog: "vnc", Address: "desk-01.test:5900"},
		{Name: "gone-01", Catalog: "gone", Address: "gone-01.test:5900"}}
	desks, gone := site.NewDeliveryGroup("Desks", "vnc"), site.NewDeliveryGroup("Gone", "gone")
	desks.LoadRules.ConcurrentLogons.Enabled, gone.LoadRules.ConcurrentLogons.Enabled = false, false
	c.DeliveryGroups = []site.DeliveryGroup{desks, gone}
	c.Desktops = []site.Resource{{Kind: site.Desktop, Name: "desk", DisplayName: "Desk", DeliveryGroups: []string{"Desks"}},
		{Kind: site.Desktop, Name: "gone", DisplayName: "Gone", DeliveryGroups: []string{"Gone"}}}
	c.Groups = []site.Group{{Name: "all"}}
	for i := 1; i <= 8; i++ {
		c.Users = append(c.Users, site.User{Name: fmt.Sprintf("u%04d", i), Groups: []string{"all"}})
	}
	c.Entitlements = []site.Entitlement{{Name: "desks", DeliveryGroup: "Desks", Groups: []string{"all"}},
		{Name: "gone", DeliveryGroup: "Gone", Groups: []string{"all"}}}
	return c
}

// fixture is a site on SQLite with a real broker reaching its agents
// through the control client, the REST API with the gateway mounted, and
// the test agents of its machines.
type fixture struct {
	t        *testing.T
	srv      *httptest.Server
	gw       *gateway.Gateway
	broker   *broker.Broker
	registry *prometheus.Registry
	agent    *gatewaytest.Agent // desk-01's
	gone     *gatewaytest.Agent // gone-01's
	logs     *syncBuffer

	mu      sync.Mutex
	tickets []string
}

func newFixture(t *testing.T, mod func(*gateway.Config)) *fixture {
	t.Helper()
	ctx := context.Background()
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := sitetest.New(t, sitetest.Options{Config: testSite(), Broker: func(c *broker.Config) {
		c.Control = vdacontrol.New()
		c.SourceFree = -1
		c.PasswordParams = sitetest.Cheap
		c.Logger = log
	}})
	f := &fixture{t: t, broker: s.Broker, registry: prometheus.NewRegistry(), agent: gatewaytest.NewAgent(t), gone: gatewaytest.NewAgent(t), logs: logs}
	for machine, a := range map[string]*gatewaytest.Agent{"desk-01": f.agent, "gone-01": f.gone} {
		err := s.Broker.Register(ctx, broker.Registration{Machine: machine, Address: "127.0.0.1:5900", Protocol: vdaproto.ProtocolVNC,
			Control: a.Control(machine)})
		if err != nil {
			t.Fatal(err)
		}
	}
	signer, err := auth.NewSigner([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	cfg := gateway.Config{Authenticate: api.UserAuthenticator(signer, s.Broker), Resolver: gateway.FromBroker(s.Broker),
		Registerer: f.registry, Logger: log, DialTimeout: 5 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	if f.gw, err = gateway.New(cfg); err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Config{Store: s.Store, Signer: signer, PasswordParams: sitetest.Cheap, Broker: s.Broker,
		EnrolmentSecret: "enrol-me-please-0123456789", Logger: log, Display: f.gw, DisplayURL: f.gw.DisplayURL})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(a)
	t.Cleanup(func() {
		f.gw.Close()
		f.srv.Close()
		// No ticket ever reaches a log line.
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, ticket := range f.tickets {
			if logs.contains(ticket) {
				t.Errorf("a ticket was logged:\n%s", logs.String())
			}
		}
	})
	return f
}

// syncBuffer is a log destination that handlers may write concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) contains(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Contains(s.b.String(), sub)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logon logs user on to the portal and returns its session cookie.
func (f *fixture) logon(user string) *http.Cookie {
	f.t.Helper()
	body, _ := json.Marshal(api.LoginRequest{Username: user, Password: sitetest.UserPassword, SessionCookie: true})
	resp, err := http.Post(f.srv.URL+"/api/v1/login", "application/json", bytes.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == api.SessionCookieName && c.Value != "" {
			return c
		}
	}
	f.t.Fatalf("logon of %s: %s, no session cookie", user, resp.Status)
	return nil
}

// launch launches resource with the portal's cookie.
func (f *fixture) launch(cookie *http.Cookie, resource string) api.LaunchResponse {
	f.t.Helper()
	req, _ := http.NewRequest("POST", f.srv.URL+"/api/v1/resources/"+resource+"/launch", nil)
	req.AddCookie(cookie)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	var l api.LaunchResponse
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil || resp.StatusCode != http.StatusOK {
		f.t.Fatalf("launch %s: %s, %v", resource, resp.Status, err)
	}
	f.mu.Lock()
	f.tickets = append(f.tickets, l.Ticket)
	f.mu.Unlock()
	return l
}

// open is what a portal page does: the display's WebSocket on the
// portal's origin, with its cookie and the launch's ticket.
type open struct {
	cookie *http.Cookie
	path   string // the display's path and query
	ticket string // "" offers none
	origin string // "" sends the portal's own; "-" none
	header http.Header
	host   string
	onPing func()
}

func (f *fixture) open(ctx context.Context, o open) (*websocket.Conn, *http.Response, error) {
	h := http.Header{}
	for k, v := range o.header {
		h[k] = v
	}
	switch o.origin {
	case "":
		h.Set("Origin", f.srv.URL)
	case "-":
	default:
		h.Set("Origin", o.origin)
	}
	if o.cookie != nil {
		h.Set("Cookie", o.cookie.String())
	}
	protos := []string{vdaproto.DisplaySubprotocol}
	if o.ticket != "" {
		protos = append(protos, vdaproto.TicketSubprotocol(o.ticket))
	}
	opts := &websocket.DialOptions{HTTPHeader: h, Subprotocols: protos, Host: o.host}
	if o.onPing != nil {
		opts.OnPingReceived = func(context.Context, []byte) bool { o.onPing(); return true }
	}
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(f.srv.URL, "http")+o.path, opts)
	if c != nil {
		c.SetReadLimit(-1)
	}
	return c, resp, err
}

// counter returns a counter's or gauge's value, or a histogram's count,
// of the series with the labels.
func (f *fixture) metric(name string, labels ...string) float64 {
	f.t.Helper()
	families, err := f.registry.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	f.t.Fatalf("no metric %s%v", name, labels)
	return 0
}

// stream is a scripted byte stream in messages of sizes that cross the
// gateway's copy buffer (32 KiB) and its edges, empty ones too.
func stream(seed uint64, total int) [][]byte {
	sizes := []int{1, 100, 1500, 32 << 10, 32<<10 + 1, 100 << 10, 0, 7, 64 << 10, 3}
	r := rand.New(rand.NewChaCha8([32]byte{byte(seed)}))
	var out [][]byte
	for i, n := 0, 0; n < total; i++ {
		m := make([]byte, sizes[i%len(sizes)])
		for j := range m {
			m[j] = byte(r.Uint32())
		}
		out = append(out, m)
		n += len(m)
	}
	return out
}

// digest is the SHA-256 of the messages' bytes and their sizes.
func digest(msgs [][]byte) (sum [32]byte, sizes []int) {
	h := sha256.New()
	for _, m := range msgs {
		h.Write(m)
		sizes = append(sizes, len(m))
	}
	copy(sum[:], h.Sum(nil))
	return sum, sizes
}

// readAll reads binary messages until the connection ends, returning
// them and the error that ended it.
func readAll(ctx context.Context, c *websocket.Conn) ([][]byte, error) {
	var out [][]byte
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			return out, err
		}
		if typ != websocket.MessageBinary {
			return out, fmt.Errorf("a %v message", typ)
		}
		out = append(out, b)
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestDisplayHappyPath: a user logs on to the portal, launches a desktop
// on a vnc machine, and opens its display_url with the ticket; a few MiB
// go each way in messages of every size, unchanged and in the same
// messages; the agent's close code and reason reach the browser; both
// sides are pinged and the round trips measured.
func TestDisplayHappyPath(t *testing.T) {
	f := newFixture(t, func(c *gateway.Config) { c.PingInterval = 20 * time.Millisecond })
	ctx := testContext(t)
	cookie := f.logon("u0001")
	l := f.launch(cookie, "desk")
	if want := gateway.Path(l.SessionID); l.DisplayURL != want || l.Protocol != vdaproto.ProtocolVNC {
		t.Fatalf("launch: display_url %q, protocol %q; want %q, vnc", l.DisplayURL, l.Protocol, want)
	}

	up, down := stream(1, 2<<20), stream(2, 2<<20)
	upSum, upSizes := digest(up)
	downSum, downSizes := digest(down)
	// Both sides wait to be pinged twice before the agent closes: the
	// first ping's round trip is measured before the second is sent.
	agentPinged, browserPinged := pingedTwice(), pingedTwice()
	f.agent.OnPing(agentPinged.ping)
	got := make(chan [][]byte, 1)
	f.agent.SetScript(func(_ context.Context, _ string, c *websocket.Conn) {
		// The agent reads the browser's messages, then on (the pings
		// are answered as it reads) until it closes.
		allIn := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			var msgs [][]byte
			for len(msgs) < len(up) {
				_, b, err := c.Read(ctx)
				if err != nil {
					t.Errorf("agent: read: %v", err)
					break
				}
				msgs = append(msgs, b)
			}
			got <- msgs
			close(allIn)
			readAll(ctx, c)
		})
		for _, m := range down {
			if err := c.Write(ctx, websocket.MessageBinary, m); err != nil {
				t.Errorf("agent: write: %v", err)
				return
			}
		}
		for _, ch := range []chan struct{}{allIn, agentPinged.done} {
			select {
			case <-ch:
			case <-ctx.Done():
			}
		}
		select {
		case <-browserPinged.done:
		case <-ctx.Done():
		}
		c.Close(vdaproto.CloseSessionEnded, "the session was logged off")
		wg.Wait()
	})

	c, resp, err := f.open(ctx, open{cookie: cookie, path: l.DisplayURL, ticket: l.Ticket, onPing: browserPinged.ping})
	if err != nil {
		t.Fatalf("open the display: %v (%v)", err, resp)
	}
	if c.Subprotocol() != vdaproto.DisplaySubprotocol {
		t.Errorf("subprotocol %q, want %q", c.Subprotocol(), vdaproto.DisplaySubprotocol)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, m := range up {
			if err := c.Write(ctx, websocket.MessageBinary, m); err != nil {
				t.Errorf("browser: write: %v", err)
				return
			}
		}
	})
	received, err := readAll(ctx, c)
	wg.Wait()
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != vdaproto.CloseSessionEnded || ce.Reason != "the session was logged off" {
		t.Errorf("the browser's display ended with %v, want the agent's close %d", err, vdaproto.CloseSessionEnded)
	}
	if sum, sizes := digest(received); sum != downSum || !equalInts(sizes, downSizes) {
		t.Errorf("the browser received %d messages (sha256 %x), want the agent's %d (%x)", len(sizes), sum[:8], len(downSizes), downSum[:8])
	}
	if sum, sizes := digest(<-got); sum != upSum || !equalInts(sizes, upSizes) {
		t.Errorf("the agent received %d messages (sha256 %x), want the browser's %d (%x)", len(sizes), sum[:8], len(upSizes), upSum[:8])
	}

	f.gw.Close() // waits for the display's end
	for _, m := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"usher_gateway_displays_total", []string{"outcome", "closed"}, 1},
		{"usher_gateway_displays_open", nil, 0},
		{"usher_gateway_bytes_total", []string{"direction", "to_agent"}, float64(total(up))},
		{"usher_gateway_bytes_total", []string{"direction", "to_browser"}, float64(total(down))},
		{"usher_gateway_agent_dial_failures_total", nil, 0},
	} {
		if got := f.metric(m.name, m.labels...); got != m.want {
			t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
		}
	}
	for _, s := range []string{"browser", "agent"} {
		if n := f.metric("usher_gateway_ping_rtt_seconds", "side", s); n < 1 {
			t.Errorf("no ping round trip to the %s measured", s)
		}
	}
}

// pinged closes done at its second ping.
type pinged struct {
	mu   sync.Mutex
	n    int
	done chan struct{}
}

func pingedTwice() *pinged { return &pinged{done: make(chan struct{})} }

func (p *pinged) ping() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n++; p.n == 2 {
		close(p.done)
	}
}

func total(msgs [][]byte) int {
	n := 0
	for _, m := range msgs {
		n += len(m)
	}
	return n
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
