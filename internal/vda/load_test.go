package vda

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
)

const sampleStat = `cpu  10132153 290696 3084719 46828483 16683 0 25195 0 175628 0
cpu0 1393280 32966 572056 13343292 6130 0 17875 0 23933 0
cpu1 1335007 38046 433830 13384911 2564 0 6048 0 61395 0
intr 1462898 23 3 0 0 0 0 0 0 1 0 0 0 0 0 0 0 18 0
ctxt 1990473
btime 1062191376
processes 2915
procs_running 1
procs_blocked 0
softirq 183433 0 21755 12 39 1137 231 21459 2263
`

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		name        string
		in          string
		idle, total uint64
		wantErr     bool
	}{
		{name: "linux 6", in: sampleStat, idle: 46828483 + 16683,
			total: 10132153 + 290696 + 3084719 + 46828483 + 16683 + 0 + 25195 + 0},
		{name: "four counters", in: "cpu 10 20 30 40\n", idle: 40, total: 100},
		{name: "cpu line not first", in: "intr 1 2\ncpu 1 1 1 1 1\n", idle: 2, total: 5},
		{name: "guest time not counted twice", in: "cpu 100 0 0 100 0 0 0 0 50 50\n", idle: 100, total: 200},
		{name: "only per-cpu lines", in: "cpu0 1 2 3 4\n", wantErr: true},
		{name: "too few counters", in: "cpu 1 2 3\n", wantErr: true},
		{name: "not a number", in: "cpu 1 2 x 4\n", wantErr: true},
		{name: "negative", in: "cpu 1 2 -3 4\n", wantErr: true},
		{name: "overflow", in: "cpu 18446744073709551615 1 1 1\n", wantErr: true},
		{name: "empty", in: "", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat([]byte(tc.in))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("parseProcStat = %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.idle != tc.idle || got.total != tc.total {
				t.Errorf("parseProcStat = idle %d total %d, want %d %d", got.idle, got.total, tc.idle, tc.total)
			}
		})
	}
}

func TestBusyPercentSince(t *testing.T) {
	for _, tc := range []struct {
		name      string
		prev, cur cpuTimes
		want      float64
	}{
		{"first sample: since boot", cpuTimes{}, cpuTimes{idle: 75, total: 100}, 25},
		{"delta", cpuTimes{idle: 75, total: 100}, cpuTimes{idle: 85, total: 200}, 90},
		{"idle", cpuTimes{idle: 75, total: 100}, cpuTimes{idle: 175, total: 200}, 0},
		{"no time passed", cpuTimes{idle: 75, total: 100}, cpuTimes{idle: 75, total: 100}, 25},
		{"counters went back", cpuTimes{idle: 75, total: 100}, cpuTimes{idle: 5, total: 10}, 50},
		{"nothing", cpuTimes{}, cpuTimes{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cur.busyPercentSince(tc.prev); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("busyPercentSince = %v, want %v", got, tc.want)
			}
		})
	}
}

const sampleMeminfo = `MemTotal:       16337852 kB
MemFree:         1290532 kB
MemAvailable:    9912444 kB
Buffers:          712868 kB
Cached:          7618744 kB
SwapCached:            0 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
`

