package api

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/broker/brokerprom"
	"github.com/usher-vdi/usher/internal/site"
)

// zonedState is a broker of two zones, as brokerprom sees it: three
// machines in "branch" (one in maintenance, one unregistered), two in
// "primary", and sessions.
type zonedState struct{}

func (zonedState) MachineLoads() []broker.MachineLoad {
	return []broker.MachineLoad{
		{Name: "b1", Registered: true}, {Name: "b2", Registered: true, Maintenance: true}, {Name: "b3"},
		{Name: "p1", Registered: true}, {Name: "p2", Registered: true},
	}
}

func (zonedState) SessionCounts(context.Context) (map[site.SessionState]int, error) {
	return map[site.SessionState]int{site.SessionActive: 4, site.SessionDisconnected: 1, site.SessionPending: 2}, nil
}

func (zonedState) Snapshot() *broker.Snapshot {
	return broker.NewSnapshot(1, &site.Config{
		Zones:    []site.Zone{{Name: "primary", Primary: true}, {Name: "branch"}},
		Catalogs: []site.Catalog{{Name: "cb", Kind: site.MultiSession, Zone: "branch"}, {Name: "cp", Kind: site.MultiSession, Zone: "primary"}},
		Machines: []site.Machine{{Name: "b1", Catalog: "cb"}, {Name: "b2", Catalog: "cb"}, {Name: "b3", Catalog: "cb"},
			{Name: "p1", Catalog: "cp"}, {Name: "p2", Catalog: "cp"}},
	})
}

// clock is a settable time.
type clock struct{ t time.Time }

func newClock() *clock                   { return &clock{t: time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)} }
func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// TestDashboardFigures reads the figures from a real registry holding the
// broker's metrics (brokerprom) at known values: the gauges as they are,
// the counters over the window between two readings, the p99 as the
// bound of the bucket where it falls.
func TestDashboardFigures(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := brokerprom.New()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	m.Attach(zonedState{})
	outage := 0.0
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "usher_lhc_outage", Help: "outage"}, func() float64 { return outage }))
	c := newClock()
	d := &dashboard{metrics: reg, now: c.now, max: 1}
	ctx := context.Background()

	// Transactions before the first reading are not in any window.
	m.TransactionDone(broker.OpLaunch, time.Second, nil)
	m.Refused()

	fig, first, err := d.figures(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fig.Machines, (MachineFigures{Registered: 3, Unregistered: 1, Maintenance: 1}); got != want {
		t.Errorf("machines %+v, want %+v", got, want)
	}
	// Without a store (AttachStore), the sessions of a site of several
	// zones are counted in total only, under the zone "".
	if got, want := fig.Sessions, (SessionFigures{Active: 4, Disconnected: 1, Pending: 2}); got != want {
		t.Errorf("sessions %+v, want %+v", got, want)
	}
	wantZones := []ZoneFigures{
		{Name: "", Sessions: SessionFigures{Active: 4, Disconnected: 1, Pending: 2}},
		{Name: "branch", Machines: MachineFigures{Registered: 1, Unregistered: 1, Maintenance: 1}},
		{Name: "primary", Machines: MachineFigures{Registered: 2}},
	}
	if len(fig.Zones) != len(wantZones) {
		t.Fatalf("zones %+v, want %+v", fig.Zones, wantZones)
	}
	for i := range wantZones {
		if fig.Zones[i] != wantZones[i] {
			t.Errorf("zone %d: %+v, want %+v", i, fig.Zones[i], wantZones[i])
		}
	}
	if fig.WindowSeconds != 0 || fig.Launches != (TransactionFigures{}) || fig.Refused != (RefusalFigures{}) {
		t.Errorf("a first reading has a window: %v s, launches %+v, refused %+v", fig.WindowSeconds, fig.Launches, fig.Refused)
	}
	if !fig.LocalHostCache || fig.Outage || !fig.At.Equal(c.t) {
		t.Errorf("LHC %v, outage %v, at %v", fig.LocalHostCache, fig.Outage, fig.At)
	}

	// Within a second, the same reading.
	c.advance(500 * time.Millisecond)
	m.TransactionDone(broker.OpEnumerate, time.Millisecond, nil)
	if _, again, _ := d.figures(ctx); string(again) != string(first) {
		t.Errorf("a reading 0.5 s after the last is not the last:\n%s\n%s", again, first)
	}

	// 98 launches at 3 ms, two refused for want of a machine at 3 ms, one
	// of 2 s; 40 enumerations at 0.2 ms, one more above; 3 overloaded.
	for range 98 {
		m.TransactionDone(broker.OpLaunch, 3*time.Millisecond, nil)
	}
	for range 2 {
		m.TransactionDone(broker.OpLaunch, 3*time.Millisecond, site.Errorf(site.ENoCapacity, "full"))
	}
	m.TransactionDone(broker.OpLaunch, 2*time.Second, nil)
	for range 39 {
		m.TransactionDone(broker.OpEnumerate, 200*time.Microsecond, nil)
	}
	for range 3 {
		m.Refused()
	}
	m.TransactionDone(broker.OpReconnect, time.Millisecond, nil) // not a launch
	outage = 1
	c.advance(9500 * time.Millisecond)
	fig, _, err = d.figures(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fig.WindowSeconds != 10 {
		t.Errorf("window %v s, want 10", fig.WindowSeconds)
	}
	// 101 launches: the 99th percentile is the 100th, at 3 ms: in the
	// bucket of 5 ms.
	if got, want := fig.Launches, (TransactionFigures{Count: 101, PerSecond: 10.1, P99Seconds: 0.005}); got != want {
		t.Errorf("launches %+v, want %+v", got, want)
	}
	// 40 enumerations: the 99th percentile is the 40th, at 1 ms or less.
	if got, want := fig.Enumerations, (TransactionFigures{Count: 40, PerSecond: 4, P99Seconds: 0.001}); got != want {
		t.Errorf("enumerations %+v, want %+v", got, want)
	}
	if got, want := fig.Refused, (RefusalFigures{Overloaded: 3, NoCapacity: 2}); got != want {
		t.Errorf("refused %+v, want %+v", got, want)
	}
	if !fig.Outage {
		t.Error("usher_lhc_outage 1 is not an outage")
	}

	// One more slow launch: 102, whose 99th percentile (the 101st) is one
	// of the two of 2 s: in the bucket of 2.5 s. The window still starts
	// at the first reading.
	m.TransactionDone(broker.OpLaunch, 2*time.Second, nil)
	c.advance(10 * time.Second)
	fig, _, _ = d.figures(ctx)
	if got, want := fig.Launches, (TransactionFigures{Count: 102, PerSecond: 5.1, P99Seconds: 2.5}); got != want || fig.WindowSeconds != 20 {
		t.Errorf("launches %+v over %v s, want %+v over 20 s", got, fig.WindowSeconds, want)
	}

	// 11 s on, the first reading (31 s old) has left the window: it
	// starts at the second, 21 s old, which came before the last launch.
	c.advance(11 * time.Second)
	fig, _, _ = d.figures(ctx)
	if fig.WindowSeconds != 21 || fig.Launches.Count != 1 {
		t.Errorf("window %v s with %d launches, want 21 s with 1", fig.WindowSeconds, fig.Launches.Count)
	}

	// After a pause longer than the window, no window.
	c.advance(45 * time.Second)
	fig, _, _ = d.figures(ctx)
	if fig.WindowSeconds != 0 || fig.Launches != (TransactionFigures{}) {
		t.Errorf("after a pause: window %v s, launches %+v", fig.WindowSeconds, fig.Launches)
	}
	if n := len(d.readings); n != 1 {
		t.Errorf("%d readings kept after a pause, want 1", n)
	}
}

// TestDashboardReadingsBounded: however often the figures are asked for,
// the readings kept are those of the last window, one a second at most.
func TestDashboardReadingsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newClock()
	d := &dashboard{metrics: reg, now: c.now}
	for range 1000 {
		if _, _, err := d.figures(context.Background()); err != nil {
			t.Fatal(err)
		}
		c.advance(100 * time.Millisecond)
	}
	if n := len(d.readings); n > int(dashboardWindow/dashboardFresh)+1 {
		t.Errorf("%d readings kept", n)
	}
}

