package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-vdi/usher/internal/hotpath"
)

// DefaultMaxConnsPerClient is Config.MaxConnsPerClient's default.
const DefaultMaxConnsPerClient = hotpath.DefaultMaxConnsPerClient

// registerConnMetrics exposes the HTTP listeners' connection counts.
func registerConnMetrics(reg prometheus.Registerer, lim *hotpath.Limiter) error {
	total, perClient := lim.Limits()
	refused := func(why string, n func(hotpath.LimitStats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "usher_http_connections_refused_total",
			Help:        "HTTP connections refused at once: their client address held its most (per_client), or every connection was taken and none idle (total).",
			ConstLabels: prometheus.Labels{"reason": why}},
			func() float64 { return float64(n(lim.Stats())) })
	}
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "usher_http_connections",
			Help: "HTTP connections open on the listeners (NFuse's included)."},
			func() float64 { return float64(lim.Stats().Conns) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "usher_http_connections_max",
			Help: "The most HTTP connections the listeners hold together (0: no bound)."},
			func() float64 { return float64(max(total, 0)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "usher_http_connections_per_client_max",
			Help: "The most HTTP connections one client address may hold (0: no bound)."},
			func() float64 { return float64(max(perClient, 0)) }),
		refused("per_client", func(st hotpath.LimitStats) int64 { return st.RefusedPerClient }),
		refused("total", func(st hotpath.LimitStats) int64 { return st.RefusedTotal }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "usher_http_connections_evicted_total",
			Help: "Idle HTTP connections closed to make room for a new one, every connection being taken."},
			func() float64 { return float64(lim.Stats().Evicted) }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
