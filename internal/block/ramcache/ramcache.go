package ramcache

import (
	"container/list"
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/usher-vdi/usher/internal/block"
)

// DefaultBlockSize is the unit the cache reads and keeps.
const DefaultBlockSize = 64 << 10

const shards = 64

type key struct {
	dev   uint64
	block int64
}

type entry struct {
	key  key
	data []byte
}

type shard struct {
	mu       sync.Mutex
	items    map[key]*list.Element
	inflight map[key]*flight // misses being read
	lru      list.List       // front = most recent
	bytes    int64
}

// flight is one read of a missing block that concurrent readers of the
// same block wait for instead of reading it again.
type flight struct {
	done chan struct{}
	data []byte
	err  error
}

// Cache is a RAM cache of fixed-size blocks of any number of read-only
// devices, bounded in bytes.
type Cache struct {
	blockSize int64
	capacity  int64
	// bytes is what all shards hold together. A shard that must make room
	// evicts its own least recently used blocks: one budget for the whole
	// cache, so that hashing cannot leave one shard short while another
	// has room, and a cache the size of an image holds all of it.
	bytes  atomic.Int64
	seed   maphash.Seed
	shards [shards]shard
	nextID atomic.Uint64

	// Hits and Misses count block lookups; Shared counts the misses
	// that waited for another reader's read of the same block rather
	// than reading it again.
	Hits, Misses, Shared atomic.Int64
}

// New returns a cache of at most capacity bytes of blockSize blocks
// (DefaultBlockSize when 0).
func New(capacity, blockSize int64) *Cache {
	if blockSize <= 0 {
		blockSize = DefaultBlockSize
	}
	c := &Cache{blockSize: blockSize, capacity: capacity, seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].items = make(map[key]*list.Element)
		c.shards[i].inflight = make(map[key]*flight)
	}
	return c
}

// Bytes is the memory the cached blocks hold.
func (c *Cache) Bytes() int64 { return c.bytes.Load() }

func (c *Cache) shard(k key) *shard {
	h := maphash.Comparable(c.seed, k)
	return &c.shards[h%shards]
}

// get copies the cached part of block k starting at o into p.
func (c *Cache) get(k key, p []byte, o int64) bool {
	s := c.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.items[k]
	if !ok {
		return false
	}
	s.lru.MoveToFront(el)
	copy(p, el.Value.(*entry).data[o:])
	return true
}

// putLocked keeps data as block k, evicting the shard's least recently
// used blocks while the whole cache would exceed its capacity; when the
// shard has nothing left to evict (the others hold the budget), the block
// is not kept. Called with s.mu held.
func (c *Cache) putLocked(s *shard, k key, data []byte) {
	n := int64(len(data))
	if c.capacity < n {
		return
	}
	if _, ok := s.items[k]; ok {
		return
	}
	for !c.reserve(n) {
		old := s.lru.Back()
		if old == nil {
			return
		}
		e := old.Value.(*entry)
		s.lru.Remove(old)
		delete(s.items, e.key)
		s.bytes -= int64(len(e.data))
		c.bytes.Add(-int64(len(e.data)))
	}
	s.items[k] = s.lru.PushFront(&entry{key: k, data: data})
	s.bytes += n
}

