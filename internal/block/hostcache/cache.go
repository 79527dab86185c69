package hostcache

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/usher-vdi/usher/internal/atomicfile"
)

// DefaultBlockSize is the unit a Cache fetches and keeps.
const DefaultBlockSize = 64 << 10

// Files of a cache directory.
const (
	BlocksFile = "blocks"
	IndexFile  = "index"
	LockFile   = "lock"
)

// ErrLocked is returned by Open when another process holds the directory.
var ErrLocked = errors.New("hostcache: the cache directory is in use by another process")

// Key names a block's content: a digest, or PositionKey's.
type Key [32]byte

// PositionKey is the key of block index of image, for an upstream that
// offers no digests. image must name the content: a new version of an
// image needs a new name, or its old blocks would be served.
func PositionKey(image string, blockSize int, index int64) Key {
	h := sha256.New()
	fmt.Fprintf(h, "usher-hostcache-position\x00%s\x00%d\x00%d", image, blockSize, index)
	var k Key
	h.Sum(k[:0])
	return k
}

// Options size a Cache.
type Options struct {
	// Size is how many bytes of blocks the cache holds, rounded down to
	// whole blocks (at least one).
	Size int64
	// BlockSize is the unit fetched and kept (default DefaultBlockSize); a
	// directory keeps the block size it was made with.
	BlockSize int
	Logger    *slog.Logger
}

// Stats are a Cache's counters since Open.
type Stats struct {
	// Hits were served from the cache; Misses were not (Shared of them
	// waited for another reader's fetch of the same key instead of
	// fetching it again).
	Hits, Misses, Shared int64
	// Fetches and FetchedBytes are the reads from upstream.
	Fetches, FetchedBytes int64
	// Evictions count blocks dropped to make room; Corrupt, blocks whose
	// bytes did not match their record (fetched again); WriteErrors,
	// blocks that could not be kept (the read still succeeded).
	Evictions, Corrupt, WriteErrors int64
	// Used and Slots are the blocks held and the room for them.
	Used, Slots int
	// Recovered is how many blocks the index held at Open.
	Recovered int
}

type slot struct {
	key    Key
	length uint32
	crc    uint32
	state  uint8 // empty, valid or filling
	ref    bool  // read since the hand passed
	// checked: the slot's bytes were written by this process or matched
	// their CRC since Open, so a part of them may be read alone.
	checked bool
	pins    int32 // reads under way
}

const (
	empty uint8 = iota
	valid
	filling
)

// Cache is a persistent cache of blocks in a directory. It is safe for
// concurrent use.
type Cache struct {
	dir       string
	blockSize int
	log       *slog.Logger
	lock      *os.File
	blocks    *os.File
	index     *os.File

	mu      sync.Mutex
	slots   []slot
	byKey   map[Key]int
	hand    int
	free    []int // empty slots, taken before the hand evicts
	records int   // in the index, for compaction
	flights map[Key]*flight
	bufs    sync.Pool // *[]byte of blockSize, for reads of a part of a block
	closed  bool
	warned  bool // a write error was logged

	hits, misses, shared, fetches, fetched, evictions, corrupt, writeErrs atomic.Int64
	recovered                                                             int
}

// flight is a fetch of a missing key that concurrent readers wait for.
type flight struct {
	done chan struct{}
	data []byte
	err  error
}

// Open opens the cache in dir, creating it when it does not exist, and
// replays its index. It fails with ErrLocked when another process holds
// dir, and when dir's block size is not opts.BlockSize.
func Open(dir string, opts Options) (*Cache, error) {
	bs := opts.BlockSize
	if bs == 0 {
		bs = DefaultBlockSize
	}
	if bs < 512 || bs&(bs-1) != 0 {
		return nil, fmt.Errorf("hostcache: block size %d is not a power of two of at least 512", bs)
	}
	n := opts.Size / int64(bs)
	if n < 1 || n > 1<<31-1 {
		return nil, fmt.Errorf("hostcache: a size of %d bytes does not hold between one and 2^31 blocks of %d bytes", opts.Size, bs)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("hostcache: %w", err)
	}
	c := &Cache{dir: dir, blockSize: bs, log: opts.Logger, byKey: map[Key]int{}, flights: map[Key]*flight{}}
	c.bufs.New = func() any { b := make([]byte, bs); return &b }
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	ok := false
	defer func() {
		if !ok {
			c.closeFiles()
		}
	}()
	var err error
	if c.lock, err = os.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return nil, fmt.Errorf("hostcache: %w", err)
	}
	if err := syscall.Flock(int(c.lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, fmt.Errorf("hostcache: lock %s: %w", dir, err)
	}
	if c.blocks, err = os.OpenFile(filepath.Join(dir, BlocksFile), os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return nil, fmt.Errorf("hostcache: %w", err)
	}
	if err := c.blocks.Truncate(n * int64(bs)); err != nil {
		return nil, fmt.Errorf("hostcache: size the blocks file: %w", err)
	}
	c.slots = make([]slot, n)
	if err := c.replay(); err != nil {
		return nil, err
	}
	c.freeSlots()
	ok = true
	return c, nil
}

