package writecache

import (
	"cmp"
	"container/list"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usher-vdi/usher/internal/block"
)

// SegmentBlocks is how many blocks the RAM cache moves to the overflow
// device in one sequential write (1 MiB).
const SegmentBlocks = 256

// RAMOptions configure a RAM write cache.
type RAMOptions struct {
	// Budget is the most RAM the cache's blocks take. Memory is taken
	// only as blocks are written.
	Budget int64
	// Overflow, when set, receives the least recently written blocks
	// once the budget is used, in segments of SegmentBlocks blocks
	// appended sequentially. Its size is the overflow capacity. Close
	// closes it.
	Overflow block.Device
	Logger   *slog.Logger
}

type ramBlock struct {
	n    int64  // block number
	data []byte // nil: zeros
	el   *list.Element
}

// RAM is a write cache in memory over a read-only base. Without an
// overflow, a write that needs more than the budget fails with
// block.ErrNoSpace (and a log line); with one, it fails so only when the
// overflow device is full too. A failed write changes nothing already
// written. Reads come from RAM, then the overflow, then the base.
// Contents are volatile: Flush does nothing, and the cache starts empty.
type RAM struct {
	base block.Device
	opt  RAMOptions
	size int64

	mu      sync.RWMutex
	blocks  map[int64]*ramBlock
	lru     list.List // of *ramBlock, front = most recently written
	used    int64
	ofIndex map[int64]int64 // block -> offset in the overflow device
	ofEnd   int64           // next segment goes here
	segment []byte

	// Evicted counts blocks moved to overflow, Segments the sequential
	// writes of blocks new to it; Full counts writes refused for lack of
	// space.
	Evicted, Segments, Full atomic.Int64
	// Rewrites counts the writes that put blocks evicted before back into
	// their own overflow slots.
	Rewrites atomic.Int64
	lastLog  atomic.Int64
}

var (
	_ block.Device       = (*RAM)(nil)
	_ block.InlineWriter = (*RAM)(nil)
	_ block.Extenter     = (*RAM)(nil)
)

// NewRAM returns a RAM write cache over base.
func NewRAM(base block.Device, opt RAMOptions) *RAM {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	return &RAM{base: base, opt: opt, size: base.Size(), blocks: make(map[int64]*ramBlock), ofIndex: make(map[int64]int64)}
}

// Size implements block.Device.
func (r *RAM) Size() int64 { return r.size }

// ReadOnly implements block.Device.
func (r *RAM) ReadOnly() bool { return false }

// Used is the RAM the cached blocks take.
func (r *RAM) Used() int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.used
}

// ReadAt implements block.Device.
func (r *RAM) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := block.CheckRange(r, off, int64(len(p))); err != nil {
		return err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for len(p) > 0 {
		b, bo := off/BlockSize, off%BlockSize
		n := min(int64(len(p)), BlockSize-bo)
		if rb := r.blocks[b]; rb != nil {
			if rb.data == nil {
				clear(p[:n])
			} else {
				copy(p[:n], rb.data[bo:])
			}
		} else if at, ok := r.ofIndex[b]; ok {
			// Blocks evicted together lie in order in the overflow
			// file: a run of them is one read.
			for next := b + 1; n < int64(len(p)); next++ {
				nat, ok := r.ofIndex[next]
				if !ok || nat != at+(next-b)*BlockSize || r.blocks[next] != nil {
					break
				}
				n = min(int64(len(p)), n+BlockSize)
			}
			if err := r.opt.Overflow.ReadAt(ctx, p[:n], at+bo); err != nil {
				return err
			}
		} else {
			// A run of blocks that are neither in RAM nor overflowed is
			// one read of the base.
			end := (b + 1) * BlockSize
			for end < off+int64(len(p)) && r.blocks[end/BlockSize] == nil {
				if _, ok := r.ofIndex[end/BlockSize]; ok {
					break
				}
				end += BlockSize
			}
			n = min(int64(len(p)), end-off)
			if err := r.base.ReadAt(ctx, p[:n], off); err != nil {
				return err
			}
		}
		p, off = p[n:], off+n
	}
	return nil
}

// WriteAt implements block.Device.
func (r *RAM) WriteAt(ctx context.Context, p []byte, off int64, _ block.Flags) error {
	if err := block.CheckWrite(r, off, int64(len(p))); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(p) > 0 {
		b, bo := off/BlockSize, off%BlockSize
		n := min(int64(len(p)), BlockSize-bo)
		rb, err := r.block(ctx, b, n < BlockSize)
		if err != nil {
			return err
		}
		copy(rb.data[bo:], p[:n])
		p, off = p[n:], off+n
	}
	return nil
}

