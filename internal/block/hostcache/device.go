package hostcache

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/digest"
)

// ErrDigestMismatch is returned for a block that upstream served twice
// with bytes that do not match its digest: the image's data or its
// digests are damaged. Nothing is cached for it.
var ErrDigestMismatch = errors.New("hostcache: the block upstream served does not match its digest")

// DeviceStats count one Device's reads through the cache, in blocks.
type DeviceStats struct {
	// Hits were served from the cache; Misses were not (they were
	// fetched, by this device or by a concurrent reader of the same
	// block).
	Hits, Misses int64
	// Fetches and FetchedBytes are this device's reads of upstream.
	Fetches, FetchedBytes int64
	// Zero blocks were known to be zeros by their digest and made
	// without a fetch or a slot.
	Zero int64
	// Mismatches are fetched blocks whose bytes did not match their
	// digest (each was fetched again).
	Mismatches int64
}

// Device is a read-only block.Device of an upstream's bytes through a
// Cache. Close does not close upstream or the cache.
type Device struct {
	c     *Cache
	up    block.Device
	image string        // position keys: names the content
	table *digest.Table // content keys, when set

	hits, misses, fetches, fetched, zero, mismatches atomic.Int64
}

// Wrap returns a Device of upstream's bytes through c, its blocks keyed
// by position (PositionKey(image, ...)): image must name upstream's
// content, a new version a new name.
func (c *Cache) Wrap(upstream block.Device, image string) *Device {
	return &Device{c: c, up: upstream, image: image}
}

// WrapDigests returns a Device of upstream's bytes through c, its blocks
// keyed by their digests in t: a block any image or version holds is
// fetched and kept once, and a fetched block is checked against its
// digest before it is kept or served. t must be upstream's, in blocks of
// the cache's size.
func (c *Cache) WrapDigests(upstream block.Device, t *digest.Table) (*Device, error) {
	switch {
	case t.BlockSize != c.blockSize:
		return nil, fmt.Errorf("hostcache: digests of %d-byte blocks, but the cache keeps %d-byte blocks", t.BlockSize, c.blockSize)
	case t.Size != upstream.Size():
		return nil, fmt.Errorf("hostcache: digests of a %d-byte image, but upstream has %d bytes", t.Size, upstream.Size())
	}
	return &Device{c: c, up: upstream, table: t}, nil
}

// Stats returns the device's counters.
func (d *Device) Stats() DeviceStats {
	return DeviceStats{Hits: d.hits.Load(), Misses: d.misses.Load(), Fetches: d.fetches.Load(),
		FetchedBytes: d.fetched.Load(), Zero: d.zero.Load(), Mismatches: d.mismatches.Load()}
}

// ByContent reports whether the device's blocks are keyed by digest.
func (d *Device) ByContent() bool { return d.table != nil }

func (d *Device) Size() int64    { return d.up.Size() }
func (d *Device) ReadOnly() bool { return true }
func (d *Device) Close() error   { return nil }

func (d *Device) Flush(context.Context) error { return nil }

func (d *Device) WriteAt(context.Context, []byte, int64, block.Flags) error { return block.ErrReadOnly }
func (d *Device) Zero(context.Context, int64, int64, block.Flags) error     { return block.ErrReadOnly }
func (d *Device) Trim(context.Context, int64, int64, block.Flags) error     { return block.ErrReadOnly }

// ReadAt reads each block p touches through the cache: a whole block
// straight into p, a part of one through a buffer.
func (d *Device) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := block.CheckRange(d, off, int64(len(p))); err != nil {
		return err
	}
	bs := int64(d.c.blockSize)
	var buf *[]byte
	defer func() {
		if buf != nil {
			d.c.bufs.Put(buf)
		}
	}()
	for len(p) > 0 {
		idx := off / bs
		start := idx * bs
		length := min(bs, d.up.Size()-start) // the last block may be short
		in := off - start
		n := min(int64(len(p)), length-in)
		dst := p[:n]
		if in != 0 || n != length {
			if d.part(idx, int(length), p[:n], int(in)) {
				p, off = p[n:], off+n
				continue
			}
			if buf == nil {
				buf = d.c.bufs.Get().(*[]byte)
			}
			dst = (*buf)[:length]
		}
		if err := d.block(ctx, idx, dst); err != nil {
			return fmt.Errorf("hostcache: block %d: %w", idx, err)
		}
		if len(dst) != int(n) || in != 0 {
			copy(p[:n], dst[in:in+n])
		}
		p, off = p[n:], off+n
	}
	return nil
}

// key returns block idx's key, and whether it is a zero block (known by
// its digest).
func (d *Device) key(idx int64, length int) (Key, bool) {
	if d.table == nil {
		return PositionKey(d.image, d.c.blockSize, idx), false
	}
	sum := d.table.Sums[idx]
	return Key(sum), digest.IsZero(sum, length)
}

// part reads a part of block idx from the cache alone, when it can.
func (d *Device) part(idx int64, length int, dst []byte, in int) bool {
	key, zero := d.key(idx, length)
	switch {
	case zero:
		clear(dst)
		d.zero.Add(1)
		return true
	case d.c.ReadPart(key, length, dst, in):
		d.hits.Add(1)
		return true
	}
	return false
}

// block fills dst with block idx.
func (d *Device) block(ctx context.Context, idx int64, dst []byte) error {
	start := idx * int64(d.c.blockSize)
	key, zero := d.key(idx, len(dst))
	if zero {
		clear(dst)
		d.zero.Add(1)
		return nil
	}
	fetch := func(ctx context.Context, b []byte) error {
		d.fetches.Add(1)
		d.fetched.Add(int64(len(b)))
		return d.up.ReadAt(ctx, b, start)
	}
	if d.table != nil {
		sum := d.table.Sums[idx]
		plain := fetch
		fetch = func(ctx context.Context, b []byte) error {
			for try := 0; ; try++ {
				if err := plain(ctx, b); err != nil {
					return err
				}
				if digest.Of(b) == sum {
					return nil
				}
				d.mismatches.Add(1)
				d.c.log.Warn("host cache: a block from upstream does not match its digest", "block", idx, "try", try+1)
				if try == 1 {
					return ErrDigestMismatch
				}
			}
		}
	}
	hit, err := d.c.Get(ctx, key, dst, fetch)
	if hit {
		d.hits.Add(1)
	} else {
		d.misses.Add(1)
	}
	return err
}
