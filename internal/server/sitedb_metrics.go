package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-vdi/usher/internal/site"
)

// connLimitCounter is a site DB that counts the connections its server
// refused for being at its connection limit (pgstore.Store).
type connLimitCounter interface {
	ConnLimitRefusals() uint64
}

// registerSiteDBMetrics reports the site DB's own figures on /metrics,
// read at each scrape from what store returns then (nil, or a store that
// keeps no such figure, reads as zero): the Local Host Cache opens its
// site DB later when it cannot at start.
func registerSiteDBMetrics(reg prometheus.Registerer, store func() site.Store) error {
	return reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "usher_sitedb_conn_limit_total",
		Help: "Connections the site DB's server refused for being at its connection limit (SQLSTATE 53300): " +
			"transactions wait for a connection then, and the site DB is not taken for lost."},
		func() float64 {
			if c, ok := store().(connLimitCounter); ok {
				return float64(c.ConnLimitRefusals())
			}
			return 0
		}))
}