func TestParseMeminfo(t *testing.T) {
	for _, tc := range []struct {
		name         string
		in           string
		total, avail uint64
		wantErr      bool
	}{
		{name: "linux 6", in: sampleMeminfo, total: 16337852, avail: 9912444},
		{name: "before 3.14: no MemAvailable", in: "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 50 kB\nCached: 250 kB\n", total: 1000, avail: 400},
		{name: "estimate capped at total", in: "MemTotal: 1000 kB\nMemFree: 900 kB\nCached: 900 kB\n", total: 1000, avail: 1000},
		{name: "no MemTotal", in: "MemFree: 1 kB\nMemAvailable: 1 kB\n", wantErr: true},
		{name: "zero MemTotal", in: "MemTotal: 0 kB\n", wantErr: true},
		{name: "available over total", in: "MemTotal: 10 kB\nMemAvailable: 11 kB\n", wantErr: true},
		{name: "not a number", in: "MemTotal: lots kB\n", wantErr: true},
		{name: "wrong unit", in: "MemTotal: 10 MB\n", wantErr: true},
		{name: "no value", in: "MemTotal:\n", wantErr: true},
		{name: "overflow", in: "MemTotal: 10 kB\nMemFree: 18446744073709551615 kB\nBuffers: 1 kB\n", wantErr: true},
		{name: "empty", in: "", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMeminfo([]byte(tc.in))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("parseMeminfo = %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.totalKB != tc.total || got.availableKB != tc.avail {
				t.Errorf("parseMeminfo = %+v, want total %d available %d", got, tc.total, tc.avail)
			}
		})
	}
}

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte(sampleStat))
	f.Add([]byte("cpu 1 2 3 4\n"))
	f.Add([]byte("cpu 18446744073709551615 0 0 0 18446744073709551615\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := parseProcStat(b)
		if err != nil {
			return
		}
		if got.idle > got.total {
			t.Fatalf("idle %d > total %d", got.idle, got.total)
		}
		if p := got.busyPercentSince(cpuTimes{}); p < 0 || p > 100 || math.IsNaN(p) {
			t.Fatalf("busy %v%% out of range", p)
		}
	})
}

func FuzzParseMeminfo(f *testing.F) {
	f.Add([]byte(sampleMeminfo))
	f.Add([]byte("MemTotal: 1000 kB\nMemFree: 100 kB\n"))
	f.Add([]byte("MemTotal: 1 kB\nMemAvailable: 1 kB"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := parseMeminfo(b)
		if err != nil {
			return
		}
		if got.totalKB == 0 || got.availableKB > got.totalKB {
			t.Fatalf("inconsistent %+v", got)
		}
		if p := got.usedPercent(); p < 0 || p > 100 || math.IsNaN(p) {
			t.Fatalf("used %v%% out of range", p)
		}
	})
}

func TestProcLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("stat", "cpu 100 0 0 300 0\n")
	write("meminfo", "MemTotal: 2097152 kB\nMemAvailable: 524288 kB\n")
	p := &ProcLoad{Dir: dir}
	got, err := p.Load(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Load{CPUPercent: 25, MemoryPercent: 75, MemoryUsedMB: 1536, MemoryTotalMB: 2048}); got != want {
		t.Errorf("first Load = %+v, want %+v", got, want)
	}
	write("stat", "cpu 190 0 0 310 0\n") // 90 busy of 100 since
	if got, _ := p.Load(context.Background(), 0); got.CPUPercent != 90 {
		t.Errorf("second Load CPU = %v, want 90", got.CPUPercent)
	}
	write("meminfo", "garbage\n")
	if _, err := p.Load(context.Background(), 0); err == nil {
		t.Error("Load of a broken meminfo succeeded")
	}
}

func TestProcLoadOnThisHost(t *testing.T) {
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skip("no /proc")
	}
	l, err := (&ProcLoad{}).Load(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.MemoryTotalMB <= 0 || l.CPUPercent < 0 || l.CPUPercent > 100 || l.MemoryPercent <= 0 || l.MemoryPercent > 100 {
		t.Errorf("implausible load of this host: %+v", l)
	}
}

func TestSimLoad(t *testing.T) {
	ctx := context.Background()
	a, b := &SimLoad{Machine: "m1"}, &SimLoad{Machine: "m1"}
	for range 5 {
		la, _ := a.Load(ctx, 10)
		lb, _ := b.Load(ctx, 10)
		if la != lb {
			t.Fatalf("same machine, same tick: %+v != %+v", la, lb)
		}
	}
	idle, _ := (&SimLoad{Machine: "m2", Noise: -1}).Load(ctx, 0)
	busy, _ := (&SimLoad{Machine: "m2", Noise: -1}).Load(ctx, 20)
	if idle.CPUPercent != 3 || busy.CPUPercent != 33 || busy.MemoryUsedMB != 2048+20*350 {
		t.Errorf("idle %+v, busy %+v: want the base plus the per-session cost", idle, busy)
	}
	full, _ := (&SimLoad{Machine: "m3"}).Load(ctx, 1000)
	if full.CPUPercent != 100 || full.MemoryPercent != 100 || full.MemoryUsedMB != full.MemoryTotalMB {
		t.Errorf("overloaded %+v: want capped at 100%%", full)
	}
}
