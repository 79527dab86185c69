package blockbench

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/usher-vdi/usher/internal/block/nbd"
)

// pageSize is the unit in which the VMs track what they wrote: every
// operation of the workload is aligned to it and a multiple of it.
const pageSize = 4 * kib

// Pattern is an image's content, known to every VM without reading it:
// below End, each 8-byte little-endian word is a hash of Seed and the
// word's index; from End on, zeros (a sparse tail).
type Pattern struct {
	Seed uint64 `json:"seed"`
	End  int64  `json:"end"`
}

// mix64 is SplitMix64's output function: a bijection that scatters
// consecutive inputs.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// word is the image's word at byte offset off (a multiple of 8).
func (p Pattern) word(off int64) uint64 {
	if off >= p.End {
		return 0
	}
	return mix64(p.Seed + uint64(off/8))
}

// Fill writes the image's bytes at off (a multiple of 8) into b (a
// multiple of 8 long).
func (p Pattern) Fill(b []byte, off int64) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], p.word(off+int64(i)))
	}
}

// pageSeed names what a VM wrote into one page at one generation.
func pageSeed(vm int, gen uint32, page int64) uint64 {
	return mix64(uint64(vm+1)<<40 ^ uint64(gen)<<8 ^ mix64(uint64(page)))
}

// fillWritten writes the bytes VM vm writes into page at generation gen.
func fillWritten(b []byte, vm int, gen uint32, page int64) {
	s := pageSeed(vm, gen, page)
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], mix64(s+uint64(i/8)))
	}
}

// VMRun is what the VM load generator (usher bench hostcache-vms, a
// process of its own) is asked to do: connect every VM, boot them all
// at once when told, wait, then run their steady state when told.
type VMRun struct {
	VMs []VM `json:"vms"`
	// Workload is each VM's, in the form Workload.ops takes it: boots
	// start together (one VM of one).
	Workload Workload `json:"workload"`
	Seed     uint64   `json:"seed"`
	// BootDepth is each VM's requests in flight at boot, which runs as
	// fast as they are served; SteadyDepth its most in flight in the
	// steady state, whose operations start on the workload's schedule.
	BootDepth   int     `json:"boot_depth"`
	SteadyDepth int     `json:"steady_depth"`
	Image       Pattern `json:"image"`
	// BlockSize is the unit of the distinct blocks each host's VMs read
	// from their image (the host cache's block).
	BlockSize int64         `json:"block_size"`
	OpTimeout time.Duration `json:"op_timeout"`
}

// VM is one VM: its NBD export, its host, and the index that seeds its
// operations and the data it writes.
type VM struct {
	Name  string `json:"name"`
	Host  int    `json:"host"`
	Index int    `json:"index"`
	URI   string `json:"uri"`
}

// VMStage is what the VMs did in one stage (boot or steady), all
// together.
type VMStage struct {
	Seconds    float64 `json:"seconds"`
	Reads      int64   `json:"reads"`
	Writes     int64   `json:"writes"`
	ReadBytes  int64   `json:"read_bytes"`
	WriteBytes int64   `json:"write_bytes"`
	// Errors are operations that failed; Mismatches reads whose bytes
	// were not what the image, or the VM's own earlier write, holds
	// (every read is checked, byte for byte).
	Errors     int64  `json:"errors"`
	Mismatches int64  `json:"mismatches"`
	FirstError string `json:"first_error,omitempty"`
	// Read latency (µs resolution); for the steady state, the latency
	// counts from each operation's scheduled start (open model), and
	// LateP99 is how late operations started.
	ReadP50 time.Duration `json:"read_p50_ns"`
	ReadP99 time.Duration `json:"read_p99_ns"`
	ReadMax time.Duration `json:"read_max_ns"`
	LateP99 time.Duration `json:"late_p99_ns,omitempty"`
}

// VMHost is what one host's VMs read from their image: distinct blocks
// (of VMRun.BlockSize) holding a page that a read took from below the
// VM's own writes.
type VMHost struct {
	Host       int   `json:"host"`
	VMs        int   `json:"vms"`
	BootBlocks int64 `json:"boot_distinct_blocks"`
	Blocks     int64 `json:"distinct_blocks"`
}

// VMResult is what the generator reports at the end.
type VMResult struct {
	Boot   VMStage  `json:"boot"`
	Steady VMStage  `json:"steady"`
	Hosts  []VMHost `json:"hosts"`
	// BootMean and BootMax are the VMs' boot times, from the storm's
	// start to each VM's last boot operation.
	BootMean time.Duration `json:"boot_mean_ns"`
	BootMax  time.Duration `json:"boot_max_ns"`
}

