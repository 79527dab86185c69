package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-vdi/usher/internal/auth"
)

// registerPasswordMetrics reports the argon2id password checks on
// /metrics: how many, and the time they took (their ratio is what a
// logon's check costs now).
func registerPasswordMetrics(reg prometheus.Registerer, v *auth.VerifiedCache) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "usher_password_checks_total",
			Help: "argon2id password checks against an account's hash (a cache hit makes none)."},
			func() float64 { n, _ := v.Hashes(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "usher_password_check_seconds_total",
			Help: "The time the password checks took, waits for a hashing slot left out."},
			func() float64 { return v.CheckTime().Seconds() }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
