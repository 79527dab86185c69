// Package writecache holds the per-target write caches that sit on top of
// a read-only image, in the modes of Citrix PVS: a sparse overlay file
// (on the server's disk or the device's disk), device RAM with a fixed
// budget, and device RAM with overflow to a local file written in large
// sequential segments. A target only ever sees its own writes.
package writecache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/meter"
)

// BlockSize is the unit in which caches track written data.
const BlockSize = 4096

// Overlay is a copy-on-write layer: written blocks live in a sparse file
// of the base's size, tracked by a bitmap; other blocks come from the
// base. With persistence the bitmap is saved on every Flush, so what a
// flush covered survives a crash of the process and is found again by
// OpenOverlay.
type Overlay struct {
	base    block.Device
	f       *os.File
	path    string
	persist bool
	size    int64
	bits    []atomic.Uint64
	locks   [256]sync.Mutex // per-block stripes for read-modify-write
	mapMu   sync.Mutex      // serialises saving the bitmap

	// Disk counts the operations that reach the overlay file (reads
	// of written blocks, writes, syncs): what the cache costs the disk
	// under it, as opposed to what the layer receives.
	Disk meter.Counters
}

var (
	_ block.Device       = (*Overlay)(nil)
	_ block.InlineWriter = (*Overlay)(nil)
	_ block.Extenter     = (*Overlay)(nil)
)

// OpenOverlay opens the overlay file at path over base. If persist is
// set and a bitmap from an earlier run (path + ".map") matches, the
// earlier writes are kept; otherwise the overlay starts empty.
func OpenOverlay(base block.Device, path string, persist bool) (*Overlay, error) {
	o := &Overlay{base: base, path: path, persist: persist, size: base.Size()}
	nblocks := (o.size + BlockSize - 1) / BlockSize
	o.bits = make([]atomic.Uint64, (nblocks+63)/64)
	keep := false
	if persist {
		if b, err := os.ReadFile(path + ".map"); err == nil && len(b) == 8+8*len(o.bits) && int64(binary.LittleEndian.Uint64(b)) == o.size {
			for i := range o.bits {
				o.bits[i].Store(binary.LittleEndian.Uint64(b[8+8*i:]))
			}
			keep = true
		}
	}
	flag := os.O_RDWR | os.O_CREATE
	if !keep {
		flag |= os.O_TRUNC
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(o.size); err != nil {
		f.Close()
		return nil, err
	}
	o.f = f
	return o, nil
}

func (o *Overlay) has(b int64) bool { return o.bits[b/64].Load()&(1<<(b%64)) != 0 }
func (o *Overlay) set(b int64)      { o.bits[b/64].Or(1 << (b % 64)) }

// Size implements block.Device.
func (o *Overlay) Size() int64 { return o.size }

// ReadOnly implements block.Device.
func (o *Overlay) ReadOnly() bool { return false }

// Blocks is the number of blocks written to the overlay.
func (o *Overlay) Blocks() int64 {
	var n int64
	for i := range o.bits {
		n += int64(bits.OnesCount64(o.bits[i].Load()))
	}
	return n
}

// ReadAt implements block.Device: runs of blocks come from the overlay
// or the base in as few reads as possible.
func (o *Overlay) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := block.CheckRange(o, off, int64(len(p))); err != nil {
		return err
	}
	for len(p) > 0 {
		b := off / BlockSize
		mine := o.has(b)
		end := (b + 1) * BlockSize
		for end < off+int64(len(p)) && o.has(end/BlockSize) == mine {
			end += BlockSize
		}
		n := min(int64(len(p)), end-off)
		var err error
		if mine {
			o.Disk.Reads.Add(1)
			o.Disk.ReadBytes.Add(n)
			_, err = o.f.ReadAt(p[:n], off)
		} else {
			err = o.base.ReadAt(ctx, p[:n], off)
		}
		if err != nil {
			return err
		}
		p, off = p[n:], off+n
	}
	return nil
}

// WriteAt implements block.Device. Partial blocks not yet in the
// overlay are completed from the base first.
func (o *Overlay) WriteAt(ctx context.Context, p []byte, off int64, f block.Flags) error {
	if err := block.CheckWrite(o, off, int64(len(p))); err != nil {
		return err
	}
	for len(p) > 0 {
		b, bo := off/BlockSize, off%BlockSize
		if bo != 0 || int64(len(p)) < BlockSize {
			n := min(int64(len(p)), BlockSize-bo)
			if err := o.writePartial(ctx, b, bo, p[:n]); err != nil {
				return err
			}
			p, off = p[n:], off+n
			continue
		}
		n := int64(len(p)) / BlockSize * BlockSize
		o.diskWrite(n)
		if _, err := o.f.WriteAt(p[:n], off); err != nil {
			return mapNoSpace(err)
		}
		for i := b; i < b+n/BlockSize; i++ {
			o.set(i)
		}
		p, off = p[n:], off+n
	}
	if f&block.FUA != 0 {
		return o.Flush(ctx)
	}
	return nil
}

