package blockbench

import (
	"math/rand/v2"
	"sort"
	"time"
)

// SizeWeight is one entry of an I/O size mix.
type SizeWeight struct {
	Size   int64   `json:"size"`
	Weight float64 `json:"weight"`
}

// Workload is the full-scale description of what each target does; see
// the package documentation for where each figure comes from. Scale
// divides sizes, counts and durations (never I/O sizes).
type Workload struct {
	Scale       int   `json:"scale"`
	ImageSize   int64 `json:"image_size"`
	BootSet     int64 `json:"boot_set"`
	HotRegion   int64 `json:"hot_region"`
	ServerCache int64 `json:"server_ram_cache"`

	BootReads      int           `json:"boot_reads"`
	BootReadMix    []SizeWeight  `json:"boot_read_mix"`
	BootWriteBytes int64         `json:"boot_write_bytes"`
	BootWriteMix   []SizeWeight  `json:"boot_write_mix"`
	BootDuration   time.Duration `json:"boot_duration"`
	BootWindow     time.Duration `json:"boot_window"`

	SteadyIOPS      float64       `json:"steady_iops"`
	SteadyWrites    float64       `json:"steady_write_fraction"`
	SteadyWriteMix  []SizeWeight  `json:"steady_write_mix"`
	HotFraction     float64       `json:"hot_fraction"`
	SteadyDuration  time.Duration `json:"steady_duration"`
	Window          time.Duration `json:"window"`
	RAMHolds        int64         `json:"ram_holds"`
	RAMDoesNotHold  int64         `json:"ram_does_not_hold"`
	WorkingSetGuess int64         `json:"working_set_estimate"`
}

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// DefaultWorkload is the documented workload at scale 2.
func DefaultWorkload() Workload {
	return Workload{
		Scale:       2,
		ImageSize:   4 * gib,
		BootSet:     320 * mib,
		HotRegion:   64 * mib,
		ServerCache: 1 * gib,

		BootReads:      70000,
		BootReadMix:    []SizeWeight{{4 * kib, 0.90}, {8 * kib, 0.06}, {16 * kib, 0.02}, {64 * kib, 0.02}},
		BootWriteBytes: 25 * 1000 * 1000,
		BootWriteMix:   []SizeWeight{{4 * kib, 0.60}, {8 * kib, 0.20}, {16 * kib, 0.10}, {64 * kib, 0.10}},
		BootDuration:   60 * time.Second,
		BootWindow:     5 * time.Minute,

		SteadyIOPS:      10,
		SteadyWrites:    0.9,
		SteadyWriteMix:  []SizeWeight{{4 * kib, 0.70}, {8 * kib, 0.15}, {16 * kib, 0.10}, {64 * kib, 0.05}},
		HotFraction:     0.8,
		SteadyDuration:  60 * time.Minute,
		Window:          30 * time.Second,
		RAMHolds:        256 * mib,
		RAMDoesNotHold:  32 * mib,
		WorkingSetGuess: 120 * mib,
	}
}

// scaled divides a byte size by the scale, keeping it a multiple of
// 64 KiB (the largest I/O) and at least 64 KiB.
func (w Workload) scaled(n int64) int64 {
	s := n / int64(w.Scale) / (64 * kib) * (64 * kib)
	return max(s, 64*kib)
}

func (w Workload) scaledDur(d time.Duration) time.Duration { return d / time.Duration(w.Scale) }

// op is one I/O of a target at a time on the scaled virtual clock.
type op struct {
	at    time.Duration
	off   int64
	n     int32
	write bool
}

func pick(r *rand.Rand, mix []SizeWeight) int64 {
	x := r.Float64()
	for _, m := range mix {
		if x < m.Weight {
			return m.Size
		}
		x -= m.Weight
	}
	return mix[len(mix)-1].Size
}

func mean(mix []SizeWeight) float64 {
	var s float64
	for _, m := range mix {
		s += float64(m.Size) * m.Weight
	}
	return s
}

// randIn returns an offset aligned to 4 KiB such that [off, off+n) lies
// within [start, start+length).
func randIn(r *rand.Rand, start, length, n int64) int64 {
	slots := (length - n) / (4 * kib)
	return start + r.Int64N(slots+1)*4*kib
}

// layout of the image, scaled: boot set, then the hot region, then the
// growth region up to the end.
type layout struct {
	size, bootSet, hotStart, hot, growStart int64
}

func (w Workload) layout() layout {
	l := layout{size: w.scaled(w.ImageSize), bootSet: w.scaled(w.BootSet), hot: w.scaled(w.HotRegion)}
	l.hotStart = l.bootSet
	l.growStart = l.hotStart + l.hot
	return l
}

// ops generates target i's (of n) operations in time order.
func (w Workload) ops(i, n int, seed uint64) []op {
	r := rand.New(rand.NewPCG(seed, uint64(i)))
	l := w.layout()
	S := time.Duration(w.Scale)
	start := time.Duration(0)
	if n > 1 {
		start = w.BootWindow * time.Duration(i) / time.Duration(n)
	}
	start /= S
	bootDur := w.BootDuration / S
	end := (w.BootWindow + w.SteadyDuration) / S

	var out []op
	// Boot reads, evenly spaced.
	reads := max(1, w.BootReads/w.Scale)
	for k := range reads {
		sz := pick(r, w.BootReadMix)
		out = append(out, op{at: start + bootDur*time.Duration(k)/time.Duration(reads), off: randIn(r, 0, l.bootSet, sz), n: int32(sz)})
	}
	// Boot writes: as many as the byte volume needs, at random times.
	writes := max(1, int(float64(w.BootWriteBytes)/float64(w.Scale)/mean(w.BootWriteMix)))
	for range writes {
		sz := pick(r, w.BootWriteMix)
		out = append(out, op{at: start + time.Duration(r.Int64N(int64(bootDur))), off: randIn(r, l.hotStart, l.hot, sz), n: int32(sz), write: true})
	}
	// Steady state at SteadyIOPS (the rate is full scale; the count
	// scales with the duration).
	grow := l.growStart
	steady := start + bootDur
	count := int(w.SteadyIOPS * (end - steady).Seconds())
	var written []int64
	for k := range count {
		at := steady + (end-steady)*time.Duration(k)/time.Duration(max(count, 1))
		if r.Float64() < w.SteadyWrites {
			sz := pick(r, w.SteadyWriteMix)
			var off int64
			if r.Float64() < w.HotFraction || grow+sz > l.size {
				off = randIn(r, l.hotStart, l.hot, sz)
				if len(written) < 1<<16 {
					written = append(written, off)
				}
			} else {
				off, grow = grow, grow+sz
			}
			out = append(out, op{at: at, off: off, n: int32(sz), write: true})
			continue
		}
		if len(written) > 0 && r.IntN(2) == 0 {
			out = append(out, op{at: at, off: written[r.IntN(len(written))], n: int32(4 * kib)})
		} else {
			out = append(out, op{at: at, off: randIn(r, 0, l.bootSet, 4*kib), n: int32(4 * kib)})
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].at < out[b].at })
	return out
}
