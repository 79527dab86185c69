package boothttp

import (
	"container/list"
	"sync"

	"github.com/usher-vdi/usher/internal/boot/ext4boot"
)

// bootFiles are the kernel and initramfs of one version.
type bootFiles struct {
	names          ext4boot.Files
	kernel, initrd []byte
}

func (f *bootFiles) size() int64 { return int64(len(f.kernel) + len(f.initrd)) }

// fileCache keeps the files of the versions booted last, within a bound
// of bytes, least recently used first out. Concurrent misses of one
// version read it once. A version larger than the bound is read and
// served, not kept.
type fileCache struct {
	max int64

	mu      sync.Mutex
	used    int64
	lru     *list.List // of *entry, most recent at the front
	entries map[string]*list.Element
	flights map[string]*flight
}

type entry struct {
	key   string
	files *bootFiles
}

type flight struct {
	done  chan struct{}
	files *bootFiles
	err   error
}

func newFileCache(max int64) *fileCache {
	return &fileCache{max: max, lru: list.New(), entries: map[string]*list.Element{}, flights: map[string]*flight{}}
}

func (c *fileCache) get(key string, load func() (*bootFiles, error)) (*bootFiles, error) {
	c.mu.Lock()
	if e, ok := c.entries[key]; ok {
		c.lru.MoveToFront(e)
		c.mu.Unlock()
		return e.Value.(*entry).files, nil
	}
	if f, ok := c.flights[key]; ok {
		c.mu.Unlock()
		<-f.done
		return f.files, f.err
	}
	f := &flight{done: make(chan struct{})}
	c.flights[key] = f
	c.mu.Unlock()

	f.files, f.err = load()

	c.mu.Lock()
	delete(c.flights, key)
	if f.err == nil && f.files.size() <= c.max {
		c.entries[key] = c.lru.PushFront(&entry{key, f.files})
		c.used += f.files.size()
		for c.used > c.max {
			last := c.lru.Back()
			e := last.Value.(*entry)
			c.lru.Remove(last)
			delete(c.entries, e.key)
			c.used -= e.files.size()
		}
	}
	c.mu.Unlock()
	close(f.done)
	return f.files, f.err
}