// TryWriteAt implements block.InlineWriter: whole blocks go to the
// overlay file with one buffered write, as WriteAt does; a partial block
// not yet written needs a read of the base, and is left to WriteAt.
func (o *Overlay) TryWriteAt(p []byte, off int64) bool {
	n := int64(len(p))
	if n == 0 || off < 0 || off%BlockSize != 0 || n%BlockSize != 0 || off > o.size-n {
		return false
	}
	o.diskWrite(n)
	if _, err := o.f.WriteAt(p, off); err != nil {
		return false
	}
	for b := off / BlockSize; b < (off+n)/BlockSize; b++ {
		o.set(b)
	}
	return true
}

func (o *Overlay) diskWrite(n int64) {
	o.Disk.Writes.Add(1)
	o.Disk.WriteBytes.Add(n)
}

func (o *Overlay) writePartial(ctx context.Context, b, bo int64, p []byte) error {
	mu := &o.locks[b%int64(len(o.locks))]
	mu.Lock()
	defer mu.Unlock()
	start := b * BlockSize
	if o.has(b) {
		o.diskWrite(int64(len(p)))
		_, err := o.f.WriteAt(p, start+bo)
		return mapNoSpace(err)
	}
	buf := make([]byte, min(BlockSize, o.size-start))
	if err := o.base.ReadAt(ctx, buf, start); err != nil {
		return err
	}
	copy(buf[bo:], p)
	o.diskWrite(int64(len(buf)))
	if _, err := o.f.WriteAt(buf, start); err != nil {
		return mapNoSpace(err)
	}
	o.set(b)
	return nil
}

// Zero implements block.Device: whole blocks become holes in the
// overlay, partial ones are written.
func (o *Overlay) Zero(ctx context.Context, off, n int64, f block.Flags) error {
	if err := block.CheckWrite(o, off, n); err != nil {
		return err
	}
	end := off + n
	for off < end {
		b, bo := off/BlockSize, off%BlockSize
		l := min(end-off, BlockSize-bo)
		if bo != 0 || l < BlockSize && off+l != o.size {
			if err := o.writePartial(ctx, b, bo, make([]byte, l)); err != nil {
				return err
			}
			off += l
			continue
		}
		full := (end - off) / BlockSize * BlockSize
		if full == 0 {
			full = l
		}
		o.Disk.Zeros.Add(1)
		o.Disk.ZeroBytes.Add(full)
		if err := unix.Fallocate(int(o.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, full); err != nil {
			if _, err := o.f.WriteAt(make([]byte, full), off); err != nil {
				return mapNoSpace(err)
			}
		}
		for i := b; i*BlockSize < off+full; i++ {
			o.set(i)
		}
		off += full
	}
	if f&block.FUA != 0 {
		return o.Flush(ctx)
	}
	return nil
}

// Trim implements block.Device as Zero.
func (o *Overlay) Trim(ctx context.Context, off, n int64, f block.Flags) error {
	if err := block.CheckRange(o, off, n); err != nil {
		return err
	}
	return o.Zero(ctx, off, n, f&block.FUA)
}

// Flush implements block.Device: the overlay file is synced and, when
// persistent, the bitmap is saved atomically after it.
func (o *Overlay) Flush(context.Context) error {
	o.Disk.Flushes.Add(1)
	if err := unix.Fdatasync(int(o.f.Fd())); err != nil {
		return err
	}
	if !o.persist {
		return nil
	}
	o.mapMu.Lock()
	defer o.mapMu.Unlock()
	b := make([]byte, 8+8*len(o.bits))
	binary.LittleEndian.PutUint64(b, uint64(o.size))
	for i := range o.bits {
		binary.LittleEndian.PutUint64(b[8+8*i:], o.bits[i].Load())
	}
	return writeFileSync(o.path+".map", b)
}

// writeFileSync replaces path with b atomically and durably.
func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return mapNoSpace(err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Close closes the overlay file (not the base). A non-persistent overlay
// removes its file: a standard-mode target's writes vanish.
func (o *Overlay) Close() error {
	err := o.f.Close()
	if !o.persist {
		os.Remove(o.path)
	}
	return err
}

func mapNoSpace(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return fmt.Errorf("%w: %v", block.ErrNoSpace, err)
	}
	return err
}

// Written reports whether block b (of BlockSize bytes) is in the overlay.
func (o *Overlay) Written(b int64) bool { return o.has(b) }

// Base is the device under the overlay.
func (o *Overlay) Base() block.Device { return o.base }
