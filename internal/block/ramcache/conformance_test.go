package ramcache_test

import (
	"context"
	"testing"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/blocktest"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/ramcache"
)

// memoryWith is a Memory holding content, read-only when ro is set.
func memoryWith(t *testing.T, content []byte, ro bool) *block.Memory {
	t.Helper()
	m := block.NewMemory(int64(len(content)))
	if err := m.WriteAt(context.Background(), content, 0, 0); err != nil {
		t.Fatal(err)
	}
	m.SetReadOnly(ro)
	return m
}

func TestConformance(t *testing.T) {
	for _, tt := range []struct {
		name            string
		capacity, block int64
	}{
		{"Roomy", 64 << 20, 0},
		{"Evicting", 256 << 10, 0}, // four 64 KiB blocks: reads evict constantly
		{"SmallBlocks", 64 << 20, 4096},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := ramcache.New(tt.capacity, tt.block)
			blocktest.RunReader(t, func(t *testing.T, content []byte) block.Device {
				return c.Wrap(memoryWith(t, content, true))
			})
		})
	}
	t.Run("Metered", func(t *testing.T) {
		c := ramcache.New(64<<20, 0)
		var reg meter.Registry
		blocktest.RunReader(t, func(t *testing.T, content []byte) block.Device {
			return meter.Wrap(c.Wrap(memoryWith(t, content, true)), reg.Layer("ramcache"))
		})
	})
}

// A cached view refuses writes even when the device under it takes them:
// a write there would leave the cache stale.
func TestRefusesWrites(t *testing.T) {
	m := memoryWith(t, blocktest.Content(), false)
	blocktest.RunReadOnly(t, ramcache.New(64<<20, 0).Wrap(m))
	if m.ReadOnly() {
		t.Fatal("wrapping made the device under the cache read-only")
	}
}
