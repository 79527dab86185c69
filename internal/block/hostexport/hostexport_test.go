package hostexport_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/digest"
	"github.com/usher-vdi/usher/internal/block/hostcache"
	"github.com/usher-vdi/usher/internal/block/hostexport"
	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/block/imageexport"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/nbd"
)

const imageSize = 32*digest.BlockSize + 4096 // a short last block

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// content is an image of random blocks, two of them zero.
func content(seed uint64) []byte {
	p := make([]byte, imageSize)
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	clear(p[3*digest.BlockSize : 5*digest.BlockSize])
	return p
}

// stream is usher's stream over a store, on a loopback port it can be
// stopped and started on again.
type stream struct {
	t     *testing.T
	store *image.Store
	addr  string
	reg   meter.Registry
	wc    string
	srv   *nbd.Server
	exp   *imageexport.Images
}

func newStream(t *testing.T, images map[string][]byte) *stream {
	t.Helper()
	dir := t.TempDir()
	st, err := image.Create(filepath.Join(dir, "store"))
	must(t, err)
	for name, p := range images {
		src := filepath.Join(dir, name+".raw")
		must(t, os.WriteFile(src, p, 0o600))
		_, err := st.Import(context.Background(), name, src)
		must(t, err)
	}
	s := &stream{t: t, store: st, wc: filepath.Join(dir, "wc")}
	must(t, os.Mkdir(s.wc, 0o700))
	s.start("127.0.0.1:0")
	t.Cleanup(s.stop)
	return s
}

