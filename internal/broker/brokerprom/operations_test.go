package brokerprom_test

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/broker/brokerprom"
)

// TestEveryOperationHasConcurrentSeries checks that an idle broker shows
// usher_broker_concurrent_transactions at 0 for every operation, and
// that those are the operations the README lists.
func TestEveryOperationHasConcurrentSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := brokerprom.New().Register(reg); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	got := strings.Split(rec.Body.String(), "\n")
	for _, op := range broker.Operations {
		if want := `usher_broker_concurrent_transactions{operation="` + op + `"} 0`; !slices.Contains(got, want) {
			t.Errorf("no sample %s in\n%s", want, rec.Body.String())
		}
	}

	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The README's paragraph on the broker's metrics names the operations.
	var para string
	for p := range strings.SplitSeq(string(readme), "\n\n") {
		if strings.Contains(p, "usher_broker_concurrent_transactions") {
			para = p
			break
		}
	}
	if para == "" {
		t.Fatal("the README does not describe usher_broker_concurrent_transactions")
	}
	for _, op := range broker.Operations {
		if !strings.Contains(para, "`"+op+"`") {
			t.Errorf("the README's metrics paragraph does not list the operation %q:\n%s", op, para)
		}
	}
}