// reserve takes n bytes of the budget if they fit: concurrent puts in
// other shards never take the cache past its capacity together.
func (c *Cache) reserve(n int64) bool {
	for {
		cur := c.bytes.Load()
		if cur+n > c.capacity {
			return false
		}
		if c.bytes.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// Device is a read-only device whose reads go through the cache. It
// refuses writes (block.ErrReadOnly) whatever the device under it
// takes: a write there would leave the cache stale.
type Device struct {
	block.Device
	c  *Cache
	id uint64
}

var (
	_ block.Device      = (*Device)(nil)
	_ block.Extenter    = (*Device)(nil)
	_ block.MemReader   = (*Device)(nil)
	_ block.SliceReader = (*Device)(nil)
)

// Wrap returns a cached, read-only view of d, which must not change
// while cached (a read-only image version). Closing the result closes d.
func (c *Cache) Wrap(d block.Device) *Device {
	return &Device{Device: block.ReadOnly(d), c: c, id: c.nextID.Add(1)}
}

// ReadAt implements block.Device: whole blocks are read from the device
// on a miss and kept.
func (d *Device) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := block.CheckRange(d, off, int64(len(p))); err != nil {
		return err
	}
	bs := d.c.blockSize
	for len(p) > 0 {
		b, o := off/bs, off%bs
		n := min(int64(len(p)), bs-o)
		k := key{d.id, b}
		if d.c.get(k, p[:n], o) {
			d.c.Hits.Add(1)
		} else {
			data, err := d.fill(ctx, k)
			if err != nil {
				return err
			}
			copy(p[:n], data[o:])
		}
		p, off = p[n:], off+n
	}
	return nil
}

// fill returns block k after a miss: read from the device and kept, or
// read by a concurrent reader that missed first (a singleflight, so a
// boot storm of targets reads each block of the image once). Cached
// data is never modified, so it is copied from without the lock.
func (d *Device) fill(ctx context.Context, k key) ([]byte, error) {
	s := d.c.shard(k)
	s.mu.Lock()
	if el, ok := s.items[k]; ok { // filled since get looked
		s.lru.MoveToFront(el)
		s.mu.Unlock()
		d.c.Hits.Add(1)
		return el.Value.(*entry).data, nil
	}
	d.c.Misses.Add(1)
	if f := s.inflight[k]; f != nil {
		s.mu.Unlock()
		d.c.Shared.Add(1)
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if f.err == nil {
			return f.data, nil
		}
		// The first reader failed (its context may have ended): this
		// one reads for itself.
		return d.read(ctx, k)
	}
	f := &flight{done: make(chan struct{})}
	s.inflight[k] = f
	s.mu.Unlock()
	f.data, f.err = d.read(ctx, k)
	s.mu.Lock()
	delete(s.inflight, k)
	if f.err == nil {
		d.c.putLocked(s, k, f.data)
	}
	s.mu.Unlock()
	close(f.done)
	return f.data, f.err
}

// read reads block k from the device.
func (d *Device) read(ctx context.Context, k key) ([]byte, error) {
	start := k.block * d.c.blockSize
	data := make([]byte, min(d.c.blockSize, d.Size()-start))
	if err := d.Device.ReadAt(ctx, data, start); err != nil {
		return nil, err
	}
	return data, nil
}

// TryReadAt implements block.MemReader: a read within one cached block
// is served from memory.
func (d *Device) TryReadAt(p []byte, off int64) bool {
	bs := d.c.blockSize
	if off < 0 || int64(len(p)) > d.Size()-off || off/bs != (off+int64(len(p))-1)/bs || len(p) == 0 {
		return false
	}
	if !d.c.get(key{d.id, off / bs}, p, off%bs) {
		return false
	}
	d.c.Hits.Add(1)
	return true
}

// TrySlices implements block.SliceReader: cached blocks are never
// modified (a refill makes a new one), so they can be sent as they are.
func (d *Device) TrySlices(off, n int64, dst [][]byte) ([][]byte, bool) {
	bs := d.c.blockSize
	if off < 0 || n <= 0 || n > d.Size()-off {
		return dst, false
	}
	hits := int64(0)
	for n > 0 {
		b, o := off/bs, off%bs
		l := min(n, bs-o)
		k := key{d.id, b}
		s := d.c.shard(k)
		s.mu.Lock()
		el, ok := s.items[k]
		if ok {
			s.lru.MoveToFront(el)
		}
		s.mu.Unlock()
		if !ok {
			return dst, false
		}
		dst = append(dst, el.Value.(*entry).data[o:o+l])
		hits++
		off, n = off+l, n-l
	}
	d.c.Hits.Add(hits)
	return dst, true
}

// Extents implements block.Extenter.
func (d *Device) Extents(ctx context.Context, off, n int64, dst []block.Extent) ([]block.Extent, error) {
	return block.Extents(ctx, d.Device, off, n, dst)
}
