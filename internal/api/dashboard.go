package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/metricname"
	"github.com/usher-vdi/usher/internal/site"
)

// The console's dashboard: this broker's figures, read from the metrics
// that /metrics serves (Config.Metrics), as one JSON document or as a
// stream of server-sent events.

// Gatherer is a source of metrics: the registry that /metrics serves
// (a prometheus.Gatherer, declared here so that the API does not import
// the instrumentation library). Gather returns every metric family.
type Gatherer interface {
	Gather() ([]*dto.MetricFamily, error)
}

// DefaultMaxDashboardStreams bounds the dashboard event streams open at
// once on a server (Config.MaxDashboardStreams).
const DefaultMaxDashboardStreams = 32

const (
	// dashboardInterval is how often a stream sends the figures.
	dashboardInterval = 2 * time.Second
	// dashboardWindow is the most that the rates, p99s and refusals
	// cover.
	dashboardWindow = 30 * time.Second
	// dashboardFresh: figures read less than this long ago are served
	// again, so that any number of streams and snapshots cost the metrics
	// one reading a second at most.
	dashboardFresh = time.Second
	// dashboardWriteTimeout bounds the writing of one event: a client
	// that reads nothing loses its stream then, and its goroutine ends.
	dashboardWriteTimeout = 10 * time.Second
	// dashboardRetry is how long a browser's EventSource waits before it
	// opens a stream again after losing one.
	dashboardRetry = 3 * time.Second
)

// Dashboard is what the console's dashboard shows: this broker's figures
// at one moment, from the metrics that /metrics serves.
type Dashboard struct {
	// At is when the metrics were read.
	At time.Time `json:"at"`
	// WindowSeconds is the span that the rates, p99s and refusals cover:
	// from an earlier reading, up to 30 s before At, to At. It is 0 at a
	// first reading (or the first after a pause of over 30 s), which has
	// nothing to compare with: the rates are 0 then, not measured.
	WindowSeconds float64 `json:"window_seconds"`
	// Machines and Sessions are the site's, summed over its zones.
	Machines MachineFigures `json:"machines"`
	Sessions SessionFigures `json:"sessions"`
	// Zones are the same figures for each zone, in name order: every
	// zone of the site, and "" for machines and sessions of no known
	// zone. A console shows them when there are several.
	Zones []ZoneFigures `json:"zones"`
	// Launches are the launches that placed a session (operation
	// "launch": one that returned the user to an existing session counts
	// as a reconnect), failed ones included; Enumerations the
	// enumerations (operation "enumerate").
	Launches     TransactionFigures `json:"launches"`
	Enumerations TransactionFigures `json:"enumerations"`
	Refused      RefusalFigures     `json:"refused"`
	// LocalHostCache is true when this broker has a Local Host Cache (a
	// broker of a PostgreSQL site); Outage is true while it brokers from
	// it (outage mode: usher_lhc_outage).
	LocalHostCache bool `json:"local_host_cache"`
	Outage         bool `json:"outage"`
	// Trends are the launches, logons and sessions of the last hour,
	// minute by minute.
	Trends Trends `json:"trends"`
}

// MachineFigures count machines by registration state (usher_machines).
type MachineFigures struct {
	Registered   int `json:"registered"`
	Unregistered int `json:"unregistered"`
	Maintenance  int `json:"maintenance"`
}

// SessionFigures count live sessions by state (usher_sessions).
type SessionFigures struct {
	Active       int `json:"active"`
	Disconnected int `json:"disconnected"`
	Pending      int `json:"pending"`
}

// ZoneFigures are a zone's machines and sessions.
type ZoneFigures struct {
	Name     string         `json:"name"`
	Machines MachineFigures `json:"machines"`
	Sessions SessionFigures `json:"sessions"`
}