// vmEvent is a line the generator writes on its output.
type vmEvent struct {
	Event  string    `json:"event"` // connected, booted, done
	Result *VMResult `json:"result,omitempty"`
	Error  string    `json:"error,omitempty"`
}

// bitset is a set of block numbers, safe for concurrent adds.
type bitset []atomic.Uint64

func newBitset(n int64) bitset { return make(bitset, (n+63)/64) }

func (b bitset) add(i int64) { b[i/64].Or(1 << (i % 64)) }

func (b bitset) count() int64 {
	var n int64
	for i := range b {
		v := b[i].Load()
		for ; v != 0; v &= v - 1 {
			n++
		}
	}
	return n
}

// stageStats gathers one stage's counts, safe for concurrent use.
type stageStats struct {
	reads, writes, readBytes, writeBytes, errors, mismatches atomic.Int64

	mu       sync.Mutex
	first    string
	lat      *hdrhistogram.Histogram // reads, µs
	late     *hdrhistogram.Histogram // steady: start delay, µs
	hasLates bool
}

func newStageStats() *stageStats {
	return &stageStats{lat: hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3),
		late: hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)}
}

func recordUS(h *hdrhistogram.Histogram, d time.Duration) {
	h.RecordValue(min(max(d.Microseconds(), 1), int64(time.Hour/time.Microsecond)))
}

func (s *stageStats) fail(err error) {
	s.errors.Add(1)
	s.note(err)
}

// note keeps the first error or mismatch.
func (s *stageStats) note(err error) {
	s.mu.Lock()
	if s.first == "" {
		s.first = err.Error()
	}
	s.mu.Unlock()
}

func (s *stageStats) stage(d time.Duration) VMStage {
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	st := VMStage{Seconds: d.Seconds(), Reads: s.reads.Load(), Writes: s.writes.Load(), ReadBytes: s.readBytes.Load(),
		WriteBytes: s.writeBytes.Load(), Errors: s.errors.Load(), Mismatches: s.mismatches.Load(), FirstError: s.first}
	if s.lat.TotalCount() > 0 {
		st.ReadP50, st.ReadP99, st.ReadMax = us(s.lat.ValueAtQuantile(50)), us(s.lat.ValueAtQuantile(99)), us(s.lat.Max())
	}
	if s.hasLates {
		st.LateP99 = us(s.late.ValueAtQuantile(99))
	}
	return st
}

// inflight is an operation a VM has issued and not seen answered.
type inflight struct {
	write bool
	done  chan struct{}
}

// vmState is one VM during a run.
type vmState struct {
	vm  VM
	dev *nbd.Client
	ops []op

	mu      sync.Mutex
	gen     map[int64]uint32      // page -> generation of the VM's last write to it
	pending map[int64][]*inflight // page -> operations on it in flight
	nextGen uint32

	bootEnd time.Time
}

// claim registers o as in flight once no conflicting operation is (a
// read waits for writes to its pages, a write for anything on its
// pages), so that each read has one right answer. It is called in the
// VM's program order. For a read it returns the generation of each
// page (0: the image's) and marks the blocks read from below in sets;
// for a write, the generation it writes.
func (s *vmState) claim(o op, blockSize int64, sets ...bitset) (*inflight, []uint32) {
	first, last := o.off/pageSize, (o.off+int64(o.n)-1)/pageSize
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		var wait chan struct{}
	scan:
		for p := first; p <= last; p++ {
			for _, f := range s.pending[p] {
				if o.write || f.write {
					wait = f.done
					break scan
				}
			}
		}
		if wait == nil {
			break
		}
		s.mu.Unlock()
		<-wait
		s.mu.Lock()
	}
	f := &inflight{write: o.write, done: make(chan struct{})}
	for p := first; p <= last; p++ {
		s.pending[p] = append(s.pending[p], f)
	}
	if o.write {
		s.nextGen++
		for p := first; p <= last; p++ {
			s.gen[p] = s.nextGen
		}
		return f, []uint32{s.nextGen}
	}
	gens := make([]uint32, last-first+1)
	for p := first; p <= last; p++ {
		g := s.gen[p]
		gens[p-first] = g
		if g == 0 {
			for _, set := range sets {
				set.add(p * pageSize / blockSize)
			}
		}
	}
	return f, gens
}

// release ends f's claim on its pages.
func (s *vmState) release(f *inflight, o op) {
	first, last := o.off/pageSize, (o.off+int64(o.n)-1)/pageSize
	s.mu.Lock()
	for p := first; p <= last; p++ {
		l := s.pending[p]
		for i, g := range l {
			if g == f {
				l[i] = l[len(l)-1]
				l = l[:len(l)-1]
				break
			}
		}
		if len(l) == 0 {
			delete(s.pending, p)
		} else {
			s.pending[p] = l
		}
	}
	s.mu.Unlock()
	close(f.done)
}

