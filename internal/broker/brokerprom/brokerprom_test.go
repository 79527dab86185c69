package brokerprom_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/broker/brokerprom"
	"github.com/usher-vdi/usher/internal/site"
)

// fakeState is a broker with two machines of zone "z" and some sessions.
type fakeState struct{}

func (fakeState) Snapshot() *broker.Snapshot {
	return broker.NewSnapshot(1, &site.Config{Zones: []site.Zone{{Name: "z", Primary: true}},
		Catalogs: []site.Catalog{{Name: "c", Kind: site.MultiSession, Zone: "z"}},
		Machines: []site.Machine{{Name: "m1", Catalog: "c"}, {Name: "m2", Catalog: "c"}}})
}

func (fakeState) MachineLoads() []broker.MachineLoad {
	return []broker.MachineLoad{
		{Name: "m1", DeliveryGroup: "g", Registered: true, LoadIndex: 2500, Sessions: 3},
		{Name: "m2", DeliveryGroup: "g", Maintenance: true},
	}
}

func (fakeState) SessionCounts(context.Context) (map[site.SessionState]int, error) {
	return map[site.SessionState]int{site.SessionPending: 1, site.SessionActive: 2, site.SessionDisconnected: 0}, nil
}

func TestMetrics(t *testing.T) {
	m := brokerprom.New()
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	m.Attach(fakeState{})
	m.TransactionStarted(broker.OpLaunch)
	m.TransactionStarted(broker.OpLaunch)
	m.TransactionFinished(broker.OpLaunch)
	m.TransactionDone(broker.OpReconnect, time.Millisecond, nil)
	m.TransactionDone(broker.OpLogin, time.Millisecond, site.Errorf(site.EUnauthorized, "no"))
	m.TransactionDone(broker.OpLaunch, time.Millisecond, errors.New("boom"))
	m.Refused()
	m.Reconnected()
	m.ObserveXML("RequestAppData", "", time.Millisecond)
	m.ObserveXML("RequestAddress", "unspecified", time.Millisecond)

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	got := strings.Split(rec.Body.String(), "\n")
	for _, want := range []string{
		`usher_broker_concurrent_transactions{operation="launch"} 1`,
		`usher_broker_transactions_total{operation="reconnect",result="ok"} 1`,
		`usher_broker_transactions_total{operation="login",result="unauthorized"} 1`,
		`usher_broker_transactions_total{operation="launch",result="internal"} 1`,
		`usher_broker_transaction_duration_seconds_count{operation="launch"} 1`,
		`usher_broker_reconnections_total 1`,
		`usher_broker_refused_transactions_total 1`,
		`usher_nfuse_transactions_total{error_id="",request="RequestAppData"} 1`,
		`usher_nfuse_transactions_total{error_id="unspecified",request="RequestAddress"} 1`,
		`usher_nfuse_transaction_duration_seconds_count{request="RequestAddress"} 1`,
		`usher_machines{state="registered",zone="z"} 1`,
		`usher_machines{state="maintenance",zone="z"} 1`,
		`usher_machines{state="unregistered",zone="z"} 0`,
		`usher_machine_load_index{delivery_group="g",machine="m1"} 2500`,
		`usher_machine_sessions{delivery_group="g",machine="m1"} 3`,
		`usher_sessions{state="pending",zone="z"} 1`,
		`usher_sessions{state="active",zone="z"} 2`,
		`usher_sessions{state="disconnected",zone="z"} 0`,
	} {
		if !slices.Contains(got, want) {
			t.Errorf("no sample %s in\n%s", want, strings.Join(got, "\n"))
		}
	}
}

func TestUnattachedStateReportsNothing(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := brokerprom.New().Register(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}
