package ramcache_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/ramcache"
)

func TestSecondReaderHitsMemory(t *testing.T) {
	ctx := context.Background()
	img := block.NewMemory(8 << 20)
	data := make([]byte, 8<<20)
	r := rand.New(rand.NewPCG(1, 1))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	img.WriteAt(ctx, data, 0, 0)
	img.SetReadOnly(true)
	var disk meter.Counters
	c := ramcache.New(64<<20, 0) // room to spare
	dev := c.Wrap(meter.Wrap(img, &disk))
	read := func() {
		for off := int64(0); off < 8<<20; off += 12345 {
			n := min(int64(7000), 8<<20-off)
			p := make([]byte, n)
			if err := dev.ReadAt(ctx, p, off); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(p, data[off:off+n]) {
				t.Fatalf("read at %d differs", off)
			}
		}
	}
	read()
	first := disk.Snapshot().Reads
	read() // the second target
	if got := disk.Snapshot().Reads; got != first {
		t.Fatalf("second pass read the image %d more times", got-first)
	}
	if c.Hits.Load() == 0 {
		t.Fatal("no hits")
	}
}

func TestCapacityBounded(t *testing.T) {
	ctx := context.Background()
	img := block.NewMemory(64 << 20)
	c := ramcache.New(4<<20, 64<<10)
	dev := c.Wrap(img)
	p := make([]byte, 1<<20)
	for off := int64(0); off < 64<<20; off += 1 << 20 {
		dev.ReadAt(ctx, p, off)
	}
	if got := c.Bytes(); got > 4<<20 {
		t.Fatalf("cache holds %d bytes, over its 4 MiB capacity", got)
	}
}

// gated is a device whose reads wait for release and are counted.
type gated struct {
	block.Device
	release chan struct{}
	reads   atomic.Int64
}

func (g *gated) ReadAt(ctx context.Context, p []byte, off int64) error {
	g.reads.Add(1)
	<-g.release
	return g.Device.ReadAt(ctx, p, off)
}

func TestConcurrentMissesReadOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		img := block.NewMemory(1 << 20)
		img.WriteAt(ctx, bytes.Repeat([]byte("boot"), 1<<18), 0, 0)
		img.SetReadOnly(true)
		g := &gated{Device: img, release: make(chan struct{})}
		c := ramcache.New(64<<20, 0)
		dev := c.Wrap(g)
		const readers = 16
		errs := make(chan error, readers)
		for i := range readers {
			go func() {
				p := make([]byte, 4096)
				err := dev.ReadAt(ctx, p, int64(i)*4096) // all in block 0
				if err == nil && !bytes.Equal(p, bytes.Repeat([]byte("boot"), 1024)) {
					err = errors.New("read differs")
				}
				errs <- err
			}()
		}
		// Every reader is blocked now: one in the image read, the rest
		// waiting for its fill.
		synctest.Wait()
		if got := c.Misses.Load(); got != readers {
			t.Errorf("Misses = %d with %d readers blocked, want %d", got, readers, readers)
		}
		if got := g.reads.Load(); got != 1 {
			t.Errorf("%d reads of the image in flight for one block missed by %d readers, want 1", got, readers)
		}
		close(g.release) // even after an error: the bubble ends only when the readers do
		for range readers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if got := g.reads.Load(); got != 1 {
			t.Fatalf("%d reads of the image for one block missed by %d readers, want 1", got, readers)
		}
		if got := c.Shared.Load(); got != readers-1 {
			t.Fatalf("Shared = %d, want %d", got, readers-1)
		}
	})
}

// failing fails its first read and succeeds after.
type failing struct {
	block.Device
	failed atomic.Bool
}

func (f *failing) ReadAt(ctx context.Context, p []byte, off int64) error {
	if !f.failed.Swap(true) {
		return errors.New("transient")
	}
	return f.Device.ReadAt(ctx, p, off)
}