var pageBufs = sync.Pool{New: func() any { b := make([]byte, 64*kib); return &b }}

// do runs one operation and checks a read's bytes.
func (r *vmRunner) do(ctx context.Context, s *vmState, o op, gens []uint32, st *stageStats, sched time.Time) {
	bp := pageBufs.Get().(*[]byte)
	defer pageBufs.Put(bp)
	if int(o.n) > len(*bp) {
		*bp = make([]byte, o.n)
	}
	b := (*bp)[:o.n]
	ctx, cancel := context.WithTimeout(ctx, r.spec.OpTimeout)
	defer cancel()
	if o.write {
		first := o.off / pageSize
		for i := int64(0); i < int64(o.n); i += pageSize {
			fillWritten(b[i:i+pageSize], s.vm.Index, gens[0], first+i/pageSize)
		}
		if err := s.dev.WriteAt(ctx, b, o.off, 0); err != nil {
			st.fail(fmt.Errorf("%s: write %d+%d: %w", s.vm.Name, o.off, o.n, err))
			return
		}
		st.writes.Add(1)
		st.writeBytes.Add(int64(o.n))
		return
	}
	start := time.Now()
	err := s.dev.ReadAt(ctx, b, o.off)
	d := time.Since(start)
	if !sched.IsZero() {
		d = time.Since(sched)
	}
	if err != nil {
		st.fail(fmt.Errorf("%s: read %d+%d: %w", s.vm.Name, o.off, o.n, err))
		return
	}
	st.reads.Add(1)
	st.readBytes.Add(int64(o.n))
	st.mu.Lock()
	recordUS(st.lat, d)
	st.mu.Unlock()
	first := o.off / pageSize
	for i, g := range gens {
		pg := b[int64(i)*pageSize : int64(i+1)*pageSize]
		if ok := checkPage(pg, r.spec.Image, s.vm.Index, g, first+int64(i)); !ok {
			st.mismatches.Add(1)
			src := "the image"
			if g != 0 {
				src = fmt.Sprintf("the VM's write #%d", g)
			}
			st.note(fmt.Errorf("%s: read %d+%d: page at %d is not %s", s.vm.Name, o.off, o.n, (first+int64(i))*pageSize, src))
			return
		}
	}
}

// checkPage reports whether pg holds what page holds: the image's
// bytes (gen 0) or the VM's write of generation gen.
func checkPage(pg []byte, img Pattern, vm int, gen uint32, page int64) bool {
	if gen == 0 {
		off := page * pageSize
		for i := 0; i+8 <= len(pg); i += 8 {
			if binary.LittleEndian.Uint64(pg[i:]) != img.word(off+int64(i)) {
				return false
			}
		}
		return true
	}
	s := pageSeed(vm, gen, page)
	for i := 0; i+8 <= len(pg); i += 8 {
		if binary.LittleEndian.Uint64(pg[i:]) != mix64(s+uint64(i/8)) {
			return false
		}
	}
	return true
}

// vmRunner runs the VMs of a VMRun.
type vmRunner struct {
	spec VMRun
	vms  []*vmState
	// per host: distinct blocks read from below at boot, and over the run
	boot, all map[int]bitset
}

