package hostcache

import (
	"context"
	"fmt"

	"github.com/usher-vdi/usher/internal/block"
)

// Wrap returns a read-only device of upstream's bytes through c, its
// blocks keyed by position (PositionKey(image, ...)): image must name
// upstream's content, a new version a new name. Close does not close
// upstream or c.
func (c *Cache) Wrap(upstream block.Device, image string) block.Device {
	return &device{c: c, up: upstream, image: image}
}

type device struct {
	c     *Cache
	up    block.Device
	image string
}

func (d *device) Size() int64    { return d.up.Size() }
func (d *device) ReadOnly() bool { return true }
func (d *device) Close() error   { return nil }

func (d *device) Flush(context.Context) error { return nil }

func (d *device) WriteAt(context.Context, []byte, int64, block.Flags) error { return block.ErrReadOnly }
func (d *device) Zero(context.Context, int64, int64, block.Flags) error     { return block.ErrReadOnly }
func (d *device) Trim(context.Context, int64, int64, block.Flags) error     { return block.ErrReadOnly }

// ReadAt reads each block p touches through the cache: a whole block
// straight into p, a part of one through a buffer.
func (d *device) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := block.CheckRange(d, off, int64(len(p))); err != nil {
		return err
	}
	bs := int64(d.c.blockSize)
	var buf []byte
	for len(p) > 0 {
		idx := off / bs
		start := idx * bs
		length := min(bs, d.up.Size()-start) // the last block may be short
		in := off - start
		n := min(int64(len(p)), length-in)
		dst := p[:n]
		if in != 0 || n != length {
			if buf == nil {
				buf = make([]byte, bs)
			}
			dst = buf[:length]
		}
		key := PositionKey(d.image, d.c.blockSize, idx)
		if _, err := d.c.Get(ctx, key, dst, func(ctx context.Context, b []byte) error {
			return d.up.ReadAt(ctx, b, start)
		}); err != nil {
			return fmt.Errorf("hostcache: block %d of %s: %w", idx, d.image, err)
		}
		if len(dst) != int(n) || in != 0 {
			copy(p[:n], dst[in:in+n])
		}
		p, off = p[n:], off+n
	}
	return nil
}
