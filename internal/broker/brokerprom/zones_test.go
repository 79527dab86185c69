package brokerprom_test

import (
	"context"
	"fmt"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/usher-vdi/usher/internal/broker/brokerprom"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// scrape returns the registry's samples, one a line, as /metrics serves
// them.
func scrape(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	return strings.Split(rec.Body.String(), "\n")
}

// sumOf sums the samples of name whose labels include every one of want
// (`state="active"`), whatever their other labels.
func sumOf(lines []string, name string, want ...string) float64 {
	var sum float64
	for _, l := range lines {
		rest, ok := strings.CutPrefix(l, name+"{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		all := true
		for _, w := range want {
			all = all && slices.Contains(strings.Split(labels, ","), w)
		}
		var v float64
		if _, err := fmt.Sscan(value, &v); all && err == nil {
			sum += v
		}
	}
	return sum
}

// metricsOf registers metrics attached to the site's broker and store.
func metricsOf(t *testing.T, s *sitetest.Site) *prometheus.Registry {
	t.Helper()
	m := brokerprom.New()
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	m.Attach(s.Broker)
	m.AttachStore(s.Store)
	return reg
}

// addSessions creates sessions of resource in the site DB, machine ->
// state, their IDs beginning with prefix and their users with first.
func addSessions(t *testing.T, s *sitetest.Site, prefix string, first int, group, resource string, states map[string]site.SessionState) {
	t.Helper()
	ctx := context.Background()
	err := s.Store.Update(ctx, func(tx site.Tx) error {
		for i, m := range slices.Sorted(maps.Keys(states)) {
			now := time.Now().UTC()
			sess := site.Session{ID: fmt.Sprintf("%s-%02d", prefix, i), User: demo.UserName(first + i), Resource: resource, DeliveryGroup: group,
				Machine: m, State: states[m], CreatedAt: now, UpdatedAt: now}
			if states[m] == site.SessionLoggedOff {
				sess.EndedAt = now
			}
			if err := tx.Sessions().Create(ctx, sess); err != nil {
				return fmt.Errorf("session on %s: %w", m, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGaugesByZone: on a site of two zones, the machine and session
// gauges tell each zone's figures (a machine's zone is its catalog's, a
// session's its machine's), every zone and state has its series, and the
// sums over zone are the site's figures, as before the label.
func TestGaugesByZone(t *testing.T) {
	cfg := demo.Site()
	cfg.Zones = append(cfg.Zones, site.Zone{Name: "branch"})
	for i := range cfg.Catalogs {
		if cfg.Catalogs[i].Name == "rdsh-office" {
			cfg.Catalogs[i].Zone = "branch" // office-vda-01..40
		}
	}
	for i := range cfg.Machines {
		if cfg.Machines[i].Name == "office-vda-01" || cfg.Machines[i].Name == "eng-vda-01" {
			cfg.Machines[i].Maintenance = true
		}
	}
	s := sitetest.New(t, sitetest.Options{Config: cfg, Registered: true})
	addSessions(t, s, "office", 1, demo.OfficeApps, demo.OfficeDesktop, map[string]site.SessionState{
		"office-vda-02": site.SessionActive, "office-vda-03": site.SessionActive, "office-vda-04": site.SessionDisconnected,
		"office-vda-05": site.SessionLoggedOff,
	})
	addSessions(t, s, "pooled", 10, demo.PooledDesktops, demo.PooledDesktop, map[string]site.SessionState{
		"pooled-vda-01": site.SessionPending, "pooled-vda-02": site.SessionActive,
	})

	got := scrape(t, metricsOf(t, s))
	for _, want := range []string{
		`usher_machines{state="registered",zone="branch"} 39`,
		`usher_machines{state="maintenance",zone="branch"} 1`,
		`usher_machines{state="unregistered",zone="branch"} 0`,
		`usher_machines{state="registered",zone="primary"} 16`,
		`usher_machines{state="maintenance",zone="primary"} 1`,
		`usher_machines{state="unregistered",zone="primary"} 0`,
		`usher_sessions{state="active",zone="branch"} 2`,
		`usher_sessions{state="disconnected",zone="branch"} 1`,
		`usher_sessions{state="pending",zone="branch"} 0`,
		`usher_sessions{state="active",zone="primary"} 1`,
		`usher_sessions{state="disconnected",zone="primary"} 0`,
		`usher_sessions{state="pending",zone="primary"} 1`,
	} {
		if !slices.Contains(got, want) {
			t.Errorf("no sample %s in\n%s", want, strings.Join(got, "\n"))
		}
	}

	// Summed over zone: the site's figures, as the broker counts them.
	counts, err := s.Broker.SessionCounts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []site.SessionState{site.SessionPending, site.SessionActive, site.SessionDisconnected} {
		if got, want := sumOf(got, "usher_sessions", `state="`+string(st)+`"`), float64(counts[st]); got != want {
			t.Errorf("usher_sessions{state=%q} summed over zone: %v, want %v", st, got, want)
		}
	}
	if got, want := sumOf(got, "usher_machines", `state="registered"`), 55.0; got != want {
		t.Errorf("registered machines summed over zone: %v, want %v", got, want)
	}
	if got, want := sumOf(got, "usher_machines"), float64(len(cfg.Machines)); got != want {
		t.Errorf("machines summed over state and zone: %v, want %v", got, want)
	}
}

// TestGaugesOfOneZone: on a site of one zone, every machine and session
// is in it, counted without listing the sessions.
func TestGaugesOfOneZone(t *testing.T) {
	s := sitetest.New(t, sitetest.Options{Registered: true})
	addSessions(t, s, "office", 1, demo.OfficeApps, demo.OfficeDesktop, map[string]site.SessionState{
		"office-vda-01": site.SessionActive, "office-vda-02": site.SessionPending, "office-vda-03": site.SessionLoggedOff,
	})
	got := scrape(t, metricsOf(t, s))
	for _, want := range []string{
		`usher_machines{state="registered",zone="primary"} 57`,
		`usher_machines{state="maintenance",zone="primary"} 0`,
		`usher_machines{state="unregistered",zone="primary"} 0`,
		`usher_sessions{state="active",zone="primary"} 1`,
		`usher_sessions{state="pending",zone="primary"} 1`,
		`usher_sessions{state="disconnected",zone="primary"} 0`,
	} {
		if !slices.Contains(got, want) {
			t.Errorf("no sample %s in\n%s", want, strings.Join(got, "\n"))
		}
	}
	for _, l := range got {
		if (strings.HasPrefix(l, "usher_machines{") || strings.HasPrefix(l, "usher_sessions{")) && !strings.Contains(l, `zone="primary"`) {
			t.Errorf("a sample of another zone: %s", l)
		}
	}
}
