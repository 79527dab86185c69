package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/broker/brokerprom"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitetest"
)

const (
	dashboardPath = "/api/v1/admin/dashboard"
	eventsPath    = "/api/v1/admin/dashboard/events"
)

// dashboardSite is a running API server whose dashboard reads a real
// registry with the broker's metrics (brokerprom) of the demo site, every
// machine registered.
type dashboardSite struct {
	t        *testing.T
	srv      *httptest.Server
	signer   *auth.Signer
	store    site.Store
	metrics  *brokerprom.Metrics
	stopping chan struct{}
	stopOnce sync.Once
}

// serverTimeout is the HTTP server's read and write timeouts: shorter
// than the two events that the stream tests read, which must outlive
// them.
const serverTimeout = 700 * time.Millisecond

func newDashboardSite(t *testing.T, maxStreams int) *dashboardSite {
	t.Helper()
	s := sitetest.New(t, sitetest.Options{Registered: true, Broker: func(c *broker.Config) { c.SourceFree = -1 }})
	reg := prometheus.NewRegistry()
	m := brokerprom.New()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	m.Attach(s.Broker)
	m.AttachStore(s.Store)
	signer, err := auth.NewSigner([]byte(strings.Repeat("d", 32)))
	if err != nil {
		t.Fatal(err)
	}
	stopping := make(chan struct{})
	a, err := api.New(api.Config{Store: s.Store, Signer: signer, PasswordParams: cheap, Broker: s.Broker, EnrolmentSecret: enrolmentSecret,
		Metrics: reg, MaxDashboardStreams: maxStreams, Stopping: stopping})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(a)
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = serverTimeout, serverTimeout
	srv.Start()
	d := &dashboardSite{t: t, srv: srv, signer: signer, store: s.Store, metrics: m, stopping: stopping}
	t.Cleanup(func() {
		d.stop()
		srv.Close()
	})
	return d
}

// stop closes the API's Stopping channel, once.
func (d *dashboardSite) stop() { d.stopOnce.Do(func() { close(d.stopping) }) }

// adminToken returns an admin bearer token from POST /api/v1/admin/tokens.
func (d *dashboardSite) adminToken() string {
	d.t.Helper()
	req, _ := http.NewRequest("POST", d.srv.URL+"/api/v1/admin/tokens", nil)
	req.SetBasicAuth(sitetest.Admin, adminPassword)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok api.TokenResponse
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || resp.StatusCode != 201 {
		d.t.Fatalf("admin token: %d %v", resp.StatusCode, err)
	}
	return tok.Token
}

// shortToken returns an admin token that expires in a second or two
// (tokens expire on the second).
func (d *dashboardSite) shortToken() (string, time.Time) {
	d.t.Helper()
	var hash string
	err := d.store.View(context.Background(), func(tx site.Tx) error {
		a, err := tx.Admins().Get(context.Background(), sitetest.Admin)
		hash = a.PasswordHash
		return err
	})
	if err != nil {
		d.t.Fatal(err)
	}
	return d.signer.IssueClaims(auth.Claims{Subject: sitetest.Admin, Audience: api.AdminAudience,
		Expires: time.Now().Add(2 * time.Second), Stamp: d.signer.Stamp(hash)})
}

// userToken returns an end user's bearer token.
func (d *dashboardSite) userToken() string {
	d.t.Helper()
	resp, err := http.Post(d.srv.URL+"/api/v1/login", "application/json",
		strings.NewReader(`{"username":"user0001","password":"`+sitetest.UserPassword+`"}`))
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	var lr api.LoginResponse
	if err := json.NewDecoder(resp.Body).Decode(&lr); err != nil || lr.Token == "" {
		d.t.Fatalf("user login: %d %v", resp.StatusCode, err)
	}
	return lr.Token
}

