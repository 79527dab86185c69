package brokerprom

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestSeriesUnderConcurrency records transactions from many goroutines,
// over more label values than the series keep: every one is counted, under
// its own labels.
func TestSeriesUnderConcurrency(t *testing.T) {
	m := New()
	const workers, each, names = 8, 200, maxSeries + 20
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				m.ObserveXML(fmt.Sprintf("Request%d", (w*each+i)%names), "", time.Millisecond)
				m.TransactionDone("enumerate", time.Millisecond, nil)
			}
		}()
	}
	wg.Wait()
	if got := testutil.ToFloat64(m.total.WithLabelValues("enumerate", "ok")); got != workers*each {
		t.Fatalf("enumerate ok: %v transactions counted, want %d", got, workers*each)
	}
	var sum float64
	for i := range names {
		sum += testutil.ToFloat64(m.xmlTotal.WithLabelValues(fmt.Sprintf("Request%d", i), ""))
	}
	if sum != workers*each {
		t.Fatalf("NFuse requests: %v counted, want %d", sum, workers*each)
	}
	if n := len(*m.xml.m.Load()); n != maxSeries {
		t.Fatalf("%d series kept, want the bound %d", n, maxSeries)
	}
}
