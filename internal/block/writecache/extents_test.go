package writecache_test

import (
	"bytes"
	"context"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/blocktest"
	"github.com/usher-vdi/usher/internal/block/writecache"
)

const hz = block.Hole | block.Zeroed

func ext(length int64, f block.ExtentFlags) block.Extent {
	return block.Extent{Length: length, Flags: f}
}

// sparseBase is a read-only 1 MiB base whose first 64 KiB hold data and
// whose rest is a hole.
func sparseBase(t *testing.T) block.Device {
	m := block.NewMemory(1 << 20)
	if err := m.WriteAt(context.Background(), bytes.Repeat([]byte{1}, 64<<10), 0, 0); err != nil {
		t.Fatal(err)
	}
	m.SetReadOnly(true)
	return m
}

func TestCacheExtents(t *testing.T) {
	ctx := context.Background()
	// Each cache gets a write of blocks 20-21 (a hole in the base) and
	// a partial write into block 0 (data in the base).
	want := []block.Extent{ext(64<<10, 0), ext(16<<10, hz), ext(8<<10, 0), ext(1<<20-88<<10, hz)}
	for _, tc := range []struct {
		name string
		open func(t *testing.T) block.Device
	}{
		{"Overlay", func(t *testing.T) block.Device {
			o, err := writecache.OpenOverlay(sparseBase(t), filepath.Join(t.TempDir(), "ov"), false)
			if err != nil {
				t.Fatal(err)
			}
			return o
		}},
		{"RAM", func(t *testing.T) block.Device {
			return writecache.NewRAM(sparseBase(t), writecache.RAMOptions{Budget: 1 << 20})
		}},
		{"RAMOverflow", func(t *testing.T) block.Device {
			of, err := block.CreateFile(filepath.Join(t.TempDir(), "of"), 4<<20)
			if err != nil {
				t.Fatal(err)
			}
			// A budget of one block: the writes overflow.
			return writecache.NewRAM(sparseBase(t), writecache.RAMOptions{Budget: 4096, Overflow: of})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.open(t)
			defer d.Close()
			if err := d.WriteAt(ctx, bytes.Repeat([]byte{2}, 8192), 20*4096, 0); err != nil {
				t.Fatal(err)
			}
			if err := d.WriteAt(ctx, []byte("x"), 100, 0); err != nil {
				t.Fatal(err)
			}
			if got := blocktest.Extents(t, d, 0, 1<<20); !reflect.DeepEqual(got, want) {
				t.Fatalf("extents %v, want %v", got, want)
			}
			// A query that starts and ends inside blocks.
			if got, want := blocktest.Extents(t, d, 20*4096+100, 4096), []block.Extent{ext(4096, 0)}; !reflect.DeepEqual(got, want) {
				t.Fatalf("extents inside written blocks %v, want %v", got, want)
			}
			if got, want := blocktest.Extents(t, d, 19*4096+10, 4096), []block.Extent{ext(4086, hz), ext(10, 0)}; !reflect.DeepEqual(got, want) {
				t.Fatalf("extents across the edge of a write %v, want %v", got, want)
			}
		})
	}
}

func TestRAMZeroedBlockIsAHole(t *testing.T) {
	ctx := context.Background()
	base := sparseBase(t)
	c := writecache.NewRAM(base, writecache.RAMOptions{Budget: 1 << 20})
	defer c.Close()
	if err := c.Zero(ctx, 0, 4096, 0); err != nil {
		t.Fatal(err)
	}
	if got, want := blocktest.Extents(t, c, 0, 8192), []block.Extent{ext(4096, hz), ext(4096, 0)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("extents %v, want %v", got, want)
	}
}

func TestOverlayExtentsStopEarly(t *testing.T) {
	ctx := context.Background()
	o, err := writecache.OpenOverlay(readOnlyBase(64<<20), filepath.Join(t.TempDir(), "ov"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	// Every other block of the first 64 MiB written: 8192 data extents,
	// 8192 holes (the last one runs to the end).
	for b := int64(0); b < 16384; b += 2 {
		if err := o.WriteAt(ctx, make([]byte, 4096), b*4096, 0); err != nil {
			t.Fatal(err)
		}
	}
	ext, err := o.Extents(ctx, 0, 64<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ext) == 0 || len(ext) > 1024 {
		t.Fatalf("%d extents in one call, want 1..1024", len(ext))
	}
	if got := blocktest.Extents(t, o, 0, 64<<20); len(got) != 16384 {
		t.Fatalf("%d extents in all, want %d", len(got), 16384)
	}
}
