package brokerprom

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// series keeps the children of a counter and a histogram vector for the
// label values a hot path observes again and again, so that recording
// one costs a map read, not the vectors' hashing and locking. The map is
// copied on each new key (there are a few dozen), and read without a lock.
type series struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec

	m  atomic.Pointer[map[seriesKey]seriesPair]
	mu sync.Mutex // serialises additions
}

// seriesKey names a pair: the label of both vectors, and the counter's
// second label.
type seriesKey struct{ name, result string }

type seriesPair struct {
	total    prometheus.Counter
	duration prometheus.Observer
}

// maxSeries bounds the pairs kept; others are looked up each time.
const maxSeries = 256

func (s *series) get(name, result string) seriesPair {
	k := seriesKey{name, result}
	if m := s.m.Load(); m != nil {
		if p, ok := (*m)[k]; ok {
			return p
		}
	}
	p := seriesPair{s.total.WithLabelValues(name, result), s.duration.WithLabelValues(name)}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.m.Load()
	if old != nil && len(*old) >= maxSeries {
		return p
	}
	m := make(map[seriesKey]seriesPair, 1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[k] = p
	s.m.Store(&m)
	return p
}