// stream is an open event stream.
type stream struct {
	resp   *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

// open opens the event stream with the Authorization header authz (none
// when empty) through client (http.DefaultClient when nil). The caller
// closes the stream unless the answer is not 200.
func (d *dashboardSite) open(client *http.Client, authz string) (*stream, error) {
	if client == nil {
		client = http.DefaultClient
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", d.srv.URL+eventsPath, nil)
	req.Header.Set("Accept", "text/event-stream")
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	return &stream{resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel}, nil
}

func (s *stream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// sse is one server-sent event.
type sse struct {
	name, data string
}

// next reads the stream's next event (skipping comments and fields other
// than event and data), or fails with io.EOF when the stream ends.
func (s *stream) next() (sse, error) {
	var ev sse
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.name != "" || ev.data != "" {
				return ev, nil
			}
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data += strings.TrimPrefix(line, "data: ")
		}
	}
}

// figures reads the next event, which must be figures, and decodes it.
func (s *stream) figures(t *testing.T) api.Dashboard {
	t.Helper()
	ev, err := s.next()
	if err != nil {
		t.Fatalf("read an event: %v", err)
	}
	if ev.name != "figures" {
		t.Fatalf("event %q, want figures: %s", ev.name, ev.data)
	}
	var fig api.Dashboard
	if err := json.Unmarshal([]byte(ev.data), &fig); err != nil {
		t.Fatalf("figures %s: %v", ev.data, err)
	}
	return fig
}

// ends waits for the stream to end, at most within, and returns how
// many events came before.
func (s *stream) ends(t *testing.T, within time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	n := 0
	go func() {
		for {
			if _, err := s.next(); err != nil {
				done <- err
				return
			}
			n++
		}
	}()
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("the stream failed instead of ending: %v", err)
		}
	case <-time.After(within):
		s.close()
		<-done
		t.Fatalf("the stream did not end within %s", within)
	}
	return n
}

// TestDashboardSnapshot: GET /api/v1/admin/dashboard answers an admin
// with the figures of the broker's metrics, and nobody else.
func TestDashboardSnapshot(t *testing.T) {
	d := newDashboardSite(t, 0)
	req, _ := http.NewRequest("GET", d.srv.URL+dashboardPath, nil)
	req.SetBasicAuth(sitetest.Admin, adminPassword)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var fig api.Dashboard
	if err := json.NewDecoder(resp.Body).Decode(&fig); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", dashboardPath, resp.StatusCode, err)
	}
	if got, want := fig.Machines, (api.MachineFigures{Registered: 57}); got != want {
		t.Errorf("machines %+v, want %+v", got, want)
	}
	if len(fig.Zones) != 1 || fig.Zones[0].Name != "primary" || fig.Zones[0].Machines != fig.Machines {
		t.Errorf("zones %+v, want primary alone with every machine", fig.Zones)
	}
	if fig.LocalHostCache || fig.Outage {
		t.Errorf("an embedded site DB shows a Local Host Cache: %+v", fig)
	}

	for _, authz := range []string{"", "Bearer " + d.userToken(), basic(sitetest.Admin, "wrong")} {
		req, _ := http.NewRequest("GET", d.srv.URL+dashboardPath, nil)
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("GET %s with %.12q...: %d, want 401", dashboardPath, authz, resp.StatusCode)
		}
	}
}

// TestDashboardEvents reads the stream as a client would: the content
// type, a first event at once and a second 2 s later with the same
// figures as the snapshot, past the HTTP server's read and write
// timeouts; a transaction between them shows in the second.
func TestDashboardEvents(t *testing.T) {
	d := newDashboardSite(t, 0)
	start := time.Now()
	s, err := d.open(nil, "Bearer "+d.adminToken())
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if s.resp.StatusCode != 200 {
		b, _ := io.ReadAll(s.resp.Body)
		t.Fatalf("GET %s: %d %s", eventsPath, s.resp.StatusCode, b)
	}
	if ct := s.resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q, want text/event-stream", ct)
	}
	if cc := s.resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}
	first := s.figures(t)
	if took := time.Since(start); took > time.Second {
		t.Errorf("the first event came after %s, not at once", took)
	}
	if first.Machines.Registered != 57 {
		t.Errorf("first event: %d registered machines, want 57", first.Machines.Registered)
	}
	for range 3 {
		d.metrics.TransactionDone(broker.OpLaunch, 3*time.Millisecond, nil)
	}
	second := s.figures(t)
	gap := second.At.Sub(first.At)
	if gap < 1500*time.Millisecond || gap > 3*time.Second {
		t.Errorf("the second event's figures are %s after the first's, want about 2 s", gap)
	}
	if took := time.Since(start); took < 2*serverTimeout {
		t.Fatalf("two events in %s: the stream did not outlive the server's timeouts (%s)", took, serverTimeout)
	}
	if second.Launches.Count != 3 || second.Launches.P99Seconds != 0.005 || second.WindowSeconds <= 0 {
		t.Errorf("second event's launches %+v over %v s, want 3 with a p99 of at most 5 ms", second.Launches, second.WindowSeconds)
	}
}

