package server

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/usher-vdi/usher/internal/pgtest"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/pgstore"
)

// TestSiteDBMetrics: usher_sitedb_conn_limit_total reads the PostgreSQL
// store's count of refusals at each scrape, and zero while there is no
// site DB yet (a Local Host Cache that started from its copy).
func TestSiteDBMetrics(t *testing.T) {
	var store site.Store
	reg := prometheus.NewRegistry()
	if err := registerSiteDBMetrics(reg, func() site.Store { return store }); err != nil {
		t.Fatal(err)
	}
	want := func(v string) string {
		return `# HELP usher_sitedb_conn_limit_total Connections the site DB's server refused for being at its connection limit (SQLSTATE 53300): transactions wait for a connection then, and the site DB is not taken for lost.
# TYPE usher_sitedb_conn_limit_total counter
usher_sitedb_conn_limit_total ` + v + "\n"
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want("0")), "usher_sitedb_conn_limit_total"); err != nil {
		t.Errorf("without a site DB: %v", err)
	}
	pg, err := pgstore.Open(t.Context(), pgtest.DSN(t), pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	store = pg
	if got := testutil.CollectAndCount(reg, "usher_sitedb_conn_limit_total"); got != 1 {
		t.Errorf("%d series of usher_sitedb_conn_limit_total, want 1", got)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want("0")), "usher_sitedb_conn_limit_total"); err != nil {
		t.Errorf("a site DB that was never refused: %v", err)
	}
}