// TryWriteAt implements block.InlineWriter: the write is taken when it
// needs neither the base (a partial block not in RAM) nor the overflow
// device (the budget is used), and when no read holds the cache (a read
// of the base may wait for the network).
func (r *RAM) TryWriteAt(p []byte, off int64) bool {
	if len(p) == 0 || off < 0 || off > r.size-int64(len(p)) {
		return false
	}
	if !r.mu.TryLock() {
		return false
	}
	defer r.mu.Unlock()
	if r.blocks == nil { // closed
		return false
	}
	end := off + int64(len(p))
	need := r.used
	for b := off / BlockSize; b*BlockSize < end; b++ {
		rb := r.blocks[b]
		if rb != nil && rb.data != nil {
			continue
		}
		if (b*BlockSize < off || (b+1)*BlockSize > end) && rb == nil {
			return false // partial: the old content is in the base or overflow
		}
		if need += BlockSize; need > r.opt.Budget {
			return false
		}
	}
	for len(p) > 0 {
		b, bo := off/BlockSize, off%BlockSize
		n := min(int64(len(p)), BlockSize-bo)
		rb, err := r.block(context.Background(), b, n < BlockSize)
		if err != nil {
			return false // not reached: room and old content were checked
		}
		copy(rb.data[bo:], p[:n])
		p, off = p[n:], off+n
	}
	return true
}

// block returns block b in RAM with its data allocated, making room and
// reading its old content (when partial) as needed. Called with mu held.
func (r *RAM) block(ctx context.Context, b int64, partial bool) (*ramBlock, error) {
	rb := r.blocks[b]
	if rb != nil && rb.data != nil {
		r.lru.MoveToFront(rb.el)
		return rb, nil
	}
	if err := r.reserve(ctx); err != nil {
		return nil, err
	}
	data := make([]byte, BlockSize)
	if partial && rb == nil {
		start := b * BlockSize
		l := min(BlockSize, r.size-start)
		var err error
		if at, ok := r.ofIndex[b]; ok {
			err = r.opt.Overflow.ReadAt(ctx, data[:l], at)
		} else {
			err = r.base.ReadAt(ctx, data[:l], start)
		}
		if err != nil {
			return nil, err
		}
	}
	if rb == nil {
		rb = &ramBlock{n: b}
		rb.el = r.lru.PushFront(rb)
		r.blocks[b] = rb
	} else {
		r.lru.MoveToFront(rb.el)
	}
	rb.data = data
	r.used += BlockSize
	// The RAM copy supersedes the block's overflow slot, if any; the slot
	// stays the block's, for its next eviction to write in place.
	return rb, nil
}

// reserve makes room for one more block. Called with mu held.
func (r *RAM) reserve(ctx context.Context) error {
	if r.used+BlockSize <= r.opt.Budget {
		return nil
	}
	if r.opt.Overflow == nil {
		return r.full("write cache RAM is full", nil)
	}
	return r.evict(ctx)
}

func (r *RAM) full(msg string, err error) error {
	r.Full.Add(1)
	now := time.Now().UnixNano()
	if last := r.lastLog.Load(); now-last > int64(time.Second) && r.lastLog.CompareAndSwap(last, now) {
		r.opt.Logger.Error(msg+"; writes fail with ENOSPC", "budget", r.opt.Budget, "overflow_used", r.ofEnd, "err", err)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %v", block.ErrNoSpace, msg, err)
	}
	return fmt.Errorf("%w: %s", block.ErrNoSpace, msg)
}

