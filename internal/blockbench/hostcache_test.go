package blockbench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/loadgen"
)

func TestHostcacheBenchPattern(t *testing.T) {
	p := Pattern{Seed: 3, End: 3 * pageSize}
	b := make([]byte, 4*pageSize)
	p.Fill(b, 0)
	for _, pg := range []int64{0, 1, 2, 3} {
		if !checkPage(b[pg*pageSize:(pg+1)*pageSize], p, 0, 0, pg) {
			t.Errorf("page %d does not check against the image", pg)
		}
	}
	if !block.IsZero(b[3*pageSize:]) || block.IsZero(b[2*pageSize:3*pageSize]) {
		t.Error("the image is not the pattern below End and zeros from it")
	}
	// Fill at an offset is the same bytes.
	c := make([]byte, 64)
	p.Fill(c, 8)
	if string(c) != string(b[8:72]) {
		t.Error("Fill at an offset differs")
	}
	b[pageSize+17] ^= 1
	if checkPage(b[pageSize:2*pageSize], p, 0, 0, 1) {
		t.Error("a flipped bit was not seen")
	}
	w := make([]byte, pageSize)
	fillWritten(w, 5, 7, 9)
	if !checkPage(w, p, 5, 7, 9) {
		t.Error("a written page does not check")
	}
	for _, other := range [][3]int{{4, 7, 9}, {5, 6, 9}, {5, 7, 8}} {
		if checkPage(w, p, other[0], uint32(other[1]), int64(other[2])) {
			t.Errorf("VM 5's write #7 of page 9 passes as %v", other)
		}
	}
	if checkPage(w, p, 0, 0, 9) {
		t.Error("a written page passes as the image's")
	}
}

func TestHostcacheBenchParseMetrics(t *testing.T) {
	text := `# HELP usher_block_ops_total Block operations by layer and operation.
# TYPE usher_block_ops_total counter
usher_block_ops_total{layer="image",op="read"} 1.2345e+06
usher_block_ops_total{layer="writecache_disk",op="write"} 17
usher_block_bytes_total{layer="hostcache_upstream",op="read"} 65536
usher_nbd_connections 3
usher_hostcache_reads_total{image="desktop",result="hit",vm="a"} 5
`
	m := blockMetrics{ops: map[[2]string]int64{}, bytes: map[[2]string]int64{}}
	if err := parseBlockMetrics(strings.NewReader(text), &m); err != nil {
		t.Fatal(err)
	}
	if got := m.op("image", "read"); got != 1234500 {
		t.Errorf("image reads %d", got)
	}
	if got := m.op("writecache_disk", "write"); got != 17 {
		t.Errorf("write-cache writes %d", got)
	}
	if got := m.bytesOf("hostcache_upstream", "read"); got != 65536 {
		t.Errorf("upstream bytes %d", got)
	}
	if m.conns != 3 || m.op("image", "write") != 0 {
		t.Errorf("connections %d, image writes %d", m.conns, m.op("image", "write"))
	}
	if err := parseBlockMetrics(strings.NewReader(`usher_block_ops_total{layer="x",op="read"} many`), &m); err == nil {
		t.Error("a value that is not a number was taken")
	}
}

// TestHostcacheBenchClaim: a read waits for a write in flight on its
// pages and then expects the write's bytes; reads do not wait for reads.
func TestHostcacheBenchClaim(t *testing.T) {
	s := &vmState{gen: map[int64]uint32{}, pending: map[int64][]*inflight{}}
	set := newBitset(16)
	w := op{off: pageSize, n: int32(2 * pageSize), write: true}
	fw, g := s.claim(w, 4*pageSize, set)
	if len(g) != 1 || g[0] != 1 {
		t.Fatalf("a write's generation: %v", g)
	}
	r1 := op{off: 0, n: int32(pageSize)}
	f1, gens := s.claim(r1, 4*pageSize, set) // no overlap: at once
	if len(gens) != 1 || gens[0] != 0 {
		t.Fatalf("gens %v", gens)
	}
	got := make(chan []uint32)
	go func() {
		f, gens := s.claim(op{off: 0, n: int32(4 * pageSize)}, 4*pageSize, set)
		s.release(f, op{off: 0, n: int32(4 * pageSize)})
		got <- gens
	}()
	select {
	case g := <-got:
		t.Fatalf("a read over a write in flight went ahead: %v", g)
	case <-time.After(50 * time.Millisecond):
	}
	s.release(fw, w)
	if g := <-got; fmt.Sprint(g) != "[0 1 1 0]" {
		t.Errorf("the read expects generations %v; want [0 1 1 0]", g)
	}
	s.release(f1, r1)
	if len(s.pending) != 0 {
		t.Errorf("pending after every release: %v", s.pending)
	}
	// Pages 0 and 3 were read from below: block 0 only (4 pages a block).
	if n := set.count(); n != 1 {
		t.Errorf("%d distinct blocks; want 1", n)
	}
}

