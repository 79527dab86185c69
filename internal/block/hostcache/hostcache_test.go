package hostcache_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/blocktest"
	"github.com/usher-vdi/usher/internal/block/hostcache"
)

// counting is an upstream that counts its reads.
type counting struct {
	block.Device
	reads atomic.Int64
	gate  chan struct{} // when set, every read waits for it to close
}

func (c *counting) ReadAt(ctx context.Context, p []byte, off int64) error {
	c.reads.Add(1)
	if c.gate != nil {
		<-c.gate
	}
	return c.Device.ReadAt(ctx, p, off)
}

// waitFor polls cond until it holds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(time.Millisecond) // a poll interval
	}
}

func upstream(t *testing.T, content []byte) *counting {
	t.Helper()
	m := block.NewMemory(int64(len(content)))
	if err := m.WriteAt(context.Background(), content, 0, 0); err != nil {
		t.Fatal(err)
	}
	m.SetReadOnly(true)
	return &counting{Device: m}
}

func open(t *testing.T, dir string, size int64, bs int) *hostcache.Cache {
	t.Helper()
	c, err := hostcache.Open(dir, hostcache.Options{Size: size, BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func randomContent(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestConformance(t *testing.T) {
	for _, tt := range []struct {
		name string
		size int64
		bs   int
	}{
		{"Roomy", 64 << 20, 0},
		{"Evicting", 4 * hostcache.DefaultBlockSize, 0},
		{"SmallBlocks", 64 << 20, 4096},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := open(t, t.TempDir(), tt.size, tt.bs)
			n := 0
			blocktest.RunReader(t, func(t *testing.T, content []byte) block.Device {
				n++
				return c.Wrap(upstream(t, content), "image-"+string(rune('a'+n)))
			})
		})
	}
}

// read reads all of d in chunks of random sizes at random offsets and
// compares it with want.
func readAll(t *testing.T, d block.Device, want []byte, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	for range 300 {
		off := r.Int64N(int64(len(want)))
		n := 1 + r.Int64N(min(int64(len(want))-off, 200<<10))
		got := make([]byte, n)
		if err := d.ReadAt(context.Background(), got, off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want[off:off+n]) {
			t.Fatalf("read of %d bytes at %d differs from the image", n, off)
		}
	}
}

// TestPersists: the blocks a first run fetched are served after a
// restart without reading upstream; the index comes back whole.
func TestPersists(t *testing.T) {
	dir := t.TempDir()
	content := randomContent(3<<20 + 1000) // a short last block
	up := upstream(t, content)
	c, err := hostcache.Open(dir, hostcache.Options{Size: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	d := c.Wrap(up, "img@1")
	whole := make([]byte, len(content))
	if err := d.ReadAt(context.Background(), whole, 0); err != nil || !bytes.Equal(whole, content) {
		t.Fatalf("first read: %v", err)
	}
	blocks := int64((len(content) + hostcache.DefaultBlockSize - 1) / hostcache.DefaultBlockSize)
	if got := up.reads.Load(); got != blocks {
		t.Fatalf("%d upstream reads for %d blocks", got, blocks)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := open(t, dir, 8<<20, 0)
	if st := c2.Stats(); st.Recovered != int(blocks) {
		t.Fatalf("%d blocks recovered, want %d", st.Recovered, blocks)
	}
	up2 := upstream(t, content)
	readAll(t, c2.Wrap(up2, "img@1"), content, 1)
	if got := up2.reads.Load(); got != 0 {
		t.Errorf("%d upstream reads after the restart; want none", got)
	}
	// Another name is another content: nothing of img@1 is served for it.
	other := randomContent(1 << 20)
	other[0] ^= 0xff
	readAll(t, c2.Wrap(upstream(t, other), "img@2"), other, 2)
}

// TestSingleFlight: many readers missing one block at once cost one
// upstream read, and each gets the bytes.
func TestSingleFlight(t *testing.T) {
	content := randomContent(1 << 20)
	up := upstream(t, content)
	up.gate = make(chan struct{})
	c := open(t, t.TempDir(), 8<<20, 0)
	d := c.Wrap(up, "img")
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Go(func() {
			p := make([]byte, 4096)
			if err := d.ReadAt(context.Background(), p, 8192); err != nil {
				errs <- err
			} else if !bytes.Equal(p, content[8192:8192+4096]) {
				errs <- errors.New("wrong bytes")
			}
		})
	}
	// Every reader has missed, and waits (one on upstream).
	waitFor(t, 10*time.Second, "64 readers to miss", func() bool { return c.Stats().Misses >= 64 })
	close(up.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := up.reads.Load(); got != 1 {
		t.Errorf("%d upstream reads for 64 concurrent readers of one block; want 1", got)
	}
	if st := c.Stats(); st.Shared != 63 {
		t.Errorf("%d readers shared the fetch; want 63", st.Shared)
	}
}

// TestCorruptBlockIsFetchedAgain: a block whose bytes on disk no longer
// match their record (a torn write, a bad sector) is never served: it is
// counted and fetched again.
func TestCorruptBlockIsFetchedAgain(t *testing.T) {
	dir := t.TempDir()
	content := randomContent(1 << 20)
	c, err := hostcache.Open(dir, hostcache.Options{Size: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, c.Wrap(upstream(t, content), "img"), content, 3)
	c.Close()
	// Damage every block's first bytes on disk, as a crash in the middle
	// of their writes would.
	f, err := os.OpenFile(filepath.Join(dir, hostcache.BlocksFile), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		f.WriteAt([]byte("torn"), int64(i)*hostcache.DefaultBlockSize)
	}
	f.Close()
	c2 := open(t, dir, 4<<20, 0)
	up := upstream(t, content)
	readAll(t, c2.Wrap(up, "img"), content, 4)
	if st := c2.Stats(); st.Corrupt == 0 || up.reads.Load() == 0 {
		t.Errorf("corrupt %d, upstream reads %d: the damaged blocks were not detected and fetched again", st.Corrupt, up.reads.Load())
	}
}

// TestTornIndex: a last index record cut short is dropped, the records
// before it kept.
func TestTornIndex(t *testing.T) {
	dir := t.TempDir()
	content := randomContent(1 << 20)
	c, err := hostcache.Open(dir, hostcache.Options{Size: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, c.Wrap(upstream(t, content), "img"), content, 5)
	held := c.Stats().Used
	c.Close()
	path := filepath.Join(dir, hostcache.IndexFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()-10); err != nil {
		t.Fatal(err)
	}
	c2 := open(t, dir, 4<<20, 0)
	if st := c2.Stats(); st.Recovered != held-1 {
		t.Errorf("%d blocks recovered from an index missing the end of its last record; want %d", st.Recovered, held-1)
	}
	readAll(t, c2.Wrap(upstream(t, content), "img"), content, 6)
}

// TestEviction: a cache smaller than the image keeps serving the right
// bytes, evicting; a block read often stays (CLOCK's second chance).
func TestEviction(t *testing.T) {
	content := randomContent(4 << 20)
	up := upstream(t, content)
	c := open(t, t.TempDir(), 8*hostcache.DefaultBlockSize, 0)
	d := c.Wrap(up, "img")
	hot := make([]byte, 100)
	for i := range 32 {
		if err := d.ReadAt(context.Background(), hot, 0); err != nil {
			t.Fatal(err)
		}
		p := make([]byte, 10)
		if err := d.ReadAt(context.Background(), p, int64(1+i)*hostcache.DefaultBlockSize); err != nil {
			t.Fatal(err)
		}
	}
	st := c.Stats()
	if st.Evictions == 0 || st.Used != 8 {
		t.Errorf("evictions %d, used %d of 8", st.Evictions, st.Used)
	}
	// Block 0 was read between every other read: it was never evicted.
	if st.Hits < 31 {
		t.Errorf("%d hits; the hot block was evicted", st.Hits)
	}
	readAll(t, d, content, 7)
}

// TestSecondProcessRefused: a directory in use is refused with
// ErrLocked; once closed, it opens.
func TestSecondProcessRefused(t *testing.T) {
	dir := t.TempDir()
	c, err := hostcache.Open(dir, hostcache.Options{Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hostcache.Open(dir, hostcache.Options{Size: 1 << 20}); !errors.Is(err, hostcache.ErrLocked) {
		t.Fatalf("second open: %v; want ErrLocked", err)
	}
	c.Close()
	c2, err := hostcache.Open(dir, hostcache.Options{Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	if _, err := hostcache.Open(dir, hostcache.Options{Size: 1 << 20, BlockSize: 4096}); err == nil {
		t.Fatal("a directory of 64 KiB blocks opened with 4 KiB blocks")
	}
}

// TestUnwritableCache: when the cache's disk refuses writes, reads go
// on from upstream with the right bytes, the cached blocks are still
// served, and the failure is counted and logged once.
func TestUnwritableCache(t *testing.T) {
	content := randomContent(16 * 4096)
	var logs bytes.Buffer
	c, err := hostcache.Open(t.TempDir(), hostcache.Options{Size: 64 * 4096, BlockSize: 4096,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	up := upstream(t, content)
	d := c.Wrap(up, "img")
	p := make([]byte, 4*4096)
	if err := d.ReadAt(context.Background(), p, 0); err != nil {
		t.Fatal(err)
	}
	if err := hostcache.BreakWrites(c); err != nil {
		t.Fatal(err)
	}
	readAll(t, d, content, 1)
	readAll(t, d, content, 2)
	st := c.Stats()
	if st.WriteErrors == 0 || st.Used != 4 {
		t.Fatalf("stats %+v: want write errors counted and only the 4 blocks cached before", st)
	}
	if n := strings.Count(logs.String(), "cannot keep blocks"); n != 1 {
		t.Fatalf("the failure was logged %d times, want once:\n%s", n, logs.String())
	}
	before := up.reads.Load()
	if err := d.ReadAt(context.Background(), p, 0); err != nil || !bytes.Equal(p, content[:len(p)]) {
		t.Fatalf("a cached block after the disk failed: %v", err)
	}
	if up.reads.Load() != before {
		t.Fatal("blocks cached before the disk failed were fetched again")
	}
}
