package vda

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// Load is a machine's resource use, as reported in heartbeats.
type Load struct {
	CPUPercent    float64
	MemoryPercent float64
	// MemoryUsedMB and MemoryTotalMB are 0 when unknown.
	MemoryUsedMB  int
	MemoryTotalMB int
}

// LoadSource measures a machine. Load is called once per heartbeat, from
// one goroutine at a time, with the number of sessions on the machine. On
// error the heartbeat goes out without CPU and memory figures and the
// error is logged.
type LoadSource interface {
	Load(ctx context.Context, sessions int) (Load, error)
}

// ProcLoad reads the CPU and memory use of a Linux host from /proc. CPU is
// the busy share of all CPUs since the previous call (since boot on the
// first call); memory is MemTotal less MemAvailable.
type ProcLoad struct {
	// Dir is the proc file system; "" means /proc.
	Dir string

	mu   sync.Mutex
	prev cpuTimes
}

var _ LoadSource = (*ProcLoad)(nil)

// Load implements LoadSource.
func (p *ProcLoad) Load(_ context.Context, _ int) (Load, error) {
	dir := p.Dir
	if dir == "" {
		dir = "/proc"
	}
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return Load{}, err
	}
	cpu, err := parseProcStat(stat)
	if err != nil {
		return Load{}, fmt.Errorf("parse %s/stat: %w", dir, err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "meminfo"))
	if err != nil {
		return Load{}, err
	}
	mem, err := parseMeminfo(raw)
	if err != nil {
		return Load{}, fmt.Errorf("parse %s/meminfo: %w", dir, err)
	}
	p.mu.Lock()
	busy := cpu.busyPercentSince(p.prev)
	p.prev = cpu
	p.mu.Unlock()
	return Load{
		CPUPercent:    busy,
		MemoryPercent: mem.usedPercent(),
		MemoryUsedMB:  int((mem.totalKB - mem.availableKB) / 1024),
		MemoryTotalMB: int(mem.totalKB / 1024),
	}, nil
}

// cpuTimes are the aggregate CPU times of /proc/stat, in clock ticks.
type cpuTimes struct {
	idle  uint64 // idle and iowait
	total uint64 // every state but guest time, which user time includes
}

var errOverflow = errors.New("counter overflow")

// parseProcStat reads the aggregate "cpu" line of /proc/stat:
//
//	cpu  user nice system idle iowait irq softirq steal guest guest_nice
//
// Kernels before 2.6 have only the first four counters; all ten are summed
// when present, less guest and guest_nice, which user and nice include.
func parseProcStat(b []byte) (cpuTimes, error) {
	for line := range bytes.Lines(b) {
		f := bytes.Fields(line)
		if len(f) == 0 || string(f[0]) != "cpu" {
			continue
		}
		if len(f) < 5 {
			return cpuTimes{}, fmt.Errorf("cpu line has %d counters, want at least 4", len(f)-1)
		}
		var t cpuTimes
		for i, s := range f[1:min(len(f), 9)] { // guest and guest_nice excluded
			v, err := strconv.ParseUint(string(s), 10, 64)
			if err != nil {
				return cpuTimes{}, fmt.Errorf("cpu counter %d: %w", i+1, err)
			}
			if t.total+v < t.total {
				return cpuTimes{}, errOverflow
			}
			t.total += v
			if i == 3 || i == 4 { // idle, iowait
				t.idle += v
			}
		}
		return t, nil
	}
	return cpuTimes{}, errors.New(`no "cpu" line`)
}

// busyPercentSince returns the busy share of CPU time between prev and t,
// 0 to 100. Counters that went backwards (a zero prev, a wrapped counter,
// a hot-unplugged CPU) yield the share since boot.
func (t cpuTimes) busyPercentSince(prev cpuTimes) float64 {
	total, idle := t.total-prev.total, t.idle-prev.idle
	if prev.total > t.total || prev.idle > t.idle || total == 0 || idle > total {
		total, idle = t.total, t.idle
	}
	if total == 0 {
		return 0
	}
	return min(100*float64(total-idle)/float64(total), 100) // rounding of huge counters
}