// serveVMs serves each VM a memory device holding the pattern, as the
// VM's own copy of the image, on loopback.
func serveVMs(t *testing.T, vms []VM, size int64, p Pattern, corrupt int64) (addr string) {
	t.Helper()
	devs := nbd.Devices{}
	img := make([]byte, size)
	p.Fill(img, 0)
	for i, v := range vms {
		m := block.NewMemory(size)
		if err := m.WriteAt(context.Background(), img, 0, 0); err != nil {
			t.Fatal(err)
		}
		if i == 0 && corrupt >= 0 {
			m.WriteAt(context.Background(), []byte{^img[corrupt]}, corrupt, 0)
		}
		devs[v.Name] = m
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &nbd.Server{Exports: devs}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// driveVMs runs RunVMs as the bench does: a line to boot, a line for
// the steady state.
func driveVMs(t *testing.T, run VMRun) VMResult {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := RunVMs(context.Background(), run, inR, outW)
		outW.CloseWithError(err)
		errc <- err
	}()
	dec := json.NewDecoder(bufio.NewReader(outR))
	var res VMResult
	for _, want := range []string{"connected", "booted", "done"} {
		var ev vmEvent
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("waiting for %s: %v", want, err)
		}
		if ev.Event != want {
			t.Fatalf("event %q; want %q", ev.Event, want)
		}
		if ev.Result != nil {
			res = *ev.Result
		}
		if want != "done" {
			io.WriteString(inW, "go\n")
		}
	}
	inW.Close()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return res
}

// TestHostcacheBenchVMs: the generator replays each VM's operations,
// checks every read, and counts what each host's VMs read from below
// their own writes.
func TestHostcacheBenchVMs(t *testing.T) {
	w := HostcacheWorkload(256, 300*time.Millisecond)
	l := w.layout()
	p := Pattern{Seed: 11, End: l.growStart}
	vms := []VM{{Name: "a", Host: 0, Index: 0}, {Name: "b", Host: 0, Index: 1}, {Name: "c", Host: 1, Index: 2}}
	for _, corrupt := range []int64{-1, 4096 + 24} {
		t.Run(fmt.Sprintf("corrupt=%d", corrupt), func(t *testing.T) {
			addr := serveVMs(t, vms, l.size, p, corrupt)
			run := VMRun{Workload: w, Seed: 1, BootDepth: 4, SteadyDepth: 2, Image: p, BlockSize: 64 * kib}
			for _, v := range vms {
				v.URI = "nbd://" + addr + "/" + v.Name
				run.VMs = append(run.VMs, v)
			}
			res := driveVMs(t, run)
			var reads, writes int64
			want := map[int]map[int64]bool{}
			for _, v := range vms {
				written := map[int64]bool{}
				if want[v.Host] == nil {
					want[v.Host] = map[int64]bool{}
				}
				for _, o := range w.ops(v.Index, 1, 1) {
					if o.write {
						writes++
						for pg := o.off / pageSize; pg < (o.off+int64(o.n))/pageSize; pg++ {
							written[pg] = true
						}
						continue
					}
					reads++
					if o.at < w.BootDuration/time.Duration(w.Scale) {
						for pg := o.off / pageSize; pg < (o.off+int64(o.n))/pageSize; pg++ {
							if !written[pg] {
								want[v.Host][pg*pageSize/(64*kib)] = true
							}
						}
					}
				}
			}
			if got := res.Boot.Reads + res.Steady.Reads; got != reads {
				t.Errorf("reads %d; want %d", got, reads)
			}
			if got := res.Boot.Writes + res.Steady.Writes; got != writes {
				t.Errorf("writes %d; want %d", got, writes)
			}
			if res.Boot.Errors+res.Steady.Errors != 0 {
				t.Errorf("errors: %s", res.Boot.FirstError+res.Steady.FirstError)
			}
			if len(res.Hosts) != 2 || res.Hosts[0].VMs != 2 || res.Hosts[1].VMs != 1 {
				t.Fatalf("hosts %+v", res.Hosts)
			}
			for _, h := range res.Hosts {
				if got := h.BootBlocks; got != int64(len(want[h.Host])) {
					t.Errorf("host %d: %d distinct blocks at boot; want %d", h.Host, got, len(want[h.Host]))
				}
				if h.Blocks < h.BootBlocks {
					t.Errorf("host %d: %d blocks in all, fewer than at boot (%d)", h.Host, h.Blocks, h.BootBlocks)
				}
			}
			mismatches := res.Boot.Mismatches + res.Steady.Mismatches
			switch {
			case corrupt < 0 && mismatches != 0:
				t.Errorf("%d wrong reads of a right image: %s", mismatches, res.Boot.FirstError+res.Steady.FirstError)
			case corrupt >= 0 && mismatches == 0:
				t.Error("a corrupt byte in the boot set was never seen")
			}
			if res.BootMax <= 0 || res.BootMean > res.BootMax || res.Steady.LateP99 <= 0 {
				t.Errorf("boot mean %v max %v, late p99 %v", res.BootMean, res.BootMax, res.Steady.LateP99)
			}
		})
	}
}