// TransactionFigures are one operation's brokering transactions over the
// window (usher_broker_transactions_total and
// usher_broker_transaction_duration_seconds).
type TransactionFigures struct {
	// Count is the transactions completed in the window, failed ones
	// included.
	Count int64 `json:"count"`
	// PerSecond is Count over the window's span.
	PerSecond float64 `json:"per_second"`
	// P99Seconds is an upper bound of the 99th percentile of the window's
	// transaction times: the upper bound (le) of the histogram bucket
	// where it falls, not an interpolation. It is 0 when the window has
	// no transaction.
	P99Seconds float64 `json:"p99_seconds"`
	// P99Beyond is true when the 99th percentile falls beyond the last
	// bucket with a bound: it is then over P99Seconds, that last bound.
	P99Beyond bool `json:"p99_beyond"`
}

// RefusalFigures count transactions refused in the window.
type RefusalFigures struct {
	// Overloaded is the transactions that admission control refused at
	// once, answered retry-required (usher_broker_refused_transactions_total).
	Overloaded int64 `json:"overloaded"`
	// NoCapacity is the launches that found no machine with room
	// (usher_broker_transactions_total{operation="launch",result="no_capacity"}).
	NoCapacity int64 `json:"no_capacity"`
}

// The metrics the dashboard reads, named as the packages that register
// them name them.
const (
	metricMachines     = metricname.Machines
	metricSessions     = metricname.Sessions
	metricTransactions = metricname.BrokerTransactions
	metricDuration     = metricname.BrokerTransactionDuration
	metricRefused      = metricname.BrokerRefusedTransactions
	metricOutage       = metricname.LHCOutage
)

// registerDashboard adds the dashboard's figures, as a document and as a
// stream of server-sent events.
func (s *Server) registerDashboard() {
	d := &dashboard{metrics: s.cfg.Metrics, now: time.Now, max: int64(s.cfg.MaxDashboardStreams), log: s.log}
	s.dash = d
	if d.max <= 0 {
		d.max = DefaultMaxDashboardStreams
	}
	s.route(Route{Method: "GET", Pattern: adminPrefix + "/dashboard", OperationID: "getDashboard", Tag: "dashboard",
		Summary: "This broker's figures for the console's dashboard, from the metrics /metrics serves: machines and sessions by state, " +
			"in total and per zone; launches and enumerations per second and their p99, and refusals, over the last 30 s",
		Response: reflect.TypeFor[Dashboard]()},
		func(r *http.Request) (any, error) {
			fig, _, err := d.figures(r.Context())
			return fig, err
		})
	s.route(Route{Method: "GET", Pattern: adminPrefix + "/dashboard/events", OperationID: "streamDashboard", Tag: "dashboard",
		Summary: "The dashboard's figures as server-sent events (text/event-stream): an event \"figures\" whose data is the document of " +
			"GET " + adminPrefix + "/dashboard, at once and then every 2 s, until the client goes, the admin's token expires or the " +
			"server shuts down. At most " + strconv.Itoa(int(d.max)) + " streams are open at once on a broker; over that, 429."},
		func(r *http.Request) (any, error) { return s.streamDashboard(r, d) })
}

var errNoMetrics = site.Errorf(site.EUnavailable, "this server has no metrics to show")

// streamDashboard answers with the stream of the figures as server-sent
// events, which goes on until the request's context ends, the admin's
// credentials lapse, the server stops (Config.Stopping) or a write fails.
// It returns an error only before the stream starts.
func (s *Server) streamDashboard(r *http.Request, d *dashboard) (any, error) {
	if d.metrics == nil {
		return nil, errNoMetrics
	}
	// Reserved, then checked: however many requests race here, no more
	// than max streams are ever open.
	if n := d.streams.Add(1); n > d.max {
		d.streams.Add(-1)
		return nil, &retryLater{&httpError{http.StatusTooManyRequests, site.EOverloaded, fmt.Sprintf(
			"this broker already sends the dashboard to %d clients, as many as it will; close one of them, or read GET %s/dashboard instead", d.max, adminPrefix)}, "10"}
	}
	ctx := r.Context()
	admin, expires := adminFrom(ctx), adminTokenExpiry(ctx)
	hash, err := s.adminHash(ctx, admin)
	if err == nil {
		_, first, ferr := d.figures(ctx)
		if ferr == nil {
			return stream(func(w http.ResponseWriter) {
				defer d.streams.Add(-1)
				s.sendDashboard(w, r, d, first, admin, hash, expires)
			}), nil
		}
		err = ferr
	}
	d.streams.Add(-1)
	return nil, err
}