// broken is a collector that fails.
type broken struct{ desc *prometheus.Desc }

func (b broken) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }
func (b broken) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(b.desc, errors.New("no metrics today"))
}

// TestDashboardGatherError: metrics that cannot be read at all fail the
// figures.
func TestDashboardGatherError(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(broken{prometheus.NewDesc("usher_broken", "broken", nil, nil)})
	d := &dashboard{metrics: reg, now: time.Now, log: slog.New(slog.DiscardHandler)}
	if _, _, err := d.figures(context.Background()); err == nil {
		t.Fatal("no error from metrics that cannot be read")
	}

	// Some read: what was is shown.
	m := brokerprom.New()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	m.Attach(zonedState{})
	fig, _, err := d.figures(context.Background())
	if err != nil || fig.Machines.Registered != 3 {
		t.Fatalf("with some metrics unreadable: %v, %+v", err, fig)
	}
}

func TestP99(t *testing.T) {
	h := func(count uint64, cum ...uint64) histogram {
		les := []float64{0.001, 0.01, 0.1, 1, math.Inf(1)}
		out := histogram{count: count}
		for i, n := range cum {
			out.buckets = append(out.buckets, bucket{le: les[i], n: n})
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		old, cur histogram
		le       float64
		beyond   bool
	}{
		{"nothing", h(0, 0, 0, 0, 0), h(0, 0, 0, 0, 0), 0, false},
		{"nothing new", h(5, 5, 5, 5, 5), h(5, 5, 5, 5, 5), 0, false},
		{"one", h(0, 0, 0, 0, 0), h(1, 0, 1, 1, 1), 0.01, false},
		{"100: the 99th", h(0, 0, 0, 0, 0), h(100, 99, 99, 100, 100), 0.001, false},
		{"100: one slow is the 100th", h(0, 0, 0, 0, 0), h(100, 98, 99, 100, 100), 0.01, false},
		{"the window's only", h(1000, 1000, 1000, 1000, 1000), h(1010, 1000, 1000, 1010, 1010), 0.1, false},
		{"beyond the last bound", h(0, 0, 0, 0, 0), h(10, 0, 0, 0, 0), 1, true},
		{"a reset", h(10, 10, 10, 10, 10), h(1, 1, 1, 1, 1), 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			le, beyond := p99(tc.old, tc.cur)
			if le != tc.le || beyond != tc.beyond {
				t.Errorf("p99 = %v, %v; want %v, %v", le, beyond, tc.le, tc.beyond)
			}
		})
	}
}
