package writecache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/usher-vdi/usher/internal/atomicfile"
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
	ident   string
	size    int64
	bits    []atomic.Uint64
	locks   [256]sync.Mutex // per-block stripes for read-modify-write
	mapMu   sync.Mutex      // serialises saving the bitmap
	dirty   atomic.Bool     // blocks were marked since the bitmap was saved

	quota *Quota       // shared bound, nil: none
	max   int64        // this overlay's bound in bytes, 0: none
	used  atomic.Int64 // bytes charged to quota and max

	// Discarded says why OpenOverlayWith discarded an earlier
	// persistent overlay ("" when it kept it, or found none).
	Discarded string

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
	return OpenOverlayWith(base, path, OverlayOptions{Persist: persist})
}

// OverlayOptions are the settings of OpenOverlayWith.
type OverlayOptions struct {
	// Persist keeps the overlay across runs, as OpenOverlay's persist.
	Persist bool
	// Max bounds the bytes of blocks written to this overlay (0: the
	// base's size); Quota, when set, bounds them across every overlay
	// sharing it. A write past either fails with block.ErrNoSpace.
	Max   int64
	Quota *Quota
	// Identity names the base a persistent overlay was written over
	// (its image, version and a fingerprint of its content). It is saved
	// with the bitmap; an earlier overlay saved with another identity,
	// or none, is discarded (Discarded says why), or with Strict refused
	// with ErrStale.
	Identity string
	Strict   bool
}

// ErrStale is returned by OpenOverlayWith with Strict when the earlier
// overlay was written over another base.
var ErrStale = errors.New("writecache: the overlay was written over another base")

// mapMagic starts a bitmap saved with an identity.
const mapMagic = "USHERWC2"

// Quota is a budget of overlay bytes shared by several overlays (a
// server's write caches); an overlay gives back what it used when it is
// closed. It is safe for concurrent use.
type Quota struct {
	max  int64
	used atomic.Int64
}

// NewQuota returns a quota of max bytes.
func NewQuota(max int64) *Quota { return &Quota{max: max} }

// Used is the number of bytes the quota's overlays hold.
func (q *Quota) Used() int64 { return q.used.Load() }

