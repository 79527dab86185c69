package broker

import (
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

func TestSessionLimit(t *testing.T) {
	rules := site.DefaultLoadRules()
	off := rules
	off.MaxSessions.Enabled = false
	for _, tc := range []struct {
		name       string
		rules      site.LoadRules
		kind       site.CatalogKind
		machineMax int
		want       int
	}{
		{"default rule", rules, site.MultiSession, 0, 250},
		{"machine lower", rules, site.MultiSession, 40, 40},
		{"machine higher", rules, site.MultiSession, 400, 250},
		{"rule off, machine cap", off, site.MultiSession, 30, 30},
		{"rule off, no cap", off, site.MultiSession, 0, 0},
		{"pooled", rules, site.SingleSessionPooled, 0, 1},
		{"assigned", off, site.SingleSessionAssigned, 5, 1},
	} {
		if got := SessionLimit(tc.rules, tc.kind, tc.machineMax); got != tc.want {
			t.Errorf("%s: SessionLimit = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestLoadOf(t *testing.T) {
	rules := site.DefaultLoadRules()
	all := rules
	all.CPU.Enabled, all.Memory.Enabled = true, true
	hard := rules
	hard.ConcurrentLogons.Hard = true
	for _, tc := range []struct {
		name       string
		rules      site.LoadRules
		limit      int
		u          site.Usage
		want       int
		logonsFull bool
	}{
		{"idle", rules, 250, site.Usage{}, 0, false},
		{"half the sessions", rules, 250, site.Usage{Sessions: 125}, 5000, false},
		{"full", rules, 250, site.Usage{Sessions: 250}, site.MaxLoadIndex, false},
		{"over full is full", rules, 250, site.Usage{Sessions: 300}, site.MaxLoadIndex, false},
		{"single session in use", rules, 1, site.Usage{Sessions: 1}, site.MaxLoadIndex, false},
		{"CPU off by default", rules, 250, site.Usage{CPUPercent: 89}, 0, false},
		{"CPU rule: 45% of 90%", all, 250, site.Usage{CPUPercent: 45}, 5000, false},
		{"highest rule wins", all, 250, site.Usage{Sessions: 25, CPUPercent: 81}, 9000, false},
		{"memory by percent", all, 250, site.Usage{MemoryPercent: 72}, 8000, false},
		{"memory above base load", all, 250, site.Usage{MemoryUsedMB: 768 + 1000, MemoryTotalMB: 10000}, 1214, false}, // 1000 of 9000-768 MB, floored,
		{"memory at base load", all, 250, site.Usage{MemoryUsedMB: 500, MemoryTotalMB: 10000}, 0, false},
		{"logons under tolerance", rules, 250, site.Usage{LogonsInProgress: 1}, 0, false},
		{"logons at tolerance", rules, 250, site.Usage{Sessions: 2, LogonsInProgress: 2}, 80, true},
		{"hard logons", hard, 250, site.Usage{LogonsInProgress: 3}, 0, true},
		{"no limit, no rules", site.LoadRules{}, 0, site.Usage{Sessions: 1000}, 0, false},
	} {
		got := LoadOf(tc.rules, tc.limit, tc.u)
		if got.Index != tc.want || got.LogonsFull != tc.logonsFull {
			t.Errorf("%s: LoadOf = %+v, want index %d, logons full %v", tc.name, got, tc.want, tc.logonsFull)
		}
	}
}

func TestPickPrefersSoftLogonsOverNothing(t *testing.T) {
	s := NewSnapshot(1, &site.Config{
		Catalogs:       []site.Catalog{{Name: "c", Kind: site.MultiSession, Zone: "z"}},
		Machines:       []site.Machine{{Name: "a", Catalog: "c"}, {Name: "b", Catalog: "c"}},
		DeliveryGroups: []site.DeliveryGroup{site.NewDeliveryGroup("g", "c")},
	})
	tb := newTable(func() time.Time { return time.Unix(0, 0) })
	tb.configure(s)
	for _, m := range []string{"a", "b"} {
		tb.sync(m, site.MachineStatus{Registration: site.Registered, Usage: site.Usage{Sessions: 2, LogonsInProgress: 2}})
	}
	picked := tb.pickN("g", "", nil, 4)
	if len(picked) != 2 {
		t.Fatalf("a soft logon limit let %d machines in, want both", len(picked))
	}
	tb.settle(picked[0].name, site.Placed{Session: site.Session{ID: "s", Machine: picked[0].name}}, true)
	s.groups["g"].LoadRules.ConcurrentLogons.Hard = true
	tb.configure(s)
	if picked := tb.pickN("g", "", nil, 4); len(picked) != 0 {
		t.Fatalf("a hard logon limit let %s take a session", picked[0].name)
	}
}