// evict moves up to SegmentBlocks least recently written blocks to the
// overflow device. Blocks that have no slot there yet are appended in one
// sequential segment write; blocks evicted before go back into their own
// slots (runs of neighbouring slots in one write each), so that the
// overflow holds each block once however often it is rewritten, and its
// use is bounded by the distinct blocks written, never by the total. A
// block whose write fails stays in RAM.
func (r *RAM) evict(ctx context.Context) error {
	if r.segment == nil {
		r.segment = make([]byte, SegmentBlocks*BlockSize)
	}
	var fresh, placed []*ramBlock
	for el := r.lru.Back(); el != nil && len(fresh)+len(placed) < SegmentBlocks; el = el.Prev() {
		rb := el.Value.(*ramBlock)
		if rb.data == nil {
			continue
		}
		if _, ok := r.ofIndex[rb.n]; ok {
			placed = append(placed, rb)
		} else {
			fresh = append(fresh, rb)
		}
	}
	if len(fresh)+len(placed) == 0 {
		return r.full("write cache RAM is full of zero blocks", nil)
	}
	moved := 0
	if len(fresh) > 0 {
		// In block order, neighbours evicted together are read back in one.
		slices.SortFunc(fresh, func(a, b *ramBlock) int { return cmp.Compare(a.n, b.n) })
		seg := r.segment[:len(fresh)*BlockSize]
		if r.ofEnd+int64(len(seg)) > r.opt.Overflow.Size() {
			if len(placed) == 0 {
				return r.full("overflow file is full", nil)
			}
			fresh = nil // the rewrites below still make room
		} else {
			for i, rb := range fresh {
				copy(seg[i*BlockSize:], rb.data)
			}
			if err := r.opt.Overflow.WriteAt(ctx, seg, r.ofEnd, 0); err != nil {
				return r.full("overflow write failed", err)
			}
			for i, rb := range fresh {
				r.ofIndex[rb.n] = r.ofEnd + int64(i)*BlockSize
				r.drop(rb)
			}
			r.ofEnd += int64(len(seg))
			r.Segments.Add(1)
			moved += len(fresh)
		}
	}
	// Rewrites, in slot order, neighbouring slots in one write.
	slices.SortFunc(placed, func(a, b *ramBlock) int { return cmp.Compare(r.ofIndex[a.n], r.ofIndex[b.n]) })
	for i := 0; i < len(placed); {
		j := i + 1
		for j < len(placed) && r.ofIndex[placed[j].n] == r.ofIndex[placed[j-1].n]+BlockSize {
			j++
		}
		run := r.segment[:(j-i)*BlockSize]
		for k, rb := range placed[i:j] {
			copy(run[k*BlockSize:], rb.data)
		}
		if err := r.opt.Overflow.WriteAt(ctx, run, r.ofIndex[placed[i].n], 0); err != nil {
			if moved == 0 {
				return r.full("overflow write failed", err)
			}
			break // what moved made room
		}
		for _, rb := range placed[i:j] {
			r.drop(rb)
		}
		r.Rewrites.Add(1)
		moved += j - i
		i = j
	}
	r.Evicted.Add(int64(moved))
	return nil
}

// drop forgets rb's data in RAM once it is in the overflow.
func (r *RAM) drop(rb *ramBlock) {
	r.lru.Remove(rb.el)
	delete(r.blocks, rb.n)
	r.used -= BlockSize
}

// Zero implements block.Device: whole blocks become zero markers that
// take no budget.
func (r *RAM) Zero(ctx context.Context, off, n int64, f block.Flags) error {
	if err := block.CheckWrite(r, off, n); err != nil {
		return err
	}
	end := off + n
	for off < end {
		b, bo := off/BlockSize, off%BlockSize
		l := min(end-off, BlockSize-bo)
		if l < BlockSize && off+l != r.size {
			if err := r.WriteAt(ctx, make([]byte, l), off, 0); err != nil {
				return err
			}
			off += l
			continue
		}
		r.mu.Lock()
		rb := r.blocks[b]
		if rb == nil {
			rb = &ramBlock{n: b}
			rb.el = r.lru.PushFront(rb)
			r.blocks[b] = rb
		} else if rb.data != nil {
			rb.data = nil
			r.used -= BlockSize
		}
		// The zero marker supersedes an overflow slot, which stays the
		// block's for a later write's eviction.
		r.mu.Unlock()
		off += l
	}
	return nil
}

// Trim implements block.Device as Zero.
func (r *RAM) Trim(ctx context.Context, off, n int64, f block.Flags) error {
	if err := block.CheckRange(r, off, n); err != nil {
		return err
	}
	return r.Zero(ctx, off, n, 0)
}

// Flush implements block.Device: the cache is volatile by design.
func (r *RAM) Flush(context.Context) error { return nil }

// Close releases the memory and closes the overflow device.
func (r *RAM) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.blocks, r.ofIndex = nil, nil
	r.lru.Init()
	if r.opt.Overflow != nil {
		return r.opt.Overflow.Close()
	}
	return nil
}