func (q *Quota) take(n int64) bool {
	for {
		u := q.used.Load()
		if u+n > q.max {
			return false
		}
		if q.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// OpenOverlayWith is OpenOverlay with bounds on the bytes written.
func OpenOverlayWith(base block.Device, path string, opts OverlayOptions) (*Overlay, error) {
	persist := opts.Persist
	o := &Overlay{base: base, path: path, persist: persist, ident: opts.Identity, size: base.Size(), quota: opts.Quota, max: opts.Max}
	nblocks := (o.size + BlockSize - 1) / BlockSize
	o.bits = make([]atomic.Uint64, (nblocks+63)/64)
	keep := false
	if persist {
		if b, err := os.ReadFile(path + ".map"); err == nil {
			words, why := o.parseMap(b)
			if why == "" {
				for i := range o.bits {
					o.bits[i].Store(binary.LittleEndian.Uint64(words[8*i:]))
				}
				keep = true
			} else {
				if opts.Strict {
					return nil, fmt.Errorf("%w: %s", ErrStale, why)
				}
				o.Discarded = why
				// A crash before the next flush must not pair this
				// bitmap with the emptied file.
				if err := os.Remove(path + ".map"); err != nil {
					return nil, err
				}
			}
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
	// The cache holds a device's writes: its owner's alone, whatever the
	// umask or the mode of a cache kept from before.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Truncate(o.size); err != nil {
		f.Close()
		return nil, err
	}
	o.f = f
	return o, nil
}

// parseMap checks a saved bitmap against the overlay and returns its
// words, or why it does not match.
func (o *Overlay) parseMap(b []byte) (words []byte, why string) {
	if o.ident != "" {
		if len(b) < len(mapMagic)+4 || string(b[:len(mapMagic)]) != mapMagic {
			return nil, "it records no base identity"
		}
		b = b[len(mapMagic):]
		n := int(binary.LittleEndian.Uint32(b))
		b = b[4:]
		if len(b) < n {
			return nil, "its bitmap is truncated"
		}
		if was := string(b[:n]); was != o.ident {
			return nil, fmt.Sprintf("it was written over %q, the base is now %q", was, o.ident)
		}
		b = b[n:]
	}
	if len(b) != 8+8*len(o.bits) || int64(binary.LittleEndian.Uint64(b)) != o.size {
		return nil, "it was written over a base of another size"
	}
	return b[8:], ""
}

func (o *Overlay) has(b int64) bool { return o.bits[b/64].Load()&(1<<(b%64)) != 0 }

// mark marks blocks [first, end) written and gives back what charge
// took (charged bytes) for blocks another write marked meanwhile.
func (o *Overlay) mark(first, end, charged int64) {
	var added int64
	for b := first; b < end; b++ {
		m := uint64(1) << (b % 64)
		if o.bits[b/64].Or(m)&m == 0 {
			added += BlockSize
		}
	}
	if added > 0 {
		o.dirty.Store(true)
	}
	if o.bounded() && charged > added {
		o.refund(charged - added)
	}
}

func (o *Overlay) bounded() bool { return o.max > 0 || o.quota != nil }

// charge takes the blocks of [first, end) not yet written from the
// overlay's bounds and returns their bytes, or fails with
// block.ErrNoSpace.
func (o *Overlay) charge(first, end int64) (int64, error) {
	if !o.bounded() {
		return 0, nil
	}
	var n int64
	for b := first; b < end; b++ {
		if !o.has(b) {
			n += BlockSize
		}
	}
	if n == 0 {
		return 0, nil
	}
	if u := o.used.Add(n); o.max > 0 && u > o.max {
		o.used.Add(-n)
		return 0, fmt.Errorf("%w: write cache full (%d bytes)", block.ErrNoSpace, o.max)
	}
	if o.quota != nil && !o.quota.take(n) {
		o.used.Add(-n)
		return 0, fmt.Errorf("%w: the server's write caches are full (%d bytes)", block.ErrNoSpace, o.quota.max)
	}
	return n, nil
}

func (o *Overlay) refund(n int64) {
	o.used.Add(-n)
	if o.quota != nil {
		o.quota.used.Add(-n)
	}
}

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
		charged, err := o.charge(b, b+n/BlockSize)
		if err != nil {
			return err
		}
		o.diskWrite(n)
		if _, err := o.f.WriteAt(p[:n], off); err != nil {
			return mapNoSpace(err)
		}
		o.mark(b, b+n/BlockSize, charged)
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
	charged, err := o.charge(off/BlockSize, (off+n)/BlockSize)
	if err != nil {
		return false // WriteAt reports it
	}
	o.diskWrite(n)
	if _, err := o.f.WriteAt(p, off); err != nil {
		return false
	}
	o.mark(off/BlockSize, (off+n)/BlockSize, charged)
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
	charged, err := o.charge(b, b+1)
	if err != nil {
		return err
	}
	buf := make([]byte, min(BlockSize, o.size-start))
	if err := o.base.ReadAt(ctx, buf, start); err != nil {
		o.mark(b, b, charged) // gives it back
		return err
	}
	copy(buf[bo:], p)
	o.diskWrite(int64(len(buf)))
	if _, err := o.f.WriteAt(buf, start); err != nil {
		return mapNoSpace(err)
	}
	o.mark(b, b+1, charged)
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
		stop := (off + full + BlockSize - 1) / BlockSize
		charged, err := o.charge(b, stop)
		if err != nil {
			return err
		}
		o.Disk.Zeros.Add(1)
		o.Disk.ZeroBytes.Add(full)
		if err := unix.Fallocate(int(o.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, full); err != nil {
			if _, err := o.f.WriteAt(make([]byte, full), off); err != nil {
				return mapNoSpace(err)
			}
		}
		o.mark(b, stop, charged)
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
	if !o.persist {
		return unix.Fdatasync(int(o.f.Fd()))
	}
	o.mapMu.Lock()
	defer o.mapMu.Unlock()
	// The bitmap is taken before the sync: a block is marked only after
	// its bytes were written, so the sync makes every block of this
	// bitmap durable. A block marked from here on sets dirty again and
	// is saved by the next flush (or close).
	o.dirty.Store(false)
	var b []byte
	if o.ident != "" {
		b = append([]byte(mapMagic), 0, 0, 0, 0)
		binary.LittleEndian.PutUint32(b[len(mapMagic):], uint32(len(o.ident)))
		b = append(b, o.ident...)
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(o.size))
	for i := range o.bits {
		b = binary.LittleEndian.AppendUint64(b, o.bits[i].Load())
	}
	if err := unix.Fdatasync(int(o.f.Fd())); err != nil {
		o.dirty.Store(true)
		return err
	}
	if err := atomicfile.WriteFile(o.path+".map", b, 0o600); err != nil {
		err = mapNoSpace(err)
		o.dirty.Store(true)
		return err
	}
	return nil
}

// Close closes the overlay file (not the base). A non-persistent overlay
// removes its file: a standard-mode target's writes vanish.
func (o *Overlay) Close() error {
	// A persistent overlay closed in order keeps every write it took,
	// flushed or not: a client that disconnects without a last flush
	// loses nothing.
	var err error
	if o.persist && o.dirty.Load() {
		err = o.Flush(context.Background())
	}
	if cerr := o.f.Close(); err == nil {
		err = cerr
	}
	if !o.persist {
		os.Remove(o.path)
		if o.quota != nil {
			o.quota.used.Add(-o.used.Swap(0))
		}
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
