package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// ReadyTimeout bounds the site DB query of a readiness check.
const ReadyTimeout = 2 * time.Second

// Healthz answers that the process serves HTTP; it checks nothing else.
func Healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// Readyz returns a handler that answers 200 when the site DB answers a
// query within ReadyTimeout and 503 when it does not. The cause is logged,
// never sent.
func Readyz(store site.Store, log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		err := store.View(ctx, func(tx site.Tx) error { _, err := tx.ConfigVersion(ctx); return err })
		if err != nil {
			log.Warn("not ready", "err", err)
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "site DB unavailable")
			return
		}
		fmt.Fprintln(w, "ready")
	}
}

// CheckAdmins warns when the site has no admin account: the admin API
// would refuse every request. It returns an error only when the site DB
// cannot be read.
func CheckAdmins(ctx context.Context, store site.Store, log *slog.Logger) error {
	return store.View(ctx, func(tx site.Tx) error {
		p, err := tx.Admins().List(ctx, site.ListOptions{Limit: 1})
		if err != nil {
			return fmt.Errorf("list admins: %w", err)
		}
		if p.Total == 0 {
			log.Warn("no admin account: the admin API refuses every request; create one with 'usher admin add NAME'")
		}
		return nil
	})
}