func TestFailedFillIsNotCached(t *testing.T) {
	ctx := context.Background()
	img := block.NewMemory(1 << 20)
	img.WriteAt(ctx, []byte("data"), 0, 0)
	img.SetReadOnly(true)
	dev := ramcache.New(64<<20, 0).Wrap(&failing{Device: img})
	p := make([]byte, 4)
	if err := dev.ReadAt(ctx, p, 0); err == nil {
		t.Fatal("the first read did not fail")
	}
	if err := dev.ReadAt(ctx, p, 0); err != nil || string(p) != "data" {
		t.Fatalf("read after a failure: %q, %v", p, err)
	}
}

func TestTrySlices(t *testing.T) {
	ctx := context.Background()
	img := block.NewMemory(1 << 20)
	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(i * 13)
	}
	img.WriteAt(ctx, want, 0, 0)
	img.SetReadOnly(true)
	dev := ramcache.New(64<<20, 64<<10).Wrap(img)
	if _, ok := dev.TrySlices(1000, 200000, nil); ok {
		t.Fatal("TrySlices of blocks never read returned true")
	}
	if err := dev.ReadAt(ctx, make([]byte, 300000), 0); err != nil {
		t.Fatal(err)
	}
	sl, ok := dev.TrySlices(1000, 200000, nil)
	if !ok {
		t.Fatal("TrySlices of cached blocks returned false")
	}
	if got := bytes.Join(sl, nil); !bytes.Equal(got, want[1000:201000]) {
		t.Fatal("slices differ from the device")
	}
	if _, ok := dev.TrySlices(1000, 400000, nil); ok {
		t.Fatal("TrySlices reaching a block not cached returned true")
	}
	if _, ok := dev.TrySlices(1<<20-10, 20, nil); ok {
		t.Fatal("TrySlices past the end returned true")
	}
}

// TestCacheTheSizeOfTheImageHoldsIt: a cache given exactly the image's
// size keeps every block of it, whatever the hash spreads where, so that
// sizing --ram-cache to the image means no read of it after the first.
func TestCacheTheSizeOfTheImageHoldsIt(t *testing.T) {
	ctx := context.Background()
	const size, bs = 32 << 20, 64 << 10
	img := block.NewMemory(size)
	img.SetReadOnly(true)
	var disk meter.Counters
	c := ramcache.New(size, bs)
	dev := c.Wrap(meter.Wrap(img, &disk))
	p := make([]byte, bs)
	for pass := range 2 {
		for off := int64(0); off < size; off += bs {
			if err := dev.ReadAt(ctx, p, off); err != nil {
				t.Fatal(err)
			}
		}
		if got := disk.Snapshot().Reads; got != size/bs {
			t.Fatalf("after pass %d the image was read %d times, want %d (once per block)", pass+1, got, size/bs)
		}
	}
	if got := c.Bytes(); got != size {
		t.Fatalf("cache holds %d bytes, want %d", got, size)
	}
}

// TestCapacityHoldsUnderConcurrency: readers racing over an image eight
// times the cache never take it past its capacity, and every read is
// right.
func TestCapacityHoldsUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	const size, bs, capacity = 16 << 20, 16 << 10, 2 << 20
	img := block.NewMemory(size)
	data := make([]byte, size)
	r := rand.New(rand.NewPCG(2, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	img.WriteAt(ctx, data, 0, 0)
	img.SetReadOnly(true)
	c := ramcache.New(capacity, bs)
	dev := c.Wrap(img)
	var over atomic.Int64
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if b := c.Bytes(); b > capacity {
				over.Store(b)
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			p := make([]byte, 5000)
			for range 2000 {
				off := r.Int64N(size - int64(len(p)))
				if err := dev.ReadAt(ctx, p, off); err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(p, data[off:off+int64(len(p))]) {
					t.Errorf("read at %d differs", off)
					return
				}
			}
		})
	}
	wg.Wait()
	close(done)
	if b := over.Load(); b != 0 {
		t.Fatalf("the cache held %d bytes, over its capacity of %d", b, capacity)
	}
	if b := c.Bytes(); b > capacity || b < capacity/2 {
		t.Fatalf("the cache holds %d bytes after the run, capacity %d", b, capacity)
	}
}
