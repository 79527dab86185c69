package server

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-vdi/usher/internal/datadir"
	"github.com/usher-vdi/usher/internal/lhc"
	"github.com/usher-vdi/usher/internal/metricname"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/pgstore"
)

// openLHC opens a PostgreSQL site DB behind the Local Host Cache, which
// starts from the data directory's local copy when the site DB cannot be
// opened.
func openLHC(ctx context.Context, cfg Config, dir *datadir.Dir, log *slog.Logger) (*lhc.Store, string, error) {
	lh, err := lhc.Open(ctx, lhc.Options{
		Open: func(ctx context.Context) (site.Store, error) {
			st, _, err := OpenStore(ctx, StoreConfig{DB: cfg.DB, Dir: dir, Logger: log})
			return st, err
		},
		Dir: dir.Path(), OutageAfter: cfg.OutageAfter, RecoverAfter: cfg.RecoverAfter,
		ProbeInterval: cfg.LHCProbeInterval, CopyEvery: cfg.LHCCopyEvery, Logger: log, Now: cfg.Now,
	})
	if err != nil {
		return nil, "", err
	}
	return lh, pgstore.Describe(cfg.DB), nil
}

// registerLHCMetrics reports the Local Host Cache's state on /metrics.
func registerLHCMetrics(reg prometheus.Registerer, lh *lhc.Store) error {
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	collectors := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metricname.LHCOutage,
			Help: "1 while this broker brokers from its local copy of the site (outage mode), 0 while from the site DB."},
			func() float64 { return b2f(lh.InOutage()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "usher_lhc_outage_forced",
			Help: "1 while an admin forces outage mode."},
			func() float64 { return b2f(lh.Status().Forced) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "usher_lhc_site_db_answers",
			Help: "1 when the site DB answered the last probe."},
			func() float64 { return b2f(lh.Status().DBAnswers) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "usher_lhc_outages_total",
			Help: "Outages this broker entered since it started."},
			func() float64 { return float64(lh.Status().Outages) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "usher_lhc_sessions_written_back_total",
			Help: "Sessions of outages written back to the site DB since start."},
			func() float64 { return float64(lh.Status().WrittenBack) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "usher_lhc_sessions_ended_at_recovery_total",
			Help: "Sessions ended at recovery since start: placements whose answer was lost as the site DB went, their users seated again in the outage."},
			func() float64 { return float64(lh.Status().EndedAtRecovery) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "usher_lhc_probes_busy_total",
			Help: "Probes the site DB refused for its connection limit since start (it answers: no outage)."},
			func() float64 { return float64(lh.Status().ProbesBusy) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "usher_lhc_copy_version",
			Help: "The configuration version of the local copy."},
			func() float64 { return float64(lh.Status().CopyVersion) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "usher_lhc_copy_timestamp_seconds",
			Help: "When the local copy was made, in seconds since the epoch (0: not this run)."},
			func() float64 {
				if at := lh.Status().CopyAt; !at.IsZero() {
					return float64(at.UnixNano()) / 1e9
				}
				return 0
			}),
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