// sendDashboard writes the stream: the first figures, then the figures
// every dashboardInterval, as long as streamDashboard says.
func (s *Server) sendDashboard(w http.ResponseWriter, r *http.Request, d *dashboard, first []byte, admin, hash string, expires time.Time) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy must not hold events back
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	// send writes one event within the write timeout; its own deadline,
	// not the server's WriteTimeout, bounds it, so that a stream outlives
	// the latter.
	send := func(b []byte) bool {
		if err := rc.SetWriteDeadline(time.Now().Add(dashboardWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return false
		}
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send(append(fmt.Appendf(nil, "retry: %d\n\n", dashboardRetry.Milliseconds()), event("figures", first)...)) {
		return
	}
	tick := time.NewTicker(dashboardInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.Stopping:
			return
		case <-tick.C:
		}
		if why := s.lapsed(ctx, admin, hash, expires); why != "" {
			s.log.DebugContext(ctx, "dashboard stream ended", "admin", admin, "why", why)
			return
		}
		_, b, err := d.figures(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// The client keeps its last figures; a comment instead of
			// them still finds out a client that stopped reading.
			s.log.WarnContext(ctx, "dashboard figures", "err", err)
			b = nil
		}
		msg := []byte(": no figures this time\n\n")
		if b != nil {
			msg = event("figures", b)
		}
		if !send(msg) {
			return
		}
	}
}