func TestHostcacheBenchFigures(t *testing.T) {
	pass := func(name string, total, maxIOPS int64) HostcachePass {
		return HostcachePass{Name: name, Total: CentralIO{Reads: total, MaxTotal: float64(maxIOPS)}}
	}
	b := &hcBench{res: &HostcacheResult{Passes: []HostcachePass{pass("baseline", 100000, 20000), pass("persist", 99, 20)}}}
	cold := pass("cold", 5000, 5000)
	cold.Upstream = []HostUpstream{{Host: 0, BootReads: 1000, BootBlocks: 1000}, {Host: 1, BootReads: 1051, BootBlocks: 1000}}
	b.res.Passes = append(b.res.Passes, cold)
	b.res.Reads = &NBDTest{UsherIOPS: 100, NbdkitIOPS: 90, CeilingIOPS: 1000, Verdict: "1.11", Ratio: 100.0 / 90}
	var statuses []string
	for _, f := range b.figures() {
		statuses = append(statuses, f.Status)
	}
	// persist total (99.9% exactly: 99 of 100,000 is 99.901%), persist
	// max (20 of 20,000: 99.9%), storm (host 1: 1.051), reads, errors.
	if fmt.Sprint(statuses) != "[met met missed met met]" {
		t.Errorf("statuses %v", statuses)
	}
	b.res.Reads.Verdict, b.res.Reads.Ratio = "client-bound (ceiling < 1.5×)", 0
	if f := b.figures()[3]; f.Status != "client-bound" || f.Missed() {
		t.Errorf("a client-bound comparison: %+v", f)
	}
	// usher at the ceiling, nbdkit well below it: usher's rate is a
	// lower bound above nbdkit's.
	b.res.Reads.UsherIOPS, b.res.Reads.CeilingIOPS = 950, 1000
	if f := b.figures()[3]; !strings.HasPrefix(f.Status, "met (usher at the client's ceiling") || f.Missed() {
		t.Errorf("usher at the ceiling above nbdkit: %+v", f)
	}
	b.res.Reads.NbdkitIOPS = 960
	if f := b.figures()[3]; f.Status != "client-bound" {
		t.Errorf("both at the ceiling: %+v", f)
	}
}

func TestHostcacheBenchFormat(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 5.25: "5.2", 99.94: "99.9", 100: "100", 1234567: "1,234,567"} {
		if got := iops(v); got != want {
			t.Errorf("iops(%v) = %q; want %q", v, got, want)
		}
	}
	tb := plain(loadgen.Table{Rows: [][]string{{"1,234", "a, b", "12.5", "99.933% fewer"}}})
	if got := fmt.Sprint(tb.Rows[0]); got != "[1234 a, b 12.5 99.933% fewer]" {
		t.Errorf("plain: %s", got)
	}
}
