package brokerprom

import (
	"context"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/metricname"
	"github.com/usher-vdi/usher/internal/site"
)

// Metrics are the broker's and the NFuse endpoint's Prometheus metrics.
// Their names map onto the Citrix counters admins watch:
//
//	usher_broker_concurrent_transactions{operation}      "Concurrent Transactions"
//	usher_broker_transactions_total{operation,result}    "Transactions/sec" (use rate())
//	usher_broker_transaction_duration_seconds{operation} "Avg. Transaction Time" (sum/count)
//	usher_broker_reconnections_total                     launches that returned to a session
//	usher_broker_refused_transactions_total              transactions refused by admission control
//	usher_vda_registration_conflicts_total               registrations refused: another VDA held the machine
//	usher_nfuse_transactions_total{request,error_id}     "Citrix XML Service - Transactions/sec"
//	usher_nfuse_transaction_duration_seconds{request}    NFuse "Avg. Transaction Time"
//	usher_machines{state,zone}, usher_machine_load_index machines by registration state and zone; their load index
//	usher_machine_sessions                               sessions per machine
//	usher_sessions{state,zone}                           sessions by state and zone
//
// Metrics is a broker.Observer; the machine and session gauges are read
// from the State given to Attach when Prometheus scrapes. A machine's zone
// is its catalog's, a session's its machine's; every zone of the site has
// its series, at 0 when it has nothing in a state, and summing over zone
// gives the site's figures. On a site of several zones the session gauges
// list the live sessions of the store given to AttachStore to tell their
// zones (one read per scrape); without a store, or on a site of one zone,
// they count sessions without listing them.
type Metrics struct {
	concurrent   *prometheus.GaugeVec
	total        *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	reconnects   prometheus.Counter
	timerLogoffs *prometheus.CounterVec
	refused      prometheus.Counter
	conflicts    prometheus.Counter
	xmlTotal     *prometheus.CounterVec
	xmlTime      *prometheus.HistogramVec
	state        *stateCollector
	// done and xml hold the series transactions record; gauges the
	// concurrent series of broker.Operations, read-only after New.
	done, xml series
	gauges    map[string]prometheus.Gauge
}

var _ broker.Observer = (*Metrics)(nil)

// State is what the machine and session gauges report; *broker.Broker
// implements it.
type State interface {
	MachineLoads() []broker.MachineLoad
	SessionCounts(ctx context.Context) (map[site.SessionState]int, error)
	// Snapshot is the site configuration, which tells the zones and each
	// machine's catalog; nil reports every machine and session under the
	// zone "".
	Snapshot() *broker.Snapshot
}

var _ State = (*broker.Broker)(nil)

// New returns unregistered metrics; Register adds them to a registry.
// Every operation of broker.Operations has its concurrent-transactions
// series from the start, at 0 while idle.
func New() *Metrics {
	m := newMetrics()
	m.done = series{total: m.total, duration: m.duration}
	m.xml = series{total: m.xmlTotal, duration: m.xmlTime}
	m.gauges = map[string]prometheus.Gauge{}
	for _, op := range broker.Operations {
		m.gauges[op] = m.concurrent.WithLabelValues(op)
	}
	return m
}