// memInfo is the part of /proc/meminfo a heartbeat needs.
type memInfo struct {
	totalKB, availableKB uint64
}

// parseMeminfo reads MemTotal and MemAvailable from /proc/meminfo. Kernels
// before 3.14 lack MemAvailable; MemFree + Buffers + Cached stands in.
func parseMeminfo(b []byte) (memInfo, error) {
	var m memInfo
	var free, buffers, cached uint64
	var haveTotal, haveAvail bool
	for line := range bytes.Lines(b) {
		key, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var dst *uint64
		switch string(key) {
		case "MemTotal":
			dst, haveTotal = &m.totalKB, true
		case "MemAvailable":
			dst, haveAvail = &m.availableKB, true
		case "MemFree":
			dst = &free
		case "Buffers":
			dst = &buffers
		case "Cached":
			dst = &cached
		default:
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 || len(f) > 2 || (len(f) == 2 && string(f[1]) != "kB") {
			return memInfo{}, fmt.Errorf("%s: want a number of kB", key)
		}
		v, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return memInfo{}, fmt.Errorf("%s: %w", key, err)
		}
		*dst = v
	}
	if !haveTotal || m.totalKB == 0 {
		return memInfo{}, errors.New("no MemTotal")
	}
	if !haveAvail {
		if free+buffers < free || free+buffers+cached < free+buffers {
			return memInfo{}, errOverflow
		}
		m.availableKB = min(free+buffers+cached, m.totalKB)
	}
	if m.availableKB > m.totalKB {
		return memInfo{}, fmt.Errorf("MemAvailable %d kB is more than MemTotal %d kB", m.availableKB, m.totalKB)
	}
	return m, nil
}

func (m memInfo) usedPercent() float64 {
	return min(100*float64(m.totalKB-m.availableKB)/float64(m.totalKB), 100)
}

// SimLoad derives a simulated machine's load from its session count: a
// base plus a cost per session, with a little deterministic noise, capped
// at 100%. The zero value uses the defaults below.
type SimLoad struct {
	// Machine seeds the noise, so that machines differ but runs repeat.
	Machine string
	// BaseCPU and CPUPerSession are percentages; 0 means 3 and 1.5.
	BaseCPU, CPUPerSession float64
	// TotalMB, BaseMB and MBPerSession are memory sizes; 0 means 16384,
	// 2048 and 350.
	TotalMB, BaseMB, MBPerSession int
	// Noise is the largest deviation of CPU, in percentage points; 0
	// means 2, a negative value none.
	Noise float64

	mu   sync.Mutex
	tick uint64
}

var _ LoadSource = (*SimLoad)(nil)

// Load implements LoadSource.
func (s *SimLoad) Load(_ context.Context, sessions int) (Load, error) {
	s.mu.Lock()
	s.tick++
	tick := s.tick
	s.mu.Unlock()
	baseCPU, perCPU := cmp.Or(s.BaseCPU, 3), cmp.Or(s.CPUPerSession, 1.5)
	total, base, per := cmp.Or(max(s.TotalMB, 0), 16384), cmp.Or(max(s.BaseMB, 0), 2048), cmp.Or(max(s.MBPerSession, 0), 350)
	noise := cmp.Or(s.Noise, 2)
	if noise < 0 {
		noise = 0
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", s.Machine, tick)
	unit := float64(h.Sum64()%2001)/1000 - 1 // -1 .. 1
	cpu := baseCPU + perCPU*float64(sessions) + noise*unit
	used := min(base+per*sessions, total)
	return Load{
		CPUPercent:    math.Round(clamp(cpu, 0, 100)*10) / 10,
		MemoryPercent: math.Round(1000*float64(used)/float64(total)) / 10,
		MemoryUsedMB:  used,
		MemoryTotalMB: total,
	}, nil
}

func clamp(v, lo, hi float64) float64 { return min(max(v, lo), hi) }
