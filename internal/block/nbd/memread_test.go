package nbd

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/blocktest"
)

// memReader serves every other 4 KiB block from memory through
// TryReadAt, so both the inline and the worker paths run.
type memReader struct {
	*block.Memory
	tries atomic.Int64
}

func (m *memReader) TryReadAt(p []byte, off int64) bool {
	if (off/4096)%2 == 1 {
		return false
	}
	if err := m.Memory.ReadAt(context.Background(), p, off); err != nil {
		return false
	}
	m.tries.Add(1)
	return true
}

func TestReadsServedFromMemory(t *testing.T) {
	blocktest.Run(t, func(t *testing.T) block.Device {
		addr := startServer(t, Devices{"disk": &memReader{Memory: block.NewMemory(blocktest.Size)}})
		return dial(t, addr, "disk")
	})

	ctx := context.Background()
	mem := &memReader{Memory: block.NewMemory(1 << 20)}
	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(i*31 + i>>12)
	}
	if err := mem.WriteAt(ctx, want, 0, 0); err != nil {
		t.Fatal(err)
	}
	c := dial(t, startServer(t, Devices{"disk": mem}), "disk")
	defer c.Close()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, 4096)
			for i := range 200 {
				off := int64((g*200+i)*4096) % (1 << 20)
				if err := c.ReadAt(ctx, p, off); err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(p, want[off:off+4096]) {
					t.Errorf("read at %d: wrong data", off)
					return
				}
			}
		}()
	}
	wg.Wait()
	if mem.tries.Load() == 0 {
		t.Fatal("no read was served from memory")
	}
}
