package broker

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-vdi/usher/internal/site"
)

// Operations measured by the broker's transaction metrics.
const (
	OpEnumerate = "enumerate"
	OpLaunch    = "launch"
	OpReconnect = "reconnect"
	OpLogin     = "login"
	OpRegister  = "register"
)

// Metrics are the broker's Prometheus metrics. Their names map onto the
// Citrix counters admins watch:
//
//	usher_broker_concurrent_transactions{operation}      "Concurrent Transactions"
//	usher_broker_transactions_total{operation,result}    "Transactions/sec" (use rate())
//	usher_broker_transaction_duration_seconds{operation} "Avg. Transaction Time" (sum/count)
//	usher_machines{state}, usher_machine_load_index      registered machines and their load index
//	usher_sessions{state}                                sessions by state
type Metrics struct {
	concurrent *prometheus.GaugeVec
	total      *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	reconnects prometheus.Counter
	refused    prometheus.Counter
	xmlTotal   *prometheus.CounterVec
	xmlTime    *prometheus.HistogramVec
	state      *stateCollector
}

// NewMetrics returns unregistered metrics; Register adds them to a registry.
func NewMetrics() *Metrics {
	return &Metrics{
		concurrent: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "usher_broker_concurrent_transactions",
			Help: "Brokering transactions in progress (Citrix: Concurrent Transactions).",
		}, []string{"operation"}),
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_broker_transactions_total",
			Help: "Brokering transactions completed, by operation and result; rate() gives Citrix's Transactions/sec.",
		}, []string{"operation", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "usher_broker_transaction_duration_seconds",
			Help:    "Time to complete a brokering transaction (Citrix: Avg. Transaction Time is sum/count).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"operation"}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "usher_broker_reconnections_total",
			Help: "Launches that returned a user to an existing session.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "usher_broker_refused_transactions_total",
			Help: "Transactions refused at once because the broker was at its concurrency bound (answered retry-required).",
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
			machines: prometheus.NewDesc("usher_machines", "Machines by registration state (registered, unregistered, maintenance).", []string{"state"}, nil),
			load:     prometheus.NewDesc("usher_machine_load_index", "A machine's load index, 0 idle to 10000 full.", []string{"machine", "delivery_group"}, nil),
			sessions: prometheus.NewDesc("usher_machine_sessions", "Sessions on a machine, pending ones included.", []string{"machine", "delivery_group"}, nil),
			byState:  prometheus.NewDesc("usher_sessions", "Sessions by state.", []string{"state"}, nil),
		},
	}
}

// Register adds the metrics to r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.concurrent, m.total, m.duration, m.reconnects, m.refused, m.xmlTotal, m.xmlTime, m.state} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *Metrics) attach(b *Broker) { m.state.broker = b }

// begin counts a transaction in progress; the returned function ends it
// with its outcome.
func (m *Metrics) begin(op string) func(error) {
	return m.beginAs(op, func() string { return op })
}

// beginAs is begin whose final operation label is decided at the end (a
// launch that reconnected counts as a reconnect).
func (m *Metrics) beginAs(op string, final func() string) func(error) {
	start := time.Now()
	g := m.concurrent.WithLabelValues(op)
	g.Inc()
	return func(err error) {
		g.Dec()
		result := "ok"
		if err != nil {
			result = site.ErrorCode(err)
		}
		f := final()
		m.total.WithLabelValues(f, result).Inc()
		m.duration.WithLabelValues(f).Observe(time.Since(start).Seconds())
	}
}

// Observe records a transaction measured by a transport, such as a login.
func (m *Metrics) Observe(op string, start time.Time, err error) {
	result := "ok"
	if err != nil {
		result = site.ErrorCode(err)
	}
	m.total.WithLabelValues(op, result).Inc()
	m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

// ObserveXML records an NFuse XML Service request answered with errorID
// ("" for success).
func (m *Metrics) ObserveXML(request, errorID string, d time.Duration) {
	m.xmlTotal.WithLabelValues(request, errorID).Inc()
	m.xmlTime.WithLabelValues(request).Observe(d.Seconds())
}

// stateCollector reports machine and session state at scrape time.
type stateCollector struct {
	broker                            *Broker
	machines, load, sessions, byState *prometheus.Desc
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.machines
	ch <- c.load
	ch <- c.sessions
	ch <- c.byState
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	if c.broker == nil {
		return
	}
	counts := map[string]float64{"registered": 0, "unregistered": 0, "maintenance": 0}
	for _, ms := range c.broker.machines.snapshot() {
		switch {
		case ms.maintenance:
			counts["maintenance"]++
		case ms.registered:
			counts["registered"]++
		default:
			counts["unregistered"]++
		}
		ch <- prometheus.MustNewConstMetric(c.load, prometheus.GaugeValue, float64(ms.load.Index), ms.name, ms.group)
		ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, float64(ms.effective().Sessions), ms.name, ms.group)
	}
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.machines, prometheus.GaugeValue, n, state)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c.broker.store.View(ctx, func(tx site.Tx) error {
		for _, st := range []site.SessionState{site.SessionPending, site.SessionActive, site.SessionDisconnected} {
			p, err := tx.Sessions().List(ctx, site.SessionFilter{State: st}, site.ListOptions{Limit: 1})
			if err != nil {
				return err
			}
			ch <- prometheus.MustNewConstMetric(c.byState, prometheus.GaugeValue, float64(p.Total), string(st))
		}
		return nil
	})
}