func (s *stream) start(addr string) {
	var ln net.Listener
	var err error
	for range 100 { // the port of a stopped stream may linger a moment
		if ln, err = nbd.Listen(addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	must(s.t, err)
	s.addr = ln.Addr().String()
	s.exp = &imageexport.Images{Store: s.store, WriteCacheDir: s.wc, Meters: &s.reg}
	s.srv = &nbd.Server{Exports: s.exp, Logger: slog.New(slog.DiscardHandler)}
	go s.srv.Serve(ln)
}

func (s *stream) stop() {
	if s.srv != nil {
		s.srv.Close()
		s.exp.Close()
		s.srv = nil
	}
}

// reads counts the reads of the store's files.
func (s *stream) reads() int64 { return s.reg.Snapshot()[imageexport.LayerImage].Reads }

// host is a host cache in front of a stream, served on loopback.
type host struct {
	t    *testing.T
	x    *hostexport.Exports
	c    *hostcache.Cache
	up   meter.Registry
	srv  *nbd.Server
	addr string
}

func newHost(t *testing.T, s *stream, writes string, vms map[string]string) *host {
	t.Helper()
	c, err := hostcache.Open(t.TempDir(), hostcache.Options{Size: 16 << 20})
	must(t, err)
	h := &host{t: t, c: c}
	addr := s.addr // a stream started again takes the same address
	x, err := hostexport.New(hostexport.Config{
		Dial: func(ctx context.Context, exp string) (*nbd.Client, error) {
			return nbd.Dial(ctx, "tcp", addr, exp)
		},
		Cache: c, VMs: vms, Writes: writes, WritesDir: t.TempDir(), Resolve: time.Nanosecond,
		Upstream: hostcache.UpstreamOptions{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
		Meters:   &h.up,
	})
	must(t, err)
	must(t, x.Prepare(context.Background()))
	h.x = x
	ln, err := nbd.Listen("127.0.0.1:0")
	must(t, err)
	h.addr = ln.Addr().String()
	h.srv = &nbd.Server{Exports: x, Logger: slog.New(slog.DiscardHandler)}
	go h.srv.Serve(ln)
	t.Cleanup(func() { h.srv.Close(); x.Close(); c.Close() })
	return h
}

func (h *host) upstreamReads() int64 { return h.up.Snapshot()[hostexport.LayerUpstream].Reads }

func (h *host) boot(name string) *nbd.Client {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := nbd.Dial(ctx, "tcp", h.addr, name)
	must(h.t, err)
	h.t.Cleanup(func() { c.Close() })
	return c
}

func readAll(t testing.TB, d block.Device) []byte {
	t.Helper()
	p := make([]byte, d.Size())
	must(t, d.ReadAt(context.Background(), p, 0))
	return p
}

// nonZero counts an image's distinct non-zero blocks.
func nonZero(p ...[]byte) int {
	seen := map[digest.Sum]bool{}
	for _, img := range p {
		for off := 0; off < len(img); off += digest.BlockSize {
			b := img[off:min(len(img), off+digest.BlockSize)]
			if !block.IsZero(b) {
				seen[digest.Of(b)] = true
			}
		}
	}
	return len(seen)
}

// TestBootStorm: many VMs of a host read the whole image at once; each
// distinct block is read from the stream once.
func TestBootStorm(t *testing.T) {
	img := content(1)
	s := newStream(t, map[string][]byte{"golden": img})
	vms := map[string]string{}
	for i := range 16 {
		vms[fmt.Sprintf("vm%d", i)] = "golden"
	}
	h := newHost(t, s, hostexport.WritesLocal, vms)
	var wg sync.WaitGroup
	errs := make(chan error, len(vms))
	for name := range vms {
		c := h.boot(name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each VM reads in its own order, in 4 KiB to 64 KiB reads.
			r := rand.New(rand.NewPCG(uint64(len(name)), uint64(name[len(name)-1])))
			for _, off := range r.Perm(imageSize / 4096) {
				p := make([]byte, 4096)
				if err := c.ReadAt(context.Background(), p, int64(off)*4096); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(p, img[off*4096:off*4096+4096]) {
					errs <- fmt.Errorf("%s: wrong bytes at %d", name, off*4096)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := int64(nonZero(img))
	if got := h.upstreamReads(); got != want {
		t.Fatalf("16 VMs booting at once: %d reads of the stream for %d distinct blocks", got, want)
	}
	// Central storage saw each distinct block once, too.
	if got := s.reads(); got != want {
		t.Fatalf("16 VMs booting at once: %d reads of the image store for %d distinct blocks", got, want)
	}
}

// TestLocalWritesVanishAtBoot: a VM reads its writes back; at its next
// boot they are gone; another VM never sees them; a second connection
// of a VM is refused.
func TestLocalWritesVanishAtBoot(t *testing.T) {
	img := content(2)
	s := newStream(t, map[string][]byte{"golden": img})
	h := newHost(t, s, hostexport.WritesLocal, map[string]string{"a": "golden", "b": "golden"})
	a := h.boot("a")
	w := bytes.Repeat([]byte{0x5a}, 6000)
	must(t, a.WriteAt(context.Background(), w, 70000, 0))
	got := readAll(t, a)
	if !bytes.Equal(got[70000:76000], w) || !bytes.Equal(got[:70000], img[:70000]) {
		t.Fatal("a VM does not read its write back")
	}
	if !bytes.Equal(readAll(t, h.boot("b")), img) {
		t.Fatal("another VM sees a VM's write")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := nbd.Dial(ctx, "tcp", h.addr, "a"); err == nil {
		t.Fatal("a second connection of a VM was accepted")
	}
	a.Close()
	waitFor(t, func() bool {
		c, err := nbd.Dial(ctx, "tcp", h.addr, "a")
		if err != nil {
			return false
		}
		defer c.Close()
		return bytes.Equal(readAll(t, c), img)
	})
}

// TestUpstreamWrites: with writes upstream, a VM's writes reach the
// stream's server-side write cache and come back from it; the rest of
// the image still comes through the cache.
func TestUpstreamWrites(t *testing.T) {
	img := content(3)
	s := newStream(t, map[string][]byte{"golden": img})
	h := newHost(t, s, hostexport.WritesUpstream, map[string]string{"a": "golden", "b": "golden"})
	readAll(t, h.boot("b")) // warm the cache
	before := h.upstreamReads()
	a := h.boot("a")
	w := bytes.Repeat([]byte{0xa5}, 5000) // not whole sectors
	must(t, a.WriteAt(context.Background(), w, 10000, 0))
	must(t, a.Zero(context.Background(), 200000, 8192, 0))
	must(t, a.Flush(context.Background()))
	want := bytes.Clone(img)
	copy(want[10000:], w)
	clear(want[200000:208192])
	if !bytes.Equal(readAll(t, a), want) {
		t.Fatal("a VM does not read back the writes it sent upstream")
	}
	if h.upstreamReads() != before {
		t.Fatal("reads of unwritten blocks went upstream although cached")
	}
	if s.reg.Snapshot()[imageexport.LayerWriteDisk].Writes == 0 {
		t.Fatal("no write reached the stream's write cache")
	}
}

// TestUpstreamLost: the stream goes away; VMs still boot and read what is
// cached; a miss fails at once; when the stream is back, misses succeed.
func TestUpstreamLost(t *testing.T) {
	img := content(4)
	s := newStream(t, map[string][]byte{"golden": img})
	h := newHost(t, s, hostexport.WritesLocal, map[string]string{"a": "golden"})
	a := h.boot("a")
	p := make([]byte, digest.BlockSize)
	must(t, a.ReadAt(context.Background(), p, 0))
	a.Close()
	addr := s.addr
	s.stop()
	waitFor(t, func() bool {
		c, err := nbd.Dial(context.Background(), "tcp", h.addr, "a")
		if err != nil {
			return false
		}
		defer c.Close()
		return c.ReadAt(context.Background(), p, 0) == nil
	})
	a = h.boot("a")
	must(t, a.ReadAt(context.Background(), p, 0))
	start := time.Now()
	if err := a.ReadAt(context.Background(), p, 8*digest.BlockSize); err == nil {
		t.Fatal("a miss succeeded with the stream down")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a miss with the stream down took %v", d)
	}
	s.start(addr)
	waitFor(t, func() bool { return a.ReadAt(context.Background(), p, 8*digest.BlockSize) == nil })
	if !bytes.Equal(p, img[8*digest.BlockSize:9*digest.BlockSize]) {
		t.Fatal("wrong bytes after the stream came back")
	}
}

// TestWarm: reading warm/IMAGE fills the cache, so a VM's boot reads
// nothing from the stream.
func TestWarm(t *testing.T) {
	img := content(5)
	s := newStream(t, map[string][]byte{"golden": img})
	h := newHost(t, s, hostexport.WritesLocal, map[string]string{"a": "golden"})
	readAll(t, h.boot(hostexport.WarmPrefix+"golden"))
	before := h.upstreamReads()
	if !bytes.Equal(readAll(t, h.boot("a")), img) || h.upstreamReads() != before {
		t.Fatal("a VM's boot after warming read from the stream")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := nbd.Dial(ctx, "tcp", h.addr, hostexport.WarmPrefix+"other"); err == nil {
		t.Fatalf("warming an image no VM boots: %v", err)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRecordBoot: a VM's boot leaves the reads of its image in
// RecordDir/VM.trace; reads its overlay answers are not in it.
func TestRecordBoot(t *testing.T) {
	s := newStream(t, map[string][]byte{"golden": content(6)})
	c, err := hostcache.Open(t.TempDir(), hostcache.Options{Size: 16 << 20})
	must(t, err)
	defer c.Close()
	rec := t.TempDir()
	x, err := hostexport.New(hostexport.Config{
		Dial: func(ctx context.Context, exp string) (*nbd.Client, error) {
			return nbd.Dial(ctx, "tcp", s.addr, exp)
		},
		Cache: c, VMs: map[string]string{"a": "golden"}, WritesDir: t.TempDir(), RecordDir: rec,
	})
	must(t, err)
	defer x.Close()
	d, _, err := x.Open(context.Background(), "a", "")
	must(t, err)
	ctx := context.Background()
	p := make([]byte, 8192)
	must(t, d.ReadAt(ctx, p, 4096))
	must(t, d.WriteAt(ctx, p, 1<<20, 0))
	must(t, d.ReadAt(ctx, p, 1<<20)) // the overlay's: not a read of the image
	must(t, d.ReadAt(ctx, p[:512], 2<<20))
	must(t, d.Close())
	b, err := os.ReadFile(filepath.Join(rec, "a.trace"))
	must(t, err)
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	if strings.Join(lines, ",") != "4096 8192,2097152 512" {
		t.Fatalf("trace %q", lines)
	}
}

// TestStartWithoutUpstream: a host restarted while the stream is down
// serves the version it last saw from its cache, and reaches the stream
// when it is back.
func TestStartWithoutUpstream(t *testing.T) {
	img := content(7)
	s := newStream(t, map[string][]byte{"golden": img})
	cacheDir, state, writes := t.TempDir(), t.TempDir(), t.TempDir()
	addr := s.addr
	start := func() (*hostexport.Exports, *hostcache.Cache, error) {
		c, err := hostcache.Open(cacheDir, hostcache.Options{Size: 16 << 20})
		must(t, err)
		x, err := hostexport.New(hostexport.Config{
			Dial: func(ctx context.Context, exp string) (*nbd.Client, error) {
				return nbd.Dial(ctx, "tcp", addr, exp)
			},
			Cache: c, VMs: map[string]string{"a": "golden"}, WritesDir: writes, StateDir: state,
			Upstream: hostcache.UpstreamOptions{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
		})
		must(t, err)
		return x, c, x.Prepare(context.Background())
	}
	x, c, err := start()
	must(t, err)
	d, _, err := x.Open(context.Background(), "a", "")
	must(t, err)
	p := make([]byte, 20*digest.BlockSize)
	must(t, d.ReadAt(context.Background(), p, 0))
	d.Close()
	x.Close()
	c.Close()

	s.stop()
	x, c, err = start()
	if err != nil {
		t.Fatalf("a start with the stream down and a saved version: %v", err)
	}
	defer func() { x.Close(); c.Close() }()
	d, _, err = x.Open(context.Background(), "a", "")
	must(t, err)
	defer d.Close()
	q := make([]byte, len(p))
	if err := d.ReadAt(context.Background(), q, 0); err != nil || !bytes.Equal(q, img[:len(q)]) {
		t.Fatalf("the cached part of the image with the stream down: %v", err)
	}
	if err := d.ReadAt(context.Background(), q[:4096], 30*digest.BlockSize); err == nil {
		t.Fatal("a miss succeeded with the stream down")
	}
	s.start(addr)
	waitFor(t, func() bool { return d.ReadAt(context.Background(), q[:4096], 30*digest.BlockSize) == nil })
	if !bytes.Equal(q[:4096], img[30*digest.BlockSize:30*digest.BlockSize+4096]) {
		t.Fatal("wrong bytes once the stream is back")
	}
	// Without a saved version, a start with the stream down fails.
	s.stop()
	state = t.TempDir()
	x2, c2, err := func() (*hostexport.Exports, *hostcache.Cache, error) {
		cacheDir = t.TempDir()
		return start()
	}()
	defer func() { x2.Close(); c2.Close() }()
	if err == nil {
		t.Fatal("a start with the stream down and nothing saved succeeded")
	}
}

// blockOf is block i of an image.
func blockOf(p []byte, i int) []byte {
	return p[i*digest.BlockSize : min(len(p), (i+1)*digest.BlockSize)]
}

// TestPromotedVersion: a version promoted to production is what the next
// boot reads; its blocks that did not change stay cached, the changed
// ones are read from the stream once, and a block written with the
// content of another block is not read at all.
func TestPromotedVersion(t *testing.T) {
	ctx := context.Background()
	v1 := content(3)
	s := newStream(t, map[string][]byte{"golden": v1})
	h := newHost(t, s, hostexport.WritesLocal, map[string]string{"a": "golden", "b": "golden"})
	a := h.boot("a")
	if !bytes.Equal(readAll(t, a), v1) {
		t.Fatal("version 1 read wrong")
	}
	a.Close()
	first := h.upstreamReads()
	if first != int64(nonZero(v1)) {
		t.Fatalf("version 1: %d reads of the stream for %d distinct blocks", first, nonZero(v1))
	}

	// Version 2 changes blocks 1 and 7, copies block 2 over block 9 and
	// fills block 3, which was zero.
	v, err := s.store.NewVersion(ctx, "golden", "patch")
	must(t, err)
	dev, err := s.store.OpenVersion(ctx, "golden", v.Number, true)
	must(t, err)
	v2 := bytes.Clone(v1)
	other := content(4)
	copy(blockOf(v2, 1), blockOf(other, 1))
	copy(blockOf(v2, 7), blockOf(other, 7))
	copy(blockOf(v2, 3), blockOf(other, 6))
	copy(blockOf(v2, 9), blockOf(v1, 2))
	for _, i := range []int{1, 7, 3, 9} {
		must(t, dev.WriteAt(ctx, blockOf(v2, i), int64(i*digest.BlockSize), 0))
	}
	must(t, dev.Close())
	for range 2 { // maintenance → test → production
		_, err := s.store.Promote(ctx, "golden", v.Number)
		must(t, err)
	}

	b := h.boot("b")
	if !bytes.Equal(readAll(t, b), v2) {
		t.Fatal("a boot after the promotion does not read version 2")
	}
	if got := h.upstreamReads() - first; got != 3 {
		t.Fatalf("version 2 changed 3 blocks (and copied one): %d reads of the stream", got)
	}
}

// TestImagesShareBlocks: two images that share most of their blocks; the
// shared blocks are read from the stream and stored once.
func TestImagesShareBlocks(t *testing.T) {
	win := content(5)
	office := bytes.Clone(win)
	other := content(6)
	for _, i := range []int{0, 11, 20} {
		copy(blockOf(office, i), blockOf(other, i))
	}
	s := newStream(t, map[string][]byte{"win": win, "office": office})
	h := newHost(t, s, hostexport.WritesLocal, map[string]string{"a": "win", "b": "office"})
	if !bytes.Equal(readAll(t, h.boot("a")), win) || !bytes.Equal(readAll(t, h.boot("b")), office) {
		t.Fatal("wrong bytes")
	}
	want := nonZero(win, office)
	if want != nonZero(win)+3 {
		t.Fatalf("test images share %d blocks", 2*nonZero(win)-want)
	}
	if got := h.upstreamReads(); got != int64(want) {
		t.Fatalf("two images with %d distinct blocks between them: %d reads of the stream", want, got)
	}
	if got := h.c.Stats().Used; got != want {
		t.Fatalf("the cache holds %d blocks for %d distinct blocks", got, want)
	}
}
