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
	tries, slices atomic.Int64
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

// TrySlices serves ranges that start in an even MiB, as copies cut
// into three slices, so that large replies are written both from
// slices and from a worker's buffer.
func (m *memReader) TrySlices(off, n int64, dst [][]byte) ([][]byte, bool) {
	if (off>>20)%2 == 1 || n < 3 {
		return dst, false
	}
	p := make([]byte, n)
	if err := m.Memory.ReadAt(context.Background(), p, off); err != nil {
		return dst, false
	}
	m.slices.Add(1)
	return append(dst, p[:n/3], p[n/3:n/2], p[n/2:]), true
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

// TestLargeRepliesBesideQueuedOnes mixes replies too large to queue
// (written straight from the worker's buffer) with small ones queued
// at the same time by the reading goroutine (memory reads, inline
// writes) and by workers: every reply must arrive intact.
func TestLargeRepliesBesideQueuedOnes(t *testing.T) {
	ctx := context.Background()
	const size = 4 << 20
	mem := &memReader{Memory: block.NewMemory(size)}
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i*7 + i>>12)
	}
	if err := mem.WriteAt(ctx, want, 0, 0); err != nil {
		t.Fatal(err)
	}
	c := dial(t, startServer(t, Devices{"disk": mem}), "disk")
	defer c.Close()
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			big := make([]byte, 1<<20)
			small := make([]byte, 4096)
			for i := range 150 {
				var err error
				var p []byte
				var off int64
				switch g % 3 {
				case 0:
					p, off = big, int64((g+i)%4)<<20
					err = c.ReadAt(ctx, p, off)
				case 1:
					p, off = small, int64((g*150+i)%1024)*4096
					err = c.ReadAt(ctx, p, off)
				case 2: // rewrite what is there: inline writes queue replies
					off = int64((g*150+i)%1024) * 4096
					err = c.WriteAt(ctx, want[off:off+4096], off, 0)
				}
				if err != nil {
					t.Error(err)
					return
				}
				if p != nil && !bytes.Equal(p, want[off:off+int64(len(p))]) {
					t.Errorf("read of %d bytes at %d: wrong data", len(p), off)
					return
				}
			}
		}()
	}
	wg.Wait()
	if mem.slices.Load() == 0 {
		t.Fatal("no large read was written from slices")
	}
}