// event is a server-sent event of the name with data, which holds no
// line break (compact JSON).
func event(name string, data []byte) []byte {
	b := make([]byte, 0, len(name)+len(data)+16)
	b = append(b, "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

// adminHash returns the admin's password hash as stored.
func (s *Server) adminHash(ctx context.Context, name string) (string, error) {
	var hash string
	err := s.cfg.Store.View(ctx, func(tx site.Tx) error {
		a, err := tx.Admins().Get(ctx, name)
		hash = a.PasswordHash
		return err
	})
	if site.ErrorCode(err) == site.ENotFound {
		return "", errUnauthorized
	}
	return hash, err
}

// lapsed says why the admin who opened a stream, with a password whose
// hash was hash or a token that expires then (zero for a password), may
// read it no longer: the token expired, or the account was deleted or
// its password changed (which revokes its tokens). It returns "" while
// the admin may, and when the site DB cannot tell: the stream goes on.
func (s *Server) lapsed(ctx context.Context, admin, hash string, expires time.Time) string {
	if !expires.IsZero() && !s.cfg.Signer.Now().Before(expires) {
		return "token expired"
	}
	now, err := s.adminHash(ctx, admin)
	switch {
	case errors.Is(err, errUnauthorized):
		return "admin deleted"
	case err != nil:
		return ""
	case now != hash:
		return "password changed"
	}
	return ""
}

// dashboard reads the figures from the metrics and keeps the readings of
// the last window, shared by every request.
type dashboard struct {
	metrics Gatherer
	now     func() time.Time
	log     *slog.Logger
	// max bounds the open streams, which streams counts.
	max     int64
	streams atomic.Int64

	mu sync.Mutex
	// readings are the counters read over the last window, oldest first;
	// latest and latestJSON are the figures of the last, whose Gather
	// ended at readAt: a slow Gather (the site DB's session counts) must
	// not leave a reading stale on arrival, for every waiter to read again.
	readings   []reading
	latest     Dashboard
	latestJSON []byte
	readAt     time.Time
	// trend keeps the last hour's minutes from the readings.
	trend trendRing
}

// reading is the counters of one reading of the metrics.
type reading struct {
	at                                             time.Time
	launches, enumerations, noCapacity, overloaded float64
	logons                                         float64
	launchTimes, enumerationTimes                  histogram
}

// histogram is a cumulative histogram: count observations, buckets[i].n
// of them at most buckets[i].le.
type histogram struct {
	count   uint64
	buckets []bucket
}

type bucket struct {
	le float64
	n  uint64
}

// figures returns the figures, read again unless the last reading is
// under dashboardFresh old, and their JSON (compact, one line).
func (d *dashboard) figures(ctx context.Context) (Dashboard, []byte, error) {
	if d.metrics == nil {
		return Dashboard{}, nil, errNoMetrics
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	if d.latestJSON != nil {
		if age := now.Sub(d.readAt); age >= 0 && age < dashboardFresh {
			return d.latest, d.latestJSON, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return Dashboard{}, nil, err
	}
	fams, err := d.metrics.Gather()
	if err != nil {
		if len(fams) == 0 {
			return Dashboard{}, nil, fmt.Errorf("read the metrics: %w", err)
		}
		// What could be gathered is served, as /metrics would not: the
		// dashboard is better with most of its figures than with none.
		d.log.WarnContext(ctx, "dashboard: some metrics could not be read", "err", err)
	}
	fig, cur := readFigures(flatten(fams))
	fig.At, cur.at = now, now

	// The window starts at the oldest reading at most dashboardWindow old.
	kept := d.readings[:0]
	for _, r := range d.readings {
		if age := now.Sub(r.at); age > 0 && age <= dashboardWindow {
			kept = append(kept, r)
		}
	}
	if len(kept) > 0 {
		windowFigures(&fig, kept[0], cur)
	}
	d.readings = append(kept, cur)
	d.trend.observe(now, cur.launches, cur.logons, fig.Sessions.Active+fig.Sessions.Disconnected+fig.Sessions.Pending)
	fig.Trends = d.trend.trends(now)
	b, err := json.Marshal(fig)
	if err != nil {
		return Dashboard{}, nil, err
	}
	d.latest, d.latestJSON, d.readAt = fig, b, d.now()
	return fig, b, nil
}

// series is one series of a metric family, read from the gatherer.
type series struct {
	name   string
	labels map[string]string
	value  float64 // a gauge's or a counter's
	hist   histogram
}

// flatten reads the families the dashboard needs into series.
func flatten(fams []*dto.MetricFamily) []series {
	var out []series
	for _, f := range fams {
		name := f.GetName()
		switch name {
		case metricMachines, metricSessions, metricTransactions, metricDuration, metricRefused, metricOutage:
		default:
			continue
		}
		for _, m := range f.GetMetric() {
			s := series{name: name, labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			// A family has one type: the other getters give zero values.
			s.value = m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
			h := m.GetHistogram()
			s.hist.count = h.GetSampleCount()
			for _, b := range h.GetBucket() {
				s.hist.buckets = append(s.hist.buckets, bucket{le: b.GetUpperBound(), n: b.GetCumulativeCount()})
			}
			out = append(out, s)
		}
	}
	return out
}

// readFigures returns the figures of one reading that need no window
// (the gauges), and its counters.
func readFigures(all []series) (Dashboard, reading) {
	var fig Dashboard
	var r reading
	zones := map[string]*ZoneFigures{}
	zone := func(name string) *ZoneFigures {
		z := zones[name]
		if z == nil {
			z = &ZoneFigures{Name: name}
			zones[name] = z
		}
		return z
	}
	for _, s := range all {
		n := int(math.Round(s.value))
		switch s.name {
		case metricMachines:
			z := zone(s.labels[metricname.Zone])
			switch s.labels[metricname.State] {
			case "registered":
				z.Machines.Registered += n
				fig.Machines.Registered += n
			case "unregistered":
				z.Machines.Unregistered += n
				fig.Machines.Unregistered += n
			case "maintenance":
				z.Machines.Maintenance += n
				fig.Machines.Maintenance += n
			}
		case metricSessions:
			z := zone(s.labels[metricname.Zone])
			switch site.SessionState(s.labels[metricname.State]) {
			case site.SessionActive:
				z.Sessions.Active += n
				fig.Sessions.Active += n
			case site.SessionDisconnected:
				z.Sessions.Disconnected += n
				fig.Sessions.Disconnected += n
			case site.SessionPending:
				z.Sessions.Pending += n
				fig.Sessions.Pending += n
			}
		case metricTransactions:
			switch s.labels[metricname.Operation] {
			case broker.OpLaunch:
				r.launches += s.value
				if s.labels[metricname.Result] == site.ENoCapacity {
					r.noCapacity += s.value
				}
			case broker.OpEnumerate:
				r.enumerations += s.value
			case broker.OpLogin:
				r.logons += s.value
			}
		case metricDuration:
			switch s.labels[metricname.Operation] {
			case broker.OpLaunch:
				r.launchTimes = s.hist
			case broker.OpEnumerate:
				r.enumerationTimes = s.hist
			}
		case metricRefused:
			r.overloaded += s.value
		case metricOutage:
			fig.LocalHostCache = true
			fig.Outage = fig.Outage || s.value != 0
		}
	}
	fig.Zones = make([]ZoneFigures, 0, len(zones))
	for _, z := range zones {
		fig.Zones = append(fig.Zones, *z)
	}
	slices.SortFunc(fig.Zones, func(a, b ZoneFigures) int { return strings.Compare(a.Name, b.Name) })
	return fig, r
}

// windowFigures sets fig's rates, p99s and refusals from the counters of
// two readings, old before cur.
func windowFigures(fig *Dashboard, old, cur reading) {
	span := cur.at.Sub(old.at).Seconds()
	if span <= 0 {
		return
	}
	fig.WindowSeconds = span
	delta := func(a, b float64) int64 { return int64(math.Round(max(b-a, 0))) } // a counter never goes back
	fig.Launches = transactions(delta(old.launches, cur.launches), span, old.launchTimes, cur.launchTimes)
	fig.Enumerations = transactions(delta(old.enumerations, cur.enumerations), span, old.enumerationTimes, cur.enumerationTimes)
	fig.Refused = RefusalFigures{Overloaded: delta(old.overloaded, cur.overloaded), NoCapacity: delta(old.noCapacity, cur.noCapacity)}
}

// transactions returns the figures of n transactions over span seconds
// whose times the histograms old and cur, read at the span's ends, hold.
func transactions(n int64, span float64, old, cur histogram) TransactionFigures {
	t := TransactionFigures{Count: n, PerSecond: float64(n) / span}
	t.P99Seconds, t.P99Beyond = p99(old, cur)
	return t
}

// p99 returns the upper bound of the bucket where the 99th percentile of
// the observations between two readings of a histogram falls, with
// beyond true when it falls past the last bounded bucket (the bound is
// that bucket's then); 0 when there is no observation between them.
func p99(old, cur histogram) (le float64, beyond bool) {
	if cur.count < old.count {
		return 0, false // not one histogram
	}
	total := cur.count - old.count
	if total == 0 {
		return 0, false
	}
	rank := uint64(math.Ceil(0.99 * float64(total)))
	before := map[float64]uint64{}
	for _, b := range old.buckets {
		before[b.le] = b.n
	}
	for _, b := range cur.buckets {
		if math.IsInf(b.le, 1) {
			continue
		}
		le = b.le
		if b.n-min(before[b.le], b.n) >= rank {
			return le, false
		}
	}
	return le, true
}