// TestDashboardEventsWithCookie: the stream takes the console's admin
// cookie, as a browser's EventSource sends it.
func TestDashboardEventsWithCookie(t *testing.T) {
	d := newDashboardSite(t, 0)
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar}
	req, _ := http.NewRequest("POST", d.srv.URL+"/api/v1/admin/tokens", strings.NewReader(`{"session_cookie":true}`))
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth(sitetest.Admin, adminPassword)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("cookie logon: %d", resp.StatusCode)
	}
	s, err := d.open(client, "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if s.resp.StatusCode != 200 {
		t.Fatalf("GET %s with the admin cookie: %d", eventsPath, s.resp.StatusCode)
	}
	s.figures(t)
}

// TestDashboardEventsRefused: no credentials, a user's token, a user's
// portal cookie and a wrong password get 401 and no stream; a site
// without metrics answers 503.
func TestDashboardEventsRefused(t *testing.T) {
	d := newDashboardSite(t, 0)
	for name, authz := range map[string]string{
		"nobody": "", "a user's token": "Bearer " + d.userToken(), "a wrong password": basic(sitetest.Admin, "wrong"),
		"a forged token": "Bearer abc.def",
	} {
		t.Run(name, func(t *testing.T) {
			s, err := d.open(nil, authz)
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			if s.resp.StatusCode != 401 || strings.HasPrefix(s.resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("%d %s, want 401 and no stream", s.resp.StatusCode, s.resp.Header.Get("Content-Type"))
			}
		})
	}
	t.Run("a user's portal cookie", func(t *testing.T) {
		jar, _ := cookiejar.New(nil)
		client := &http.Client{Jar: jar}
		resp, err := client.Post(d.srv.URL+"/api/v1/login", "application/json",
			strings.NewReader(`{"username":"user0001","password":"`+sitetest.UserPassword+`","session_cookie":true}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		s, err := d.open(client, "")
		if err != nil {
			t.Fatal(err)
		}
		defer s.close()
		if s.resp.StatusCode != 401 {
			t.Fatalf("%d, want 401", s.resp.StatusCode)
		}
	})

	t.Run("no metrics", func(t *testing.T) {
		f := newFixture(t) // no Config.Metrics
		f.want(f.do("GET", eventsPath, nil), 503, site.EUnavailable)
		f.want(f.do("GET", dashboardPath, nil), 503, site.EUnavailable)
	})
}

// TestDashboardStreamLimit opens many streams at once against a running
// server: exactly the bound are served, the others get 429 at once, and
// once they close, the slots are free again.
func TestDashboardStreamLimit(t *testing.T) {
	const limit, clients = 4, 24
	d := newDashboardSite(t, limit)
	authz := "Bearer " + d.adminToken()
	var (
		mu      sync.Mutex
		open    []*stream
		refused []string
		wg      sync.WaitGroup
		ready   = make(chan struct{})
	)
	for range clients {
		wg.Go(func() {
			<-ready
			s, err := d.open(nil, authz)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch s.resp.StatusCode {
			case 200:
				open = append(open, s)
			default:
				var e api.ErrorBody
				json.NewDecoder(s.resp.Body).Decode(&e)
				s.close()
				refused = append(refused, fmt.Sprintf("%d %s %s", s.resp.StatusCode, e.Error.Code, s.resp.Header.Get("Retry-After")))
			}
		})
	}
	close(ready)
	wg.Wait()
	if len(open) != limit || len(refused) != clients-limit {
		t.Fatalf("%d streams open and %d refused of %d, want %d open", len(open), len(refused), clients, limit)
	}
	for _, r := range refused {
		if r != "429 overloaded 10" {
			t.Errorf("a stream over the bound: %s, want 429 overloaded, Retry-After 10", r)
		}
	}
	for _, s := range open {
		s.figures(t)
	}

	// Closed, they free their slots (once the server sees them go).
	for _, s := range open {
		s.close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; n < limit; {
		s, err := d.open(nil, authz)
		if err != nil {
			t.Fatal(err)
		}
		if s.resp.StatusCode == 200 {
			defer s.close()
			n++
			continue
		}
		s.close()
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d slots free again 10 s after their streams closed", n, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDashboardStreamEndsWithToken: a stream ends once the admin's token
// expires, and opening it again is refused.
func TestDashboardStreamEndsWithToken(t *testing.T) {
	d := newDashboardSite(t, 0)
	tok, expires := d.shortToken()
	s, err := d.open(nil, "Bearer "+tok)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if s.resp.StatusCode != 200 {
		t.Fatalf("a stream with a fresh token: %d", s.resp.StatusCode)
	}
	n := s.ends(t, time.Until(expires)+5*time.Second)
	if late := time.Since(expires); late < 0 || late > 2*time.Second+500*time.Millisecond {
		t.Errorf("the stream ended %s after the token expired, want within one 2 s tick", late)
	}
	if n < 1 {
		t.Errorf("%d events before the end", n)
	}
	again, err := d.open(nil, "Bearer "+tok)
	if err != nil {
		t.Fatal(err)
	}
	defer again.close()
	if again.resp.StatusCode != 401 {
		t.Errorf("the stream again with the expired token: %d, want 401", again.resp.StatusCode)
	}
}

// TestDashboardStreamEndsWithAdmin: a stream ends when its admin's
// password changes, which revokes the admin's tokens.
func TestDashboardStreamEndsWithAdmin(t *testing.T) {
	d := newDashboardSite(t, 0)
	s, err := d.open(nil, basic(sitetest.Admin, adminPassword))
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if s.resp.StatusCode != 200 {
		t.Fatalf("a stream with a password: %d", s.resp.StatusCode)
	}
	s.figures(t)
	hash, err := auth.HashPassword("a new admin password", cheap)
	if err != nil {
		t.Fatal(err)
	}
	err = d.store.Update(context.Background(), func(tx site.Tx) error {
		a, err := tx.Admins().Get(context.Background(), sitetest.Admin)
		if err != nil {
			return err
		}
		a.PasswordHash = hash
		return tx.Admins().Update(context.Background(), a)
	})
	if err != nil {
		t.Fatal(err)
	}
	s.ends(t, 5*time.Second)
}

// TestDashboardStreamEndsWhenStopping: closing Config.Stopping ends every
// open stream at once, so that the server's shutdown need not wait.
func TestDashboardStreamEndsWhenStopping(t *testing.T) {
	d := newDashboardSite(t, 0)
	authz := "Bearer " + d.adminToken()
	var streams []*stream
	for range 3 {
		s, err := d.open(nil, authz)
		if err != nil {
			t.Fatal(err)
		}
		defer s.close()
		if s.resp.StatusCode != 200 {
			t.Fatalf("open: %d", s.resp.StatusCode)
		}
		s.figures(t)
		streams = append(streams, s)
	}
	d.stop()
	start := time.Now()
	for _, s := range streams {
		s.ends(t, time.Second)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the streams took %s to end", took)
	}
	// The server shuts down at once: no request is left in flight.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := d.srv.Config.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with the streams ended: %v", err)
	}
}
