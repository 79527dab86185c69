package api

import (
	"context"
	"math"
	"time"
)

// The dashboard's trends: launches, logons and sessions minute by minute
// over the last hour, kept in memory by each broker from the readings of
// its metrics (and lost at restart: /metrics, scraped by Prometheus, is
// the long history).

const (
	// TrendMinutes is how many minutes the trends cover, the current one
	// included.
	TrendMinutes = 60
	// trendEvery is how often the broker reads its metrics for the trends
	// while no dashboard does (RunTrends).
	trendEvery = 15 * time.Second
)

// Trends are the last hour, a sample a minute.
type Trends struct {
	// Samples are the last TrendMinutes minutes, oldest first: the last is
	// the current minute, so far. A minute when the broker read nothing
	// (before it started) has zero launches and logons, and the sessions
	// of the minute before it.
	Samples []TrendSample `json:"samples"`
}

// TrendSample is one minute of the trends.
type TrendSample struct {
	// At is the minute's start.
	At time.Time `json:"at"`
	// Launches are the launches in the minute, failed ones included
	// (usher_broker_transactions_total{operation="launch"}); Logons the
	// users' logons through the API (operation "login").
	Launches int64 `json:"launches"`
	Logons   int64 `json:"logons"`
	// Sessions are the live sessions (active, disconnected or pending)
	// at the minute's last reading.
	Sessions int `json:"sessions"`
}

// trendRing keeps the minutes of the trends: a bounded ring, the
// minutes read, oldest first, none older than TrendMinutes.
type trendRing struct {
	minutes []TrendSample
	// launches and logons are the counters at the last reading; read
	// tells whether there was one.
	launches, logons float64
	read             bool
}

// observe adds a reading at now of the counters of launches and logons
// and the number of live sessions: what the counters gained since the
// last reading goes to now's minute.
func (t *trendRing) observe(now time.Time, launches, logons float64, sessions int) {
	gain := func(old, cur float64) int64 {
		if !t.read {
			return 0
		}
		if cur < old { // the counter started again (a new registry)
			return int64(math.Round(cur))
		}
		return int64(math.Round(cur - old))
	}
	dl, dg := gain(t.launches, launches), gain(t.logons, logons)
	t.launches, t.logons, t.read = launches, logons, true
	minute := now.Truncate(time.Minute)
	if n := len(t.minutes); n == 0 || t.minutes[n-1].At.Before(minute) {
		t.minutes = append(t.minutes, TrendSample{At: minute})
	}
	m := &t.minutes[len(t.minutes)-1]
	if m.At.After(minute) {
		return // a clock that went back: nothing to add to
	}
	m.Launches += dl
	m.Logons += dg
	m.Sessions = sessions
	first := minute.Add(-(TrendMinutes - 1) * time.Minute)
	drop := 0
	for drop < len(t.minutes) && t.minutes[drop].At.Before(first) {
		drop++
	}
	t.minutes = append(t.minutes[:0], t.minutes[drop:]...)
}

// trends returns the TrendMinutes minutes up to now's, oldest first,
// those not read filled in.
func (t *trendRing) trends(now time.Time) Trends {
	minute := now.Truncate(time.Minute)
	out := make([]TrendSample, TrendMinutes)
	i, sessions := 0, 0
	for k := range out {
		at := minute.Add(time.Duration(k-TrendMinutes+1) * time.Minute)
		for i < len(t.minutes) && t.minutes[i].At.Before(at) {
			sessions = t.minutes[i].Sessions
			i++
		}
		if i < len(t.minutes) && t.minutes[i].At.Equal(at) {
			out[k] = t.minutes[i]
			sessions = t.minutes[i].Sessions
			i++
			continue
		}
		out[k] = TrendSample{At: at, Sessions: sessions}
	}
	return Trends{Samples: out}
}

// RunTrends reads the metrics for the dashboard's trends every 15 s
// until ctx ends, so that the last hour is there when an admin opens the
// dashboard. It returns at once without metrics.
func (s *Server) RunTrends(ctx context.Context) {
	if s.dash == nil || s.dash.metrics == nil {
		return
	}
	t := time.NewTicker(trendEvery)
	defer t.Stop()
	for {
		if _, _, err := s.dash.figures(ctx); err != nil && ctx.Err() == nil {
			s.log.DebugContext(ctx, "dashboard trends: read the metrics", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
