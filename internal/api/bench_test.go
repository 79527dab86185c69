package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/broker/vdacontrol"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
	"github.com/usher-vdi/usher/internal/vda"
)

// benchSite serves the demo site over real HTTP with its 57 machines run
// by the VDA simulator, and extra users so that every launch is a new
// session. Office Apps' session limit is raised so that capacity never
// ends a run.
type benchSite struct {
	url    string
	signer *auth.Signer
	client *http.Client
}

const benchUsers = 20000

func newBenchSite(b *testing.B) *benchSite {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	store, err := sqlitestore.Open(ctx, b.TempDir()+"/site.db", sqlitestore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	cfg := demo.Site()
	for i := range cfg.DeliveryGroups {
		cfg.DeliveryGroups[i].LoadRules.MaxSessions.Limit = 10000
		cfg.DeliveryGroups[i].LoadRules.ConcurrentLogons.Enabled = false
	}
	for i := 1; i <= benchUsers; i++ {
		cfg.Users = append(cfg.Users, site.User{Name: fmt.Sprintf("bench%05d", i), Groups: []string{"domain-users"}})
	}
	if err := store.Update(ctx, func(tx site.Tx) error { _, err := site.ApplyConfig(ctx, tx, cfg, false); return err }); err != nil {
		b.Fatal(err)
	}
	brk, err := broker.New(ctx, broker.Config{Store: store, Control: vdacontrol.New()})
	if err != nil {
		b.Fatal(err)
	}
	ran := make(chan struct{})
	go func() { defer close(ran); brk.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-ran }) // before the store closes
	signer, _ := auth.NewSigner([]byte(strings.Repeat("b", 32)))
	a, err := api.New(api.Config{Store: store, Signer: signer, Broker: brk, EnrolmentSecret: enrolmentSecret})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(a)
	b.Cleanup(srv.Close)

	sim, err := vda.NewSimulator(vda.SimConfig{Broker: srv.URL, Secret: enrolmentSecret, Machines: brk.Snapshot().MachineNames(),
		LogonDelay: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); sim.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })

	// The simulator tells nobody when its machines have registered, so
	// this polls the site DB, with a deadline. It polls real time on
	// purpose: a benchmark measures real HTTP over real sockets, which a
	// synctest bubble's fake clock cannot wait on.
	deadline := time.Now().Add(60 * time.Second)
	for {
		var n int
		store.View(ctx, func(tx site.Tx) error {
			for _, m := range brk.Snapshot().MachineNames() {
				if st, err := tx.MachineStatus(ctx, m); err == nil && st.Registration == site.Registered {
					n++
				}
			}
			return nil
		})
		if n == 57 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of 57 simulated machines registered", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	b.Cleanup(tr.CloseIdleConnections)
	return &benchSite{url: srv.URL, signer: signer, client: &http.Client{Transport: tr}}
}

// token issues a user's token as a logon would: the bench users have no
// password, and a token carries the stamp of the password it was issued
// under.
func (s *benchSite) token(user string) string {
	tok, _ := s.signer.IssueClaims(auth.Claims{Subject: user, Audience: api.UserAudience,
		Expires: s.signer.Now().Add(time.Hour), Stamp: s.signer.Stamp("")})
	return tok
}

func (s *benchSite) do(b *testing.B, method, path, token string) int {
	req, _ := http.NewRequest(method, s.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := s.client.Do(req)
	if err != nil {
		b.Error(err)
		return 0
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Errorf("%s %s: %d", method, path, resp.StatusCode)
	}
	return int(n)
}

// BenchmarkRESTLaunch measures launches of new sessions through the REST
// API, each by another user, onto the 57 simulated machines, with 16
// clients in flight (8 per core). Each launch claims a machine in the site
// DB and prepares the session on its VDA over HTTP.
//
//	go test -run XXX -bench RESTLaunch -benchtime 5000x ./internal/api
func BenchmarkRESTLaunch(b *testing.B) {
	s := newBenchSite(b)
	var next atomic.Int64
	tokens := make([]string, benchUsers)
	for i := range tokens {
		tokens[i] = s.token(fmt.Sprintf("bench%05d", i+1))
	}
	var apps []string
	for _, a := range demo.Site().Applications {
		if a.DeliveryGroups[0] == "Office Apps" {
			apps = append(apps, a.Name)
		}
	}
	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(next.Add(1)-1) % benchUsers
			s.do(b, "POST", "/api/v1/resources/"+apps[i%len(apps)]+"/launch", tokens[i])
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "launches/s")
	if b.N > benchUsers {
		b.Logf("more launches than users: %d launches were reconnections", b.N-benchUsers)
	}
}

// BenchmarkRESTEnumerate measures enumerations of the demo's 400
// applications through the REST API with 16 clients in flight, each as
// another user of the same groups (so they share one pre-rendered answer).
//
//	go test -run XXX -bench RESTEnumerate ./internal/api
func BenchmarkRESTEnumerate(b *testing.B) {
	s := newBenchSite(b)
	tokens := make([]string, 100)
	for i := range tokens {
		tokens[i] = s.token(fmt.Sprintf("user%04d", i+1))
	}
	var next atomic.Int64
	var bytes atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bytes.Add(int64(s.do(b, "GET", "/api/v1/resources", tokens[next.Add(1)%100])))
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "enumerations/s")
	b.ReportMetric(float64(bytes.Load())/float64(b.N), "bytes/answer")
}

// discardWriter keeps nothing but the answer's size.
type discardWriter struct {
	header http.Header
	n      int
}

func (d *discardWriter) Header() http.Header         { return d.header }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }

// BenchmarkRESTResources is GET /api/v1/resources in process, the
// handler alone (no HTTP), with a demo user's bearer token: what the
// event loop runs per REST enumeration.
func BenchmarkRESTResources(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	store, err := sqlitestore.Open(ctx, b.TempDir()+"/site.db", sqlitestore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	cfg := demo.Site()
	if err := store.Update(ctx, func(tx site.Tx) error { _, err := site.ApplyConfig(ctx, tx, cfg, false); return err }); err != nil {
		b.Fatal(err)
	}
	brk, err := broker.New(ctx, broker.Config{Store: store, Control: vdacontrol.New()})
	if err != nil {
		b.Fatal(err)
	}
	signer, _ := auth.NewSigner([]byte(strings.Repeat("b", 32)))
	a, err := api.New(api.Config{Store: store, Signer: signer, Broker: brk, EnrolmentSecret: enrolmentSecret})
	if err != nil {
		b.Fatal(err)
	}
	user := cfg.Users[0].Name
	tok, _ := signer.IssueClaims(auth.Claims{Subject: user, Audience: api.UserAudience,
		Expires: signer.Now().Add(time.Hour), Stamp: signer.Stamp(cfg.Users[0].PasswordHash)})
	req := httptest.NewRequest("GET", "http://usher.example/api/v1/resources", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	w := &discardWriter{header: http.Header{}}
	a.ServeHTTP(w, req)
	if w.n < 1000 {
		b.Fatalf("answer of %d bytes: not an enumeration", w.n)
	}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.header)
		w.n = 0
		a.ServeHTTP(w, req)
	}
}