// RunVMs is the VM load generator: it connects every VM of run, writes
// {"event":"connected"} on out and waits for a line on in; boots them
// all at once, each as fast as its BootDepth goes, writes
// {"event":"booted"} and waits for another line; runs the steady state
// on the workload's schedule; and writes {"event":"done","result":...}.
// Failed operations and wrong bytes are counted in the result, not
// returned; an error is returned when a VM cannot connect or in ends.
func RunVMs(ctx context.Context, run VMRun, in io.Reader, out io.Writer) error {
	if len(run.VMs) == 0 {
		return errors.New("no VMs")
	}
	run.BootDepth = max(run.BootDepth, 1)
	run.SteadyDepth = max(run.SteadyDepth, 1)
	if run.BlockSize <= 0 {
		run.BlockSize = 64 * kib
	}
	if run.OpTimeout <= 0 {
		run.OpTimeout = time.Minute
	}
	enc := json.NewEncoder(out)
	lines := bufio.NewScanner(in)
	await := func(what string) error {
		if !lines.Scan() {
			return fmt.Errorf("input ended before %s", what)
		}
		return nil
	}
	r := &vmRunner{spec: run, boot: map[int]bitset{}, all: map[int]bitset{}}
	size := run.Workload.layout().size
	blocks := (size + run.BlockSize - 1) / run.BlockSize
	for _, v := range run.VMs {
		if r.boot[v.Host] == nil {
			r.boot[v.Host], r.all[v.Host] = newBitset(blocks), newBitset(blocks)
		}
		r.vms = append(r.vms, &vmState{vm: v, ops: run.Workload.ops(v.Index, 1, run.Seed), gen: map[int64]uint32{}, pending: map[int64][]*inflight{}})
	}
	defer func() {
		for _, s := range r.vms {
			if s.dev != nil {
				s.dev.Close()
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make([]error, len(r.vms))
	for i, s := range r.vms {
		wg.Go(func() {
			dctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			c, err := dialVM(dctx, s.vm.URI)
			if err == nil && c.Size() < size {
				c.Close()
				err = fmt.Errorf("the export has %d bytes, the workload needs %d", c.Size(), size)
			}
			if err != nil {
				errs[i] = fmt.Errorf("VM %s (%s): %w", s.vm.Name, s.vm.URI, err)
				return
			}
			s.dev = c
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := enc.Encode(vmEvent{Event: "connected"}); err != nil {
		return err
	}
	if err := await("the boot"); err != nil {
		return err
	}

	// The storm: every VM boots at once.
	bootDur := run.Workload.BootDuration / time.Duration(run.Workload.Scale)
	boot := newStageStats()
	start := time.Now()
	for _, s := range r.vms {
		wg.Go(func() {
			r.runBoot(ctx, s, bootDur, boot)
			s.bootEnd = time.Now()
		})
	}
	wg.Wait()
	res := &VMResult{Boot: boot.stage(time.Since(start))}
	var sum time.Duration
	for _, s := range r.vms {
		d := s.bootEnd.Sub(start)
		sum += d
		res.BootMax = max(res.BootMax, d)
	}
	res.BootMean = sum / time.Duration(len(r.vms))
	if err := enc.Encode(vmEvent{Event: "booted"}); err != nil {
		return err
	}
	if err := await("the steady state"); err != nil {
		return err
	}

	steady := newStageStats()
	start = time.Now()
	for _, s := range r.vms {
		wg.Go(func() { r.runSteady(ctx, s, bootDur, start, steady) })
	}
	wg.Wait()
	res.Steady = steady.stage(time.Since(start))
	counts := map[int]int{}
	for _, v := range run.VMs {
		counts[v.Host]++
	}
	for _, h := range slices.Sorted(maps.Keys(r.boot)) {
		res.Hosts = append(res.Hosts, VMHost{Host: h, VMs: counts[h], BootBlocks: r.boot[h].count(), Blocks: r.all[h].count()})
	}
	return enc.Encode(vmEvent{Event: "done", Result: res})
}

// dialVM connects a VM, again while its export is busy: a server may
// not yet have seen the VM's last connection go when it boots again.
func dialVM(ctx context.Context, uri string) (*nbd.Client, error) {
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		c, err := nbd.DialURI(ctx, uri)
		if !errors.Is(err, nbd.ErrExportBusy) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
	}
}

// runBoot issues a VM's boot operations in order, BootDepth at a time,
// as fast as they are answered.
func (r *vmRunner) runBoot(ctx context.Context, s *vmState, bootDur time.Duration, st *stageStats) {
	sem := make(chan struct{}, r.spec.BootDepth)
	var wg sync.WaitGroup
	for _, o := range s.ops {
		if o.at >= bootDur {
			break
		}
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		f, gens := s.claim(o, r.spec.BlockSize, r.boot[s.vm.Host], r.all[s.vm.Host])
		wg.Go(func() {
			r.do(ctx, s, o, gens, st, time.Time{})
			s.release(f, o)
			<-sem
		})
	}
	wg.Wait()
}

// runSteady issues a VM's steady operations at their times on the
// workload's clock from start (an open model: an operation that cannot
// start on time starts late, and its latency counts from its time).
func (r *vmRunner) runSteady(ctx context.Context, s *vmState, bootDur time.Duration, start time.Time, st *stageStats) {
	sem := make(chan struct{}, r.spec.SteadyDepth)
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for _, o := range s.ops {
		if o.at < bootDur {
			continue
		}
		sched := start.Add(o.at - bootDur)
		if d := time.Until(sched); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		}
		select {
		case <-ctx.Done():
			return
		case sem <- struct{}{}:
		}
		f, gens := s.claim(o, r.spec.BlockSize, r.all[s.vm.Host])
		st.mu.Lock()
		recordUS(st.late, time.Since(sched))
		st.hasLates = true
		st.mu.Unlock()
		wg.Go(func() {
			r.do(ctx, s, o, gens, st, sched)
			s.release(f, o)
			<-sem
		})
	}
}