// The index: a header, then records.
const (
	magic      = "USHERHC1"
	headerSize = 16 // magic, block size (uint32), CRC-32C of both
	recordSize = 48 // slot (uint32), key, length (uint32), data CRC, record CRC, padding
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func header(bs int) []byte {
	b := make([]byte, headerSize)
	copy(b, magic)
	binary.LittleEndian.PutUint32(b[8:], uint32(bs))
	binary.LittleEndian.PutUint32(b[12:], crc32.Checksum(b[:12], castagnoli))
	return b
}

func record(i int, s slot) []byte {
	b := make([]byte, recordSize)
	binary.LittleEndian.PutUint32(b[0:], uint32(i))
	copy(b[4:36], s.key[:])
	binary.LittleEndian.PutUint32(b[36:], s.length)
	binary.LittleEndian.PutUint32(b[40:], s.crc)
	binary.LittleEndian.PutUint32(b[44:], crc32.Checksum(b[:44], castagnoli))
	return b
}

// replay reads the index into the slots, keeping each slot's last record
// and dropping a torn tail, then writes it again compacted.
func (c *Cache) replay() error {
	path := filepath.Join(c.dir, IndexFile)
	f, err := os.Open(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return c.compact()
	case err != nil:
		return fmt.Errorf("hostcache: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	h := make([]byte, headerSize)
	if _, err := io.ReadFull(r, h); err != nil || string(h[:8]) != magic || crc32.Checksum(h[:12], castagnoli) != binary.LittleEndian.Uint32(h[12:]) {
		c.log.Warn("host cache index unreadable; starting empty", "path", path, "err", err)
		return c.compact()
	}
	if bs := int(binary.LittleEndian.Uint32(h[8:])); bs != c.blockSize {
		return fmt.Errorf("hostcache: %s holds blocks of %d bytes, not %d: use that block size, or another directory", c.dir, bs, c.blockSize)
	}
	rec := make([]byte, recordSize)
	for {
		if _, err := io.ReadFull(r, rec); err != nil {
			break // the end, or a torn last record
		}
		if crc32.Checksum(rec[:44], castagnoli) != binary.LittleEndian.Uint32(rec[44:]) {
			c.log.Warn("host cache index: a damaged record; the rest is dropped", "path", path)
			break
		}
		i := int(binary.LittleEndian.Uint32(rec[0:]))
		if i >= len(c.slots) {
			continue // the cache was made smaller
		}
		var k Key
		copy(k[:], rec[4:36])
		length := binary.LittleEndian.Uint32(rec[36:])
		if old := c.slots[i]; old.state == valid && c.byKey[old.key] == i {
			delete(c.byKey, old.key)
		}
		if length == 0 || int(length) > c.blockSize {
			c.slots[i] = slot{} // a freed slot
			continue
		}
		if j, ok := c.byKey[k]; ok && j != i {
			c.slots[j] = slot{} // a key lives in its last slot only
		}
		c.slots[i] = slot{key: k, length: length, crc: binary.LittleEndian.Uint32(rec[40:]), state: valid}
		c.byKey[k] = i
	}
	c.recovered = len(c.byKey)
	return c.compact()
}

// freeSlots lists the empty slots, the last first so that they are taken
// in order; the caller is Open.
func (c *Cache) freeSlots() {
	c.free = c.free[:0]
	for i := len(c.slots) - 1; i >= 0; i-- {
		if c.slots[i].state == empty {
			c.free = append(c.free, i)
		}
	}
}

// compact writes the index afresh from the slots and makes it the index;
// the caller holds mu or is Open.
func (c *Cache) compact() error {
	path := filepath.Join(c.dir, IndexFile)
	n := 0
	// The blocks it names were written before: once durable, it names
	// only blocks that are.
	err := atomicfile.Write(path, 0o600, func(w io.Writer) error {
		if _, err := w.Write(header(c.blockSize)); err != nil {
			return err
		}
		for i, s := range c.slots {
			if s.state == valid {
				if _, err := w.Write(record(i, s)); err != nil {
					return err
				}
				n++
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("hostcache: index: %w", err)
	}
	if c.index != nil {
		c.index.Close()
	}
	if c.index, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return fmt.Errorf("hostcache: %w", err)
	}
	c.records = n
	return nil
}

// BlockSize is the unit the cache fetches and keeps.
func (c *Cache) BlockSize() int { return c.blockSize }

// Get fills dst (at most BlockSize bytes) with the block of key: from the
// cache when it holds the key and its bytes match their record, else
// from fetch, which must fill all of its argument; concurrent Gets of a
// key share one fetch. A fetched block is kept, evicting another when
// the cache is full; a block that cannot be kept is still returned. It
// reports whether dst came from the cache.
func (c *Cache) Get(ctx context.Context, key Key, dst []byte, fetch func(ctx context.Context, dst []byte) error) (bool, error) {
	if len(dst) == 0 || len(dst) > c.blockSize {
		return false, fmt.Errorf("hostcache: a read of %d bytes; blocks are %d", len(dst), c.blockSize)
	}
	for {
		if c.read(key, dst) {
			c.hits.Add(1)
			return true, nil
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return false, errors.New("hostcache: closed")
		}
		if f := c.flights[key]; f != nil {
			c.mu.Unlock()
			c.misses.Add(1)
			c.shared.Add(1)
			select {
			case <-f.done:
			case <-ctx.Done():
				return false, ctx.Err()
			}
			if f.err != nil && ctx.Err() == nil && (errors.Is(f.err, context.Canceled) || errors.Is(f.err, context.DeadlineExceeded)) {
				continue // the fetcher gave up; this reader has not
			}
			if f.err == nil && len(f.data) != len(dst) {
				continue // another length of the same key: fetch it
			}
			if f.err != nil {
				return false, f.err
			}
			copy(dst, f.data)
			return false, nil
		}
		f := &flight{done: make(chan struct{})}
		c.flights[key] = f
		c.mu.Unlock()
		c.misses.Add(1)
		f.err = fetch(ctx, dst)
		if f.err == nil {
			c.fetches.Add(1)
			c.fetched.Add(int64(len(dst)))
			// The waiters' copy: dst is the caller's once Get returns.
			f.data = append([]byte(nil), dst...)
			c.keep(key, dst)
		}
		c.mu.Lock()
		delete(c.flights, key)
		c.mu.Unlock()
		close(f.done)
		return false, f.err
	}
}

// read serves key from its slot into dst when the cache holds it with
// len(dst) bytes and they match their record.
func (c *Cache) read(key Key, dst []byte) bool {
	c.mu.Lock()
	i, ok := c.byKey[key]
	if !ok || c.slots[i].state != valid || int(c.slots[i].length) != len(dst) {
		c.mu.Unlock()
		return false
	}
	s := &c.slots[i]
	s.pins++
	s.ref = true
	want := s.crc
	c.mu.Unlock()
	_, err := c.blocks.ReadAt(dst, int64(i)*int64(c.blockSize))
	good := err == nil && crc32.Checksum(dst, castagnoli) == want
	c.mu.Lock()
	s.pins--
	if good && s.state == valid && s.key == key {
		s.checked = true
	}
	if !good && s.state == valid && s.key == key {
		// Torn by a crash, or damaged on disk: never served; dropped,
		// and fetched again by the caller.
		s.state = empty
		c.free = append(c.free, i)
		delete(c.byKey, key)
		c.corrupt.Add(1)
		c.log.Warn("host cache block does not match its record; fetching it again", "slot", i, "err", err)
	}
	c.mu.Unlock()
	return good
}

// ReadPart fills dst with the bytes at off of key's block, which must be
// length bytes long, when the cache holds it and has checked it whole
// since Open (it wrote it, or a Get read it and it matched its CRC): a
// small read of a large block then costs a small read of the disk. It
// reports false, reading nothing, otherwise; the caller then Gets the
// whole block.
func (c *Cache) ReadPart(key Key, length int, dst []byte, off int) bool {
	c.mu.Lock()
	i, ok := c.byKey[key]
	if !ok || off < 0 || off+len(dst) > length {
		c.mu.Unlock()
		return false
	}
	s := &c.slots[i]
	if s.state != valid || !s.checked || int(s.length) != length {
		c.mu.Unlock()
		return false
	}
	s.pins++
	s.ref = true
	c.mu.Unlock()
	_, err := c.blocks.ReadAt(dst, int64(i)*int64(c.blockSize)+int64(off))
	c.mu.Lock()
	s.pins--
	c.mu.Unlock()
	if err != nil {
		return false
	}
	c.hits.Add(1)
	return true
}

// keep writes a fetched block to a slot and commits it.
func (c *Cache) keep(key Key, data []byte) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if _, ok := c.byKey[key]; ok {
		c.mu.Unlock()
		return
	}
	i, ok := c.victim()
	if !ok {
		c.mu.Unlock()
		return // every slot is being read or filled: serve through
	}
	s := &c.slots[i]
	if s.state == valid {
		delete(c.byKey, s.key)
		c.evictions.Add(1)
	}
	*s = slot{key: key, length: uint32(len(data)), crc: crc32.Checksum(data, castagnoli), state: filling}
	c.mu.Unlock()

	_, err := c.blocks.WriteAt(data, int64(i)*int64(c.blockSize))
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && !c.closed {
		_, err = c.index.Write(record(i, *s))
	}
	if err != nil || c.closed {
		s.state = empty
		c.free = append(c.free, i)
		if err != nil {
			c.writeErrs.Add(1)
			if !c.warned {
				c.warned = true
				c.log.Error("host cache cannot keep blocks; reads go on from upstream", "dir", c.dir, "err", err)
			}
		}
		return
	}
	s.state = valid
	s.checked = true
	c.byKey[key] = i
	c.records++
	if c.records > 4*len(c.slots)+1024 {
		if err := c.compact(); err != nil {
			c.log.Error("host cache index compaction failed", "err", err)
		}
	}
}

// victim returns a slot to fill: an empty one, or by CLOCK the first
// valid one not read since the hand last passed it. Slots being read or
// filled are passed over. The caller holds mu.
func (c *Cache) victim() (int, bool) {
	for len(c.free) > 0 {
		i := c.free[len(c.free)-1]
		c.free = c.free[:len(c.free)-1]
		if s := c.slots[i]; s.state == empty && s.pins == 0 {
			return i, true
		}
	}
	n := len(c.slots)
	for range 2*n + 1 {
		i := c.hand
		c.hand = (c.hand + 1) % n
		s := &c.slots[i]
		switch {
		case s.state == filling || s.pins > 0:
		case s.state == empty:
			return i, true
		case s.ref:
			s.ref = false
		default:
			return i, true
		}
	}
	return 0, false
}

// Stats returns the counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	used := len(c.byKey)
	c.mu.Unlock()
	return Stats{Hits: c.hits.Load(), Misses: c.misses.Load(), Shared: c.shared.Load(), Fetches: c.fetches.Load(),
		FetchedBytes: c.fetched.Load(), Evictions: c.evictions.Load(), Corrupt: c.corrupt.Load(), WriteErrors: c.writeErrs.Load(),
		Used: used, Slots: len(c.slots), Recovered: c.recovered}
}

// Close compacts the index and releases the directory.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	err := c.compact()
	c.mu.Unlock()
	return errors.Join(err, c.closeFiles())
}

func (c *Cache) closeFiles() error {
	var errs []error
	for _, f := range []*os.File{c.index, c.blocks, c.lock} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}

// String names the cache for logs.
func (c *Cache) String() string {
	return "hostcache " + c.dir + " (" + strconv.Itoa(len(c.slots)) + " blocks of " + strconv.Itoa(c.blockSize) + " bytes)"
}
