package server_test

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// listBrokers reads GET /api/v1/admin/brokers from s.
func listBrokers(t *testing.T, s *server.Server) map[string]api.BrokerStatus {
	t.Helper()
	var page api.ListResponse[api.BrokerStatus]
	if code, body := adminDo(t, s, "GET", "/brokers", &page); code != http.StatusOK {
		t.Fatalf("GET /brokers: %d %s", code, body)
	}
	out := map[string]api.BrokerStatus{}
	for _, b := range page.Items {
		out[b.Name] = b
	}
	if len(out) != len(page.Items) || page.Total != len(page.Items) {
		t.Fatalf("GET /brokers: %d items, %d names, total %d", len(page.Items), len(out), page.Total)
	}
	return out
}

// TestBrokersRouteAllInOne: an all-in-one serve lists itself, up, its
// zone's leader, with no Local Host Cache.
func TestBrokersRouteAllInOne(t *testing.T) {
	t.Parallel()
	s, err := server.Open(t.Context(), server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Demo: true, DemoPassword: testPassword,
		PasswordParams: sitetest.Cheap, Name: "solo"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	got := listBrokers(t, s)
	b, ok := got["solo"]
	if len(got) != 1 || !ok {
		t.Fatalf("brokers %v, want solo alone", got)
	}
	if !b.Self || b.State != api.BrokerUp || !b.ZoneLeader || b.LHC != api.LHCNone || b.Zone != s.Zone() || b.Address == "" || b.LastSeen.IsZero() {
		t.Errorf("solo is %+v, want itself, up, leading zone %q, no LHC, with an address and a heartbeat", b, s.Zone())
	}
	if code, _, _ := call(t, "GET", s.URL()+"/api/v1/admin/brokers", nil); code != http.StatusUnauthorized {
		t.Errorf("GET /brokers without credentials: %d, want 401", code)
	}
}

// TestBrokersRoute: two brokers of a PostgreSQL site list each other, up,
// the first by name leading the zone, each with the other's Local Host
// Cache state asked over the peer protocol; when the second is forced into
// outage mode, both lists say so.
func TestBrokersRoute(t *testing.T) {
	t.Parallel()
	brokers := openBrokers(t, 2, nil)
	a, b := brokers[0], brokers[1]
	got := listBrokers(t, b)
	if len(got) != 2 {
		t.Fatalf("brokers %v, want broker-0 and broker-1", got)
	}
	b0, b1 := got["broker-0"], got["broker-1"]
	if b0.Self || !b1.Self {
		t.Errorf("self: broker-0 %v, broker-1 %v; want broker-1 alone (it answered)", b0.Self, b1.Self)
	}
	for _, x := range []api.BrokerStatus{b0, b1} {
		if x.State != api.BrokerUp || x.LHC != api.LHCNormal || x.Zone != a.Zone() {
			t.Errorf("%s: state %q, lhc %q, zone %q; want up, normal, %q", x.Name, x.State, x.LHC, x.Zone, a.Zone())
		}
	}
	if !b0.ZoneLeader || b1.ZoneLeader {
		t.Errorf("zone leader: broker-0 %v, broker-1 %v; want broker-0 (first by name)", b0.ZoneLeader, b1.ZoneLeader)
	}
	if b0.LastContact.IsZero() || b0.Address != a.Addr() && b0.Address == "" {
		t.Errorf("broker-0 as broker-1 sees it: %+v, want a peer contact and its address", b0)
	}

	req, _ := http.NewRequestWithContext(t.Context(), "PUT", b.URL()+"/api/v1/admin/outage", bytes.NewReader([]byte(`{"forced":true}`)))
	req.SetBasicAuth("admin", testPassword)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("force outage on broker-1: %s", resp.Status)
	}
	if !b.LHC().InOutage() {
		t.Fatal("broker-1 is not in outage mode after forcing it")
	}
	if got := listBrokers(t, b)["broker-1"]; got.LHC != api.LHCOutage {
		t.Errorf("broker-1 in outage mode lists itself with lhc %q, want outage", got.LHC)
	}
	if got := listBrokers(t, a)["broker-1"]; got.LHC != api.LHCOutage || got.State != api.BrokerUp {
		t.Errorf("broker-0 lists broker-1 in outage mode as %+v, want up, lhc outage", got)
	}
}

// TestBrokerStates: the registry's records become the list: lost past the
// timeout, in zone and name order, a leader per zone among those up, the
// chosen leader in this broker's zone in an outage.
func TestBrokerStates(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := func(name, zone string, ago time.Duration) site.BrokerRecord {
		return site.BrokerRecord{Name: name, Zone: zone, Address: name + ":8080", LastSeen: now.Add(-ago)}
	}
	records := []site.BrokerRecord{rec("hq-2", "hq", time.Second), rec("hq-1", "hq", time.Minute), rec("br-1", "branch", 2*time.Second),
		rec("hq-3", "hq", 0)}
	type row struct {
		name, state string
		leader      bool
	}
	for _, tc := range []struct {
		name string
		self server.SelfState
		want []row
	}{
		{"normal", server.SelfState{Name: "hq-3", LHC: api.LHCNormal},
			[]row{{"br-1", "up", true}, {"hq-1", "lost", false}, {"hq-2", "up", true}, {"hq-3", "up", false}}},
		{"outage, leading itself", server.SelfState{Name: "hq-3", LHC: api.LHCOutage, Outage: true, Leader: "hq-3"},
			[]row{{"br-1", "up", true}, {"hq-1", "lost", false}, {"hq-2", "up", false}, {"hq-3", "up", true}}},
		{"outage, judged by the copy's time", server.SelfState{Name: "hq-3", LHC: api.LHCOutage, Outage: true, Leader: "hq-2", AsOf: now.Add(14 * time.Second)},
			[]row{{"br-1", "lost", false}, {"hq-1", "lost", false}, {"hq-2", "up", true}, {"hq-3", "up", false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := server.BrokerStates(records, tc.self, now, 15*time.Second)
			if len(got) != len(tc.want) {
				t.Fatalf("%d brokers, want %d", len(got), len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				if g.Name != w.name || g.State != w.state || g.ZoneLeader != w.leader {
					t.Errorf("#%d: %s %s leader=%v, want %s %s leader=%v", i, g.Name, g.State, g.ZoneLeader, w.name, w.state, w.leader)
				}
				if g.Self != (g.Name == tc.self.Name) {
					t.Errorf("%s: self %v", g.Name, g.Self)
				}
			}
		})
	}
}
