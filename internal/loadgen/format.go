package loadgen

import (
	"strconv"
	"time"
)

func itoa(n int) string { return strconv.Itoa(n) }

// fmtFloat writes f with as few digits as it needs, at most 3 decimals.
func fmtFloat(f float64) string {
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// FormatMillis writes a latency in milliseconds for people: "0.42 ms",
// "212 ms", "3.61 s".
func FormatMillis(ms float64) string {
	switch {
	case ms >= 10_000:
		return strconv.FormatFloat(ms/1000, 'f', 1, 64) + " s"
	case ms >= 1000:
		return strconv.FormatFloat(ms/1000, 'f', 2, 64) + " s"
	case ms >= 10:
		return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
	case ms >= 1:
		return strconv.FormatFloat(ms, 'f', 1, 64) + " ms"
	}
	return strconv.FormatFloat(ms, 'f', 2, 64) + " ms"
}

// FormatDuration writes a time to finish as the seeds do: "11m57s", "1h23m20s", "0.84s".
func FormatDuration(seconds float64) string {
	d := time.Duration(seconds * float64(time.Second))
	if d < time.Minute {
		return strconv.FormatFloat(seconds, 'f', 2, 64) + "s"
	}
	return d.Round(time.Second).String()
}
