// Package ldapprom reports a directory's work to Prometheus: Metrics
// implements ldapauth.Metrics with counters of the directory's operations
// by server, kind and result, their latency, the connections each
// server's pool holds and the group cache's hits and misses. Names,
// labels and meanings are part of usher's interface (the README's
// "Metrics" section).
//
// It imports ldapauth and Prometheus; only the code that assembles a site
// imports it, so that ldapauth itself imports no instrumentation library.
package ldapprom

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-vdi/usher/internal/auth/ldapauth"
	"github.com/usher-vdi/usher/internal/metricname"
)

// Metrics is a directory's metrics. The zero value is not usable: use New.
type Metrics struct {
	ops      *prometheus.CounterVec
	duration *prometheus.HistogramVec
	conns    *prometheus.GaugeVec
	cache    *prometheus.CounterVec
}

var _ ldapauth.Metrics = (*Metrics)(nil)

// New returns unregistered metrics; Register adds them to a registry.
func New() *Metrics {
	return &Metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricname.DirectoryOperations,
			Help: "Directory operations by server, kind (dial, service_bind, user_bind, user_search, group_search, root_dse) and result (ok, refused, unavailable, canceled).",
		}, []string{"server", "op", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    metricname.DirectoryOperationDuration,
			Help:    "How long directory operations took, by server and kind, whatever their result.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"server", "op"}),
		conns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "usher_directory_connections",
			Help: "Connections of a server's pool: state in_use (serving a logon now) or open (all of them).",
		}, []string{"server", "state"}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_directory_group_cache_lookups_total",
			Help: "Lookups of users' group memberships in the cache, by result: hit (no directory operation) or miss.",
		}, []string{"result"}),
	}
}

// Register adds the metrics to r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.ops, m.duration, m.conns, m.cache} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Operation counts one operation and observes its latency.
func (m *Metrics) Operation(server string, op ldapauth.Op, result ldapauth.Result, elapsed time.Duration) {
	m.ops.WithLabelValues(server, string(op), string(result)).Inc()
	m.duration.WithLabelValues(server, string(op)).Observe(elapsed.Seconds())
}

// Pool sets a server's connection gauges.
func (m *Metrics) Pool(server string, inUse, open int) {
	m.conns.WithLabelValues(server, "in_use").Set(float64(inUse))
	m.conns.WithLabelValues(server, "open").Set(float64(open))
}

// GroupCache counts one lookup in the group cache.
func (m *Metrics) GroupCache(hit bool) {
	result := "miss"
	if hit {
		result = "hit"
	}
	m.cache.WithLabelValues(result).Inc()
}
