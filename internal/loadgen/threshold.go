package loadgen

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Threshold is a pass/fail condition on every measured step of a run:
// "p99<50ms", "avg<=2s", "errors<1%", "tps>=100", "dropped==0".
//
// Latency metrics (avg, p50, p90, p99, max) take a duration (a bare number
// is milliseconds); errors is the error rate in percent; tps is
// transactions per second; dropped counts dropped and unsent transactions.
type Threshold struct {
	Metric string
	Op     string
	Value  float64 // milliseconds for latencies
	text   string
}

func (t Threshold) String() string { return t.text }

var thresholdRE = regexp.MustCompile(`^\s*([a-z0-9]+)\s*(<=|>=|==|<|>)\s*([^\s]+)\s*$`)

// ParseThreshold reads a threshold.
func ParseThreshold(s string) (Threshold, error) {
	m := thresholdRE.FindStringSubmatch(strings.ToLower(s))
	if m == nil {
		return Threshold{}, fmt.Errorf("threshold %q is not METRIC OP VALUE (p99<50ms, errors<1%%, tps>=100)", s)
	}
	t := Threshold{Metric: m[1], Op: m[2], text: strings.TrimSpace(s)}
	v := m[3]
	var err error
	switch t.Metric {
	case "avg", "p50", "p90", "p99", "max":
		if f, ferr := strconv.ParseFloat(v, 64); ferr == nil {
			t.Value = f
		} else {
			var d time.Duration
			d, err = time.ParseDuration(v)
			t.Value = float64(d) / float64(time.Millisecond)
		}
	case "errors":
		t.Value, err = strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
	case "tps", "dropped":
		t.Value, err = strconv.ParseFloat(v, 64)
	default:
		return Threshold{}, fmt.Errorf("threshold %q: metric %q is not avg, p50, p90, p99, max, errors, tps or dropped", s, t.Metric)
	}
	if err != nil {
		return Threshold{}, fmt.Errorf("threshold %q: value %q: %w", s, v, err)
	}
	return t, nil
}

// Measure returns the threshold's metric in step s.
func (t Threshold) Measure(s Step) float64 {
	switch t.Metric {
	case "avg":
		return s.Latency.Avg
	case "p50":
		return s.Latency.P50
	case "p90":
		return s.Latency.P90
	case "p99":
		return s.Latency.P99
	case "max":
		return s.Latency.Max
	case "errors":
		return s.ErrorPct
	case "tps":
		return s.TPS
	case "dropped":
		return float64(s.Dropped + s.Unsent)
	}
	return 0
}

// Pass reports whether step s meets the threshold.
func (t Threshold) Pass(s Step) bool {
	got := t.Measure(s)
	switch t.Op {
	case "<":
		return got < t.Value
	case "<=":
		return got <= t.Value
	case ">":
		return got > t.Value
	case ">=":
		return got >= t.Value
	case "==":
		return got == t.Value
	}
	return false
}

// CheckThresholds returns one line per threshold a step of r fails.
func CheckThresholds(r *Result, ts []Threshold) []string {
	var fails []string
	for _, s := range r.Steps {
		for _, t := range ts {
			if !t.Pass(s) {
				fails = append(fails, fmt.Sprintf("step %d (%s): %s is %s, want %s", s.Step, s.Level(), t.Metric, t.format(t.Measure(s)), t))
			}
		}
	}
	return fails
}

func (t Threshold) format(v float64) string {
	switch t.Metric {
	case "avg", "p50", "p90", "p99", "max":
		return FormatMillis(v)
	case "errors":
		return strconv.FormatFloat(v, 'f', 2, 64) + "%"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
