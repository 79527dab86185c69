package broker

import (
	"github.com/usher-vdi/usher/internal/site"
)

// Load is a machine's load under a delivery group's rules.
type Load struct {
	// Index is 0..site.MaxLoadIndex from the session, CPU and memory rules.
	Index int
	// LogonsFull is set when the machine has as many logons in progress as
	// the concurrent-logons rule tolerates.
	LogonsFull bool
}

// SessionLimit returns the most sessions a machine may hold: 1 for
// single-session catalogs, else the lower of the machine's own maximum and
// the rule's limit; 0 means no limit.
func SessionLimit(rules site.LoadRules, kind site.CatalogKind, machineMax int) int {
	if kind.SingleSession() {
		return 1
	}
	limit := 0
	if rules.MaxSessions.Enabled {
		limit = rules.MaxSessions.Limit
	}
	if machineMax > 0 && (limit == 0 || machineMax < limit) {
		limit = machineMax
	}
	return limit
}

// LoadOf computes a machine's load. The index is the highest of the enabled
// rules, each scaled so that the rule's full point is site.MaxLoadIndex:
// sessions against the session limit, CPU against its full percentage, and
// memory above the base load against its full percentage.
func LoadOf(rules site.LoadRules, limit int, u site.Usage) Load {
	idx := 0
	if limit > 0 {
		idx = max(idx, scale(float64(u.Sessions), float64(limit)))
	}
	if rules.CPU.Enabled {
		idx = max(idx, scale(u.CPUPercent, float64(rules.CPU.FullPercent)))
	}
	if rules.Memory.Enabled {
		if u.MemoryTotalMB > 0 {
			full := float64(u.MemoryTotalMB) * float64(rules.Memory.FullPercent) / 100
			base := float64(rules.Memory.BaseLoadMB)
			idx = max(idx, scale(float64(u.MemoryUsedMB)-base, full-base))
		} else {
			idx = max(idx, scale(u.MemoryPercent, float64(rules.Memory.FullPercent)))
		}
	}
	l := Load{Index: idx}
	if rules.ConcurrentLogons.Enabled && u.LogonsInProgress >= rules.ConcurrentLogons.Tolerance {
		l.LogonsFull = true
	}
	return l
}

func scale(v, full float64) int {
	if full <= 0 {
		if v > 0 {
			return site.MaxLoadIndex
		}
		return 0
	}
	x := v / full * site.MaxLoadIndex
	switch {
	case x <= 0:
		return 0
	case x >= site.MaxLoadIndex:
		return site.MaxLoadIndex
	}
	return int(x)
}
