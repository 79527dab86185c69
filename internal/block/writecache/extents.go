package writecache

import (
	"context"

	"github.com/usher-vdi/usher/internal/block"
)

// maxExtents is how many extents a cache reports in one call before it
// stops early (block.Extenter allows it; the caller asks again).
const maxExtents = 1024

// ownFunc classifies block b of a cache: mine is whether the cache holds
// it (then flags describe it), and next is the first block after b, at
// most limit, whose classification may differ.
type ownFunc func(b, limit int64) (mine bool, flags block.ExtentFlags, next int64)

// mergeExtents appends the extents of [off, off+n) of a cache over base:
// the cache's own blocks as own reports them, the rest as the base
// reports it. The base is asked once, before lock is taken for the walk
// over the cache's blocks (a remote base may take a round trip).
func mergeExtents(ctx context.Context, base block.Device, off, n int64, dst []block.Extent, lock, unlock func(), own ownFunc) ([]block.Extent, error) {
	baseExt, err := block.Extents(ctx, base, off, n, nil)
	if err != nil {
		return dst, err
	}
	first := len(dst)
	add := func(l int64, f block.ExtentFlags) {
		if k := len(dst) - 1; k >= first && dst[k].Flags == f {
			dst[k].Length += l
		} else {
			dst = append(dst, block.Extent{Length: l, Flags: f})
		}
	}
	lock()
	defer unlock()
	pos := off
	for _, e := range baseExt {
		end := min(pos+e.Length, off+n)
		for pos < end {
			b := pos / BlockSize
			mine, f, next := own(b, (end+BlockSize-1)/BlockSize)
			runEnd := min(next*BlockSize, end)
			if !mine {
				f = e.Flags
			}
			add(runEnd-pos, f)
			pos = runEnd
			if len(dst)-first >= maxExtents {
				return dst, nil
			}
		}
	}
	return dst, nil
}

// Extents implements block.Extenter: written blocks are data, the rest
// is as the base reports it.
func (o *Overlay) Extents(ctx context.Context, off, n int64, dst []block.Extent) ([]block.Extent, error) {
	if err := block.CheckRange(o, off, n); err != nil {
		return dst, err
	}
	return mergeExtents(ctx, o.base, off, n, dst, func() {}, func() {}, o.own)
}

// own is the ownFunc of the overlay, skipping whole bitmap words.
func (o *Overlay) own(b, limit int64) (bool, block.ExtentFlags, int64) {
	mine := o.has(b)
	next := b + 1
	for next < limit {
		if next%64 == 0 && next+64 <= limit {
			w := o.bits[next/64].Load()
			if (mine && w == ^uint64(0)) || (!mine && w == 0) {
				next += 64
				continue
			}
		}
		if o.has(next) != mine {
			break
		}
		next++
	}
	return mine, 0, next
}

// Extents implements block.Extenter: blocks in RAM or in the overflow
// are data, blocks zeroed in RAM are holes that read as zeros, and the
// rest is as the base reports it.
func (r *RAM) Extents(ctx context.Context, off, n int64, dst []block.Extent) ([]block.Extent, error) {
	if err := block.CheckRange(r, off, n); err != nil {
		return dst, err
	}
	return mergeExtents(ctx, r.base, off, n, dst, r.mu.RLock, r.mu.RUnlock, r.own)
}

// own is the ownFunc of the RAM cache; it is called with mu held.
func (r *RAM) own(b, limit int64) (bool, block.ExtentFlags, int64) {
	class := func(b int64) (bool, block.ExtentFlags) {
		if rb := r.blocks[b]; rb != nil {
			if rb.data == nil {
				return true, block.Hole | block.Zeroed
			}
			return true, 0
		}
		_, ok := r.ofIndex[b]
		return ok, 0
	}
	mine, f := class(b)
	if len(r.blocks) == 0 && len(r.ofIndex) == 0 {
		return false, 0, limit
	}
	next := b + 1
	for ; next < limit; next++ {
		if m, g := class(next); m != mine || g != f {
			break
		}
	}
	return mine, f, next
}
