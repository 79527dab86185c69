package writecache_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/blocktest"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/writecache"
)

func readOnlyBase(size int64) block.Device {
	m := block.NewMemory(size)
	m.SetReadOnly(true)
	return m
}

func TestOverlay(t *testing.T) {
	blocktest.Run(t, func(t *testing.T) block.Device {
		o, err := writecache.OpenOverlay(readOnlyBase(blocktest.Size), filepath.Join(t.TempDir(), "ov"), false)
		if err != nil {
			t.Fatal(err)
		}
		return o
	})
}

func TestRAM(t *testing.T) {
	blocktest.Run(t, func(t *testing.T) block.Device {
		return writecache.NewRAM(readOnlyBase(blocktest.Size), writecache.RAMOptions{Budget: blocktest.Size})
	})
}

func TestRAMOverflow(t *testing.T) {
	blocktest.Run(t, func(t *testing.T) block.Device {
		of, err := block.CreateFile(filepath.Join(t.TempDir(), "overflow"), 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		return writecache.NewRAM(readOnlyBase(blocktest.Size), writecache.RAMOptions{Budget: 64 << 10, Overflow: of})
	})
}

func TestRAMFullFailsCleanly(t *testing.T) {
	ctx := context.Background()
	c := writecache.NewRAM(readOnlyBase(1<<20), writecache.RAMOptions{Budget: 8 * 4096})
	p := bytes.Repeat([]byte{1}, 8*4096)
	if err := c.WriteAt(ctx, p, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteAt(ctx, p[:4096], 1<<19, 0); !errors.Is(err, block.ErrNoSpace) {
		t.Fatalf("write past the budget: %v, want ErrNoSpace", err)
	}
	q := make([]byte, len(p))
	c.ReadAt(ctx, q, 0)
	if !bytes.Equal(p, q) {
		t.Fatal("data written before the cache filled was damaged")
	}
}

func TestRAMInlineWritesNeedNoIO(t *testing.T) {
	ctx := context.Background()
	base := block.NewMemory(1 << 20)
	base.WriteAt(ctx, bytes.Repeat([]byte{9}, 1<<20), 0, 0)
	base.SetReadOnly(true)
	c := writecache.NewRAM(base, writecache.RAMOptions{Budget: 2 * 4096})
	if c.TryWriteAt([]byte("partial"), 100) {
		t.Fatal("a partial block not in RAM was written inline (it needs a read of the base)")
	}
	if !c.TryWriteAt(make([]byte, 2*4096), 0) {
		t.Fatal("whole blocks within the budget were not written inline")
	}
	if !c.TryWriteAt([]byte("partial"), 100) {
		t.Fatal("a partial write into a block in RAM was not taken inline")
	}
	if c.TryWriteAt(make([]byte, 4096), 8192) {
		t.Fatal("a write past the budget was taken inline")
	}
	if err := c.WriteAt(ctx, make([]byte, 4096), 8192, 0); !errors.Is(err, block.ErrNoSpace) {
		t.Fatalf("write past the budget: %v, want ErrNoSpace", err)
	}
	p := make([]byte, 8)
	c.ReadAt(ctx, p, 99)
	if got, want := string(p), "\x00partial"; got != want {
		t.Fatalf("read %q, want %q", got, want)
	}
}

func TestOverflowFullKeepsData(t *testing.T) {
	ctx := context.Background()
	of, _ := block.CreateFile(filepath.Join(t.TempDir(), "overflow"), 2*writecache.SegmentBlocks*4096)
	var disk meter.Counters
	c := writecache.NewRAM(readOnlyBase(64<<20), writecache.RAMOptions{Budget: 1 << 20, Overflow: meter.Wrap(of, &disk)})
	defer c.Close()
	var written int64
	var err error
	for i := int64(0); ; i++ {
		p := bytes.Repeat([]byte{byte(i%250 + 1)}, 4096)
		if err = c.WriteAt(ctx, p, i*4096, 0); err != nil {
			break
		}
		written = i + 1
	}
	if !errors.Is(err, block.ErrNoSpace) || c.Full.Load() == 0 {
		t.Fatalf("full overflow: %v, want ErrNoSpace counted", err)
	}
	// 1 MiB RAM + 2 MiB overflow = 768 blocks.
	if written != 768 {
		t.Fatalf("wrote %d blocks, want 768", written)
	}
	for i := range written {
		p := make([]byte, 4096)
		c.ReadAt(ctx, p, i*4096)
		if p[0] != byte(i%250+1) || p[4095] != byte(i%250+1) {
			t.Fatalf("block %d corrupted after the overflow filled", i)
		}
	}
	// 512 blocks moved in 2 sequential 1 MiB writes: 256 times fewer
	// disk writes than 4 KiB writes received.
	if s := disk.Snapshot(); s.Writes != 2 || s.WriteBytes != 2<<20 {
		t.Fatalf("overflow saw %d writes of %d bytes, want 2 of 2 MiB", s.Writes, s.WriteBytes)
	}
}

func TestTargetsDoNotSeeEachOther(t *testing.T) {
	ctx := context.Background()
	base := readOnlyBase(1 << 20)
	dir := t.TempDir()
	a, _ := writecache.OpenOverlay(base, filepath.Join(dir, "a"), false)
	b := writecache.NewRAM(base, writecache.RAMOptions{Budget: 1 << 20})
	c, _ := writecache.OpenOverlay(base, filepath.Join(dir, "c"), false)
	a.WriteAt(ctx, []byte("target a"), 0, 0)
	b.WriteAt(ctx, []byte("target b"), 0, 0)
	for _, d := range []block.Device{a, b, c} {
		p := make([]byte, 8)
		d.ReadAt(ctx, p, 0)
		if d == c && !block.IsZero(p) {
			t.Fatalf("target c sees %q", p)
		}
	}
	p := make([]byte, 8)
	a.ReadAt(ctx, p, 0)
	if string(p) != "target a" {
		t.Fatalf("target a reads %q", p)
	}
}

func TestOverlayPersists(t *testing.T) {
	ctx := context.Background()
	base := readOnlyBase(1 << 20)
	path := filepath.Join(t.TempDir(), "ov")
	o, _ := writecache.OpenOverlay(base, path, true)
	o.WriteAt(ctx, []byte("kept"), 4096, 0)
	o.Flush(ctx)
	o.Close()
	o, _ = writecache.OpenOverlay(base, path, true)
	defer o.Close()
	p := make([]byte, 4)
	o.ReadAt(ctx, p, 4096)
	if string(p) != "kept" {
		t.Fatalf("after reopening: %q", p)
	}
}

func TestOverflowReadsRuns(t *testing.T) {
	ctx := context.Background()
	of, err := block.CreateFile(filepath.Join(t.TempDir(), "overflow"), 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	var disk meter.Counters
	// A budget of 256 blocks (1 MiB, one segment): of 2 MiB written,
	// the first MiB written moves to the overflow file in one segment.
	c := writecache.NewRAM(readOnlyBase(4<<20), writecache.RAMOptions{Budget: 256 * 4096, Overflow: meter.Wrap(of, &disk)})
	defer c.Close()
	want := make([]byte, 2<<20)
	for i := range want {
		want[i] = byte(i / 4096)
	}
	// Written backwards, so that least recently written is not block
	// order: the segment is sorted by block.
	for off := int64(len(want)) - 4096; off >= 0; off -= 4096 {
		if err := c.WriteAt(ctx, want[off:off+4096], off, 0); err != nil {
			t.Fatal(err)
		}
	}
	before := disk.Snapshot().Reads
	got := make([]byte, len(want))
	if err := c.ReadAt(ctx, got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("read back differs")
	}
	if got := c.Evicted.Load(); got != 256 {
		t.Fatalf("%d blocks evicted, want 256", got)
	}
	if reads := disk.Snapshot().Reads - before; reads != 1 {
		t.Fatalf("%d overflow reads for one segment of neighbouring blocks, want 1", reads)
	}
}

// TestOverflowRewritesInPlace: a desktop that rewrites the same blocks all
// day writes far more than its overflow holds in total; each block keeps
// one slot there, written in place when evicted again, so the overflow
// never fills while the live blocks fit, and every read is the latest.
func TestOverflowRewritesInPlace(t *testing.T) {
	ctx := context.Background()
	const blocks = 1024 // 4 MiB of distinct blocks, the overflow's size
	of, err := block.CreateFile(filepath.Join(t.TempDir(), "overflow"), blocks*4096)
	if err != nil {
		t.Fatal(err)
	}
	var disk meter.Counters
	c := writecache.NewRAM(readOnlyBase(64<<20), writecache.RAMOptions{Budget: 256 << 10, Overflow: meter.Wrap(of, &disk)})
	defer c.Close()
	last := make([]byte, blocks)
	// 20 passes over the blocks, in a stride that mixes them: 80 MiB
	// written into 4 MiB of overflow and 256 KiB of RAM.
	for pass := range 20 {
		for k := range blocks {
			i := (k*37 + pass) % blocks
			v := byte(pass*7 + k%5 + 1)
			if err := c.WriteAt(ctx, bytes.Repeat([]byte{v}, 4096), int64(i)*4096, 0); err != nil {
				t.Fatalf("pass %d block %d: %v", pass, i, err)
			}
			last[i] = v
		}
	}
	for i := range blocks {
		p := make([]byte, 4096)
		if err := c.ReadAt(ctx, p, int64(i)*4096); err != nil {
			t.Fatal(err)
		}
		if p[0] != last[i] || p[4095] != last[i] {
			t.Fatalf("block %d reads %d, want the last write's %d", i, p[0], last[i])
		}
	}
	if c.Full.Load() != 0 || c.Rewrites.Load() == 0 {
		t.Fatalf("full %d times, %d rewrites in place", c.Full.Load(), c.Rewrites.Load())
	}
	// The blocks really went out and came back many times over.
	if n := c.Evicted.Load(); n < 10*blocks {
		t.Errorf("%d blocks evicted, want the passes to evict each many times", n)
	}
}
