package hostexport

import (
	"context"
	"sync"

	"github.com/usher-vdi/usher/internal/block"
)

// sector is the unit writeThrough tracks: a block it has written is
// read from the VM's own connection, every other through the cache.
const sector = 4096

// writeThrough is a VM's disk when its writes go upstream: writes go to
// own, the VM's connection to the stream (which keeps them in its
// server-side write cache), and reads of what the VM wrote come back
// from there; every other read goes through the shared cache.
type writeThrough struct {
	cache block.Device
	own   block.Device

	mu      sync.RWMutex
	written []uint64 // a bit per sector
}

func newWriteThrough(cache, own block.Device) *writeThrough {
	n := (cache.Size() + sector - 1) / sector
	return &writeThrough{cache: cache, own: own, written: make([]uint64, (n+63)/64)}
}

func (w *writeThrough) Size() int64    { return w.cache.Size() }
func (w *writeThrough) ReadOnly() bool { return false }
func (w *writeThrough) Close() error   { return nil } // the VM's boot closes own

func (w *writeThrough) isWritten(s int64) bool { return w.written[s/64]&(1<<(s%64)) != 0 }

func (w *writeThrough) mark(off, n int64) {
	w.mu.Lock()
	for s := off / sector; s < (off+n+sector-1)/sector; s++ {
		w.written[s/64] |= 1 << (s % 64)
	}
	w.mu.Unlock()
}

// ReadAt reads each run of sectors from where it lives.
func (w *writeThrough) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := block.CheckRange(w, off, int64(len(p))); err != nil {
		return err
	}
	for len(p) > 0 {
		w.mu.RLock()
		own := w.isWritten(off / sector)
		end := min(off+int64(len(p)), (off/sector+1)*sector)
		for end < off+int64(len(p)) && w.isWritten(end/sector) == own {
			end = min(off+int64(len(p)), end+sector)
		}
		w.mu.RUnlock()
		src := w.cache
		if own {
			src = w.own
		}
		n := end - off
		if err := src.ReadAt(ctx, p[:n], off); err != nil {
			return err
		}
		p, off = p[n:], end
	}
	return nil
}

// WriteAt writes upstream, then marks the sectors as the VM's. A write
// that is not whole sectors reads the rest of them first, so that the
// VM's connection holds whole sectors of the right bytes.
func (w *writeThrough) WriteAt(ctx context.Context, p []byte, off int64, f block.Flags) error {
	if err := block.CheckWrite(w, off, int64(len(p))); err != nil {
		return err
	}
	start := off / sector * sector
	end := min(w.Size(), (off+int64(len(p))+sector-1)/sector*sector)
	if start != off || end != off+int64(len(p)) {
		buf := make([]byte, end-start)
		if err := w.ReadAt(ctx, buf, start); err != nil {
			return err
		}
		copy(buf[off-start:], p)
		p, off = buf, start
	}
	if err := w.own.WriteAt(ctx, p, off, f); err != nil {
		return err
	}
	w.mark(off, int64(len(p)))
	return nil
}

// Zero and Trim write zeros upstream: the range reads as zeros.
func (w *writeThrough) Zero(ctx context.Context, off, n int64, f block.Flags) error {
	if err := block.CheckWrite(w, off, n); err != nil {
		return err
	}
	zeros := make([]byte, min(n, 1<<20))
	for n > 0 {
		c := min(n, int64(len(zeros)))
		if err := w.WriteAt(ctx, zeros[:c], off, f&block.FUA); err != nil {
			return err
		}
		off, n = off+c, n-c
	}
	return nil
}

func (w *writeThrough) Trim(ctx context.Context, off, n int64, f block.Flags) error {
	return nil // a hint: the bytes may stay
}

func (w *writeThrough) Flush(ctx context.Context) error { return w.own.Flush(ctx) }