func newMetrics() *Metrics {
	return &Metrics{
		concurrent: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "usher_broker_concurrent_transactions",
			Help: "Brokering transactions in progress (Citrix: Concurrent Transactions).",
		}, []string{metricname.Operation}),
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricname.BrokerTransactions,
			Help: "Brokering transactions completed, by operation and result; rate() gives Citrix's Transactions/sec.",
		}, []string{metricname.Operation, metricname.Result}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    metricname.BrokerTransactionDuration,
			Help:    "Time to complete a brokering transaction (Citrix: Avg. Transaction Time is sum/count).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{metricname.Operation}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricname.BrokerReconnections,
			Help: "Launches that returned a user to an existing session.",
		}),
		timerLogoffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricname.BrokerTimerLogoffs,
			Help: "Sessions logged off by their delivery group's session timer, by timer (disconnected_logoff: Citrix's Disconnected session timer; max_session: Session connection timer).",
		}, []string{"timer"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricname.BrokerRefusedTransactions,
			Help: "Transactions refused at once because the broker was at its concurrency bound (answered retry-required).",
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "usher_vda_registration_conflicts_total",
			Help: "VDA registrations refused because another VDA held the machine's live registration: two VDAs claim one machine.",
		}),
		xmlTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_nfuse_transactions_total",
			Help: "NFuse XML Service requests answered, by request type and ErrorId (\"\" for success); Citrix: Citrix XML Service - Transactions/sec.",
		}, []string{"request", "error_id"}),
		xmlTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "usher_nfuse_transaction_duration_seconds",
			Help:    "Time to answer an NFuse XML Service request, by request type (Citrix: Avg. Transaction Time).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"request"}),
		state: &stateCollector{
			machines: prometheus.NewDesc(metricname.Machines, "Machines by registration state (registered, unregistered, maintenance) and zone (their catalog's).", []string{metricname.State, metricname.Zone}, nil),
			load:     prometheus.NewDesc("usher_machine_load_index", "A machine's load index, 0 idle to 10000 full.", []string{"machine", "delivery_group"}, nil),
			sessions: prometheus.NewDesc("usher_machine_sessions", "Sessions on a machine, pending ones included.", []string{"machine", "delivery_group"}, nil),
			byState:  prometheus.NewDesc(metricname.Sessions, "Live sessions by state (pending, active, disconnected) and zone (their machine's).", []string{metricname.State, metricname.Zone}, nil),
		},
	}
}

// Register adds the metrics to r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.concurrent, m.total, m.duration, m.reconnects, m.timerLogoffs, m.refused, m.conflicts, m.xmlTotal, m.xmlTime, m.state} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Attach makes the machine and session gauges report s. Call it before
// the registry is first scraped; until then they report nothing.
func (m *Metrics) Attach(s State) { m.state.source = s }

// AttachStore gives the session gauges the site DB (the broker's store),
// from which, on a site of several zones, they list the live sessions to
// tell each one's zone. Call it before the registry is first scraped.
func (m *Metrics) AttachStore(store site.Store) { m.state.store = store }

// TransactionStarted implements broker.Observer.
func (m *Metrics) TransactionStarted(op string) { m.gauge(op).Inc() }

// TransactionFinished implements broker.Observer.
func (m *Metrics) TransactionFinished(op string) { m.gauge(op).Dec() }

func (m *Metrics) gauge(op string) prometheus.Gauge {
	if g, ok := m.gauges[op]; ok {
		return g
	}
	return m.concurrent.WithLabelValues(op)
}

// TransactionDone implements broker.Observer: the result label is "ok" or
// the error's site error code.
func (m *Metrics) TransactionDone(op string, d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = site.ErrorCode(err)
	}
	p := m.done.get(op, result)
	p.total.Inc()
	p.duration.Observe(d.Seconds())
}

// Refused implements broker.Observer.
func (m *Metrics) Refused() { m.refused.Inc() }

// Reconnected implements broker.Observer.
func (m *Metrics) Reconnected() { m.reconnects.Inc() }

// TimerLogoff implements broker.Observer.
func (m *Metrics) TimerLogoff(timer string) { m.timerLogoffs.WithLabelValues(timer).Inc() }

// RegistrationConflict counts a registration refused because another VDA
// held the machine.
func (m *Metrics) RegistrationConflict() { m.conflicts.Inc() }

var _ broker.ConflictObserver = (*Metrics)(nil)

// ObserveXML records an NFuse XML Service request answered with errorID
// ("" for success); it fits nfuse.Config.Observe.
func (m *Metrics) ObserveXML(request, errorID string, d time.Duration) {
	p := m.xml.get(request, errorID)
	p.total.Inc()
	p.duration.Observe(d.Seconds())
}

