package ramcache_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

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
	c := ramcache.New(64<<20, 0) // per-shard budgets: room to spare
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