// stateCollector reports machine and session state at scrape time.
type stateCollector struct {
	source                            State
	store                             site.Store
	machines, load, sessions, byState *prometheus.Desc
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.machines
	ch <- c.load
	ch <- c.sessions
	ch <- c.byState
}

// The states the gauges always report, at 0 when nothing is in them.
var (
	machineStates = []string{"registered", "unregistered", "maintenance"}
	sessionStates = []site.SessionState{site.SessionPending, site.SessionActive, site.SessionDisconnected}
)

// scrapeTimeout bounds the site DB reads of one scrape.
const scrapeTimeout = 2 * time.Second

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	if c.source == nil {
		return
	}
	zones, zoneOf := siteZones(c.source.Snapshot())
	machines := map[string]map[string]float64{}
	for _, z := range zones {
		machines[z] = map[string]float64{}
	}
	for _, ml := range c.source.MachineLoads() {
		state := "unregistered"
		switch {
		case ml.Maintenance:
			state = "maintenance"
		case ml.Registered:
			state = "registered"
		}
		z := zoneOf[ml.Name]
		if machines[z] == nil {
			machines[z] = map[string]float64{}
		}
		machines[z][state]++
		ch <- prometheus.MustNewConstMetric(c.load, prometheus.GaugeValue, float64(ml.LoadIndex), ml.Name, ml.DeliveryGroup)
		ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, float64(ml.Sessions), ml.Name, ml.DeliveryGroup)
	}
	for z, counts := range machines {
		for _, state := range machineStates {
			ch <- prometheus.MustNewConstMetric(c.machines, prometheus.GaugeValue, counts[state], state, z)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	for z, counts := range c.sessionsByZone(ctx, zones, zoneOf) {
		for _, state := range sessionStates {
			ch <- prometheus.MustNewConstMetric(c.byState, prometheus.GaugeValue, float64(counts[state]), string(state), z)
		}
	}
}

// sessionsByZone counts the live sessions of each zone by state: on a
// site of one zone (or without a store) the broker's counts, all in that
// zone (or ""); on a site of several, from the list of live sessions. On
// an error it returns what it counted before it, as the broker does.
func (c *stateCollector) sessionsByZone(ctx context.Context, zones []string, zoneOf map[string]string) map[string]map[site.SessionState]int {
	out := map[string]map[site.SessionState]int{}
	for _, z := range zones {
		out[z] = map[site.SessionState]int{}
	}
	if len(zones) <= 1 || c.store == nil {
		z := ""
		if len(zones) == 1 {
			z = zones[0]
		}
		counts, _ := c.source.SessionCounts(ctx) // on an error, the states counted before it
		if out[z] == nil {
			out[z] = map[site.SessionState]int{}
		}
		for state, n := range counts {
			out[z][state] += n
		}
		return out
	}
	c.store.View(ctx, func(tx site.Tx) error { // on an error, the zones counted before it
		p, err := tx.Sessions().List(ctx, site.SessionFilter{Live: true}, site.ListOptions{})
		for _, s := range p.Items {
			z := zoneOf[s.Machine]
			if out[z] == nil {
				out[z] = map[site.SessionState]int{}
			}
			out[z][s.State]++
		}
		return err
	})
	return out
}

// siteZones returns the zones of the site's configuration, in name order,
// and the zone of each machine (its catalog's).
func siteZones(snap *broker.Snapshot) ([]string, map[string]string) {
	zoneOf := map[string]string{}
	if snap == nil || snap.Config() == nil {
		return nil, zoneOf
	}
	cfg := snap.Config()
	zones := make([]string, 0, len(cfg.Zones))
	for _, z := range cfg.Zones {
		zones = append(zones, z.Name)
	}
	slices.Sort(zones)
	catalogZone := make(map[string]string, len(cfg.Catalogs))
	for _, cat := range cfg.Catalogs {
		catalogZone[cat.Name] = cat.Zone
	}
	for _, m := range cfg.Machines {
		zoneOf[m.Name] = catalogZone[m.Catalog]
	}
	return zones, zoneOf
}
