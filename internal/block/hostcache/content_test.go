package hostcache_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/digest"
	"github.com/usher-vdi/usher/internal/block/hostcache"
)

const bs = digest.BlockSize

// table computes d's digests, not counting the reads.
func table(t *testing.T, d block.Device) *digest.Table {
	t.Helper()
	for {
		switch u := d.(type) {
		case *counting:
			d = u.Device
			continue
		case *lying:
			d = u.counting
			continue
		}
		break
	}
	tab, err := digest.Compute(context.Background(), d, bs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func wrapDigests(t *testing.T, c *hostcache.Cache, up block.Device) *hostcache.Device {
	t.Helper()
	d, err := c.WrapDigests(up, table(t, up))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func readWhole(t *testing.T, d block.Device, want []byte) {
	t.Helper()
	got := make([]byte, d.Size())
	if err := d.ReadAt(context.Background(), got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the bytes read through the cache are not the image's")
	}
}

// TestNewVersionRefetchesOnlyChangedBlocks: version 2 differs from
// version 1 in three blocks; once version 1 is cached, reading all of
// version 2 fetches those three and nothing else.
func TestNewVersionRefetchesOnlyChangedBlocks(t *testing.T) {
	v1 := randomContent(32*bs + 1000) // a short last block
	clear(v1[5*bs : 7*bs])            // two zero blocks: never fetched
	v2 := bytes.Clone(v1)
	for _, b := range []int{1, 9, 32} {
		v2[b*bs] ^= 0xff
	}
	c := open(t, t.TempDir(), 64*bs, bs)
	up1, up2 := upstream(t, v1), upstream(t, v2)
	d1 := wrapDigests(t, c, up1)
	readWhole(t, d1, v1)
	if n := up1.reads.Load(); n != 31 {
		t.Fatalf("version 1 cold: %d upstream reads, want 31 (33 blocks, 2 zero)", n)
	}
	if st := d1.Stats(); st.Zero != 2 || st.Fetches != 31 || st.Misses != 31 {
		t.Fatalf("version 1 stats %+v", st)
	}
	d2 := wrapDigests(t, c, up2)
	readWhole(t, d2, v2)
	if n := up2.reads.Load(); n != 3 {
		t.Fatalf("version 2 after version 1: %d upstream reads, want the 3 changed blocks", n)
	}
	if st := d2.Stats(); st.Hits != 28 || st.Fetches != 3 {
		t.Fatalf("version 2 stats %+v", st)
	}
	// Both versions are still served right, from the cache alone.
	readWhole(t, d1, v1)
	readWhole(t, d2, v2)
	if up1.reads.Load() != 31 || up2.reads.Load() != 3 {
		t.Fatal("a warm read went upstream")
	}
}

// TestImagesShareBlocks: two images that hold the same blocks at other
// positions store and fetch each once.
func TestImagesShareBlocks(t *testing.T) {
	a := randomContent(16 * bs)
	b := make([]byte, 16*bs)
	copy(b, a[8*bs:])        // a's second half first,
	copy(b[8*bs:], a[:4*bs]) // then a quarter,
	b[12*bs] = 1             // and four blocks of its own
	b[13*bs+7] = 2
	b[14*bs] = 3
	b[15*bs+100] = 4
	c := open(t, t.TempDir(), 64*bs, bs)
	upA, upB := upstream(t, a), upstream(t, b)
	readWhole(t, wrapDigests(t, c, upA), a)
	readWhole(t, wrapDigests(t, c, upB), b)
	if n := upB.reads.Load(); n != 4 {
		t.Fatalf("image b: %d upstream reads, want 4 (its own blocks)", n)
	}
	if st := c.Stats(); st.Used != 20 {
		t.Fatalf("%d blocks kept, want 20 distinct", st.Used)
	}
}

// lying serves other bytes than its digests say for one block, once or
// always.
type lying struct {
	*counting
	block  int64
	always bool
	n      atomic.Int64
}

func (l *lying) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := l.counting.ReadAt(ctx, p, off); err != nil {
		return err
	}
	if off == l.block*bs && (l.always || l.n.Add(1) == 1) {
		p[0] ^= 0xff
	}
	return nil
}

// TestDigestMismatch: a block upstream serves wrong once is fetched
// again and served right; one it always serves wrong fails and is never
// kept.
func TestDigestMismatch(t *testing.T) {
	content := randomContent(4 * bs)
	for _, always := range []bool{false, true} {
		c := open(t, t.TempDir(), 16*bs, bs)
		honest := upstream(t, content)
		tab := table(t, honest)
		up := &lying{counting: upstream(t, content), block: 2, always: always}
		d, err := c.WrapDigests(up, tab)
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, bs)
		err = d.ReadAt(context.Background(), p, 2*bs)
		if !always {
			if err != nil || !bytes.Equal(p, content[2*bs:3*bs]) {
				t.Fatalf("a block wrong once: %v", err)
			}
		} else if !errors.Is(err, hostcache.ErrDigestMismatch) {
			t.Fatalf("a block always wrong: %v, want ErrDigestMismatch", err)
		}
		if st := d.Stats(); st.Mismatches == 0 || st.Fetches != 2 {
			t.Fatalf("always=%v: stats %+v", always, st)
		}
		if always && c.Stats().Used != 0 {
			t.Fatal("a block that matched no digest was kept")
		}
	}
}

func TestWrapDigestsRefusesMismatchedTable(t *testing.T) {
	c := open(t, t.TempDir(), 16*bs, 4096)
	up := upstream(t, randomContent(4*bs))
	if _, err := c.WrapDigests(up, table(t, up)); err == nil {
		t.Fatal("digests of 64 KiB blocks were taken by a cache of 4 KiB blocks")
	}
}

// conn is an upstream connection the test can kill.
type conn struct {
	block.Device
	once sync.Once
	done chan struct{}
}

func newConn(d block.Device) *conn { return &conn{Device: d, done: make(chan struct{})} }

func (c *conn) Done() <-chan struct{} { return c.done }
func (c *conn) kill()                 { c.once.Do(func() { close(c.done) }) }
func (c *conn) Close() error          { c.kill(); return nil }
func (c *conn) ReadAt(ctx context.Context, p []byte, off int64) error {
	select {
	case <-c.done:
		return block.ErrClosed
	default:
	}
	return c.Device.ReadAt(ctx, p, off)
}

// TestUpstreamLost: while upstream is gone, cached blocks are served and
// misses fail at once with ErrUpstreamDown; it is dialled again with
// backoff, and misses succeed once it is back.
func TestUpstreamLost(t *testing.T) {
	content := randomContent(8 * bs)
	mem := upstream(t, content)
	first := newConn(mem)
	var dials atomic.Int64
	var reachable atomic.Bool
	u := hostcache.NewUpstream(first, func(context.Context) (hostcache.Conn, error) {
		dials.Add(1)
		if !reachable.Load() {
			return nil, errors.New("connection refused")
		}
		return newConn(mem), nil
	}, hostcache.UpstreamOptions{MinBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond})
	defer u.Close()
	c := open(t, t.TempDir(), 16*bs, bs)
	d, err := c.WrapDigests(u, table(t, mem))
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, bs)
	if err := d.ReadAt(context.Background(), p, 0); err != nil {
		t.Fatal(err)
	}
	first.kill()
	waitFor(t, 5*time.Second, "upstream to be marked down", func() bool { return !u.Up() })
	if err := d.ReadAt(context.Background(), p, 0); err != nil || !bytes.Equal(p, content[:bs]) {
		t.Fatalf("a cached block while upstream is down: %v", err)
	}
	start := time.Now()
	err = d.ReadAt(context.Background(), p, bs)
	if !errors.Is(err, hostcache.ErrUpstreamDown) || time.Since(start) > time.Second {
		t.Fatalf("a miss while upstream is down: %v after %v, want ErrUpstreamDown at once", err, time.Since(start))
	}
	waitFor(t, 5*time.Second, "3 dials of the lost upstream", func() bool { return dials.Load() >= 3 })
	reachable.Store(true)
	waitFor(t, 5*time.Second, "upstream to be up again", u.Up)
	if err := d.ReadAt(context.Background(), p, bs); err != nil || !bytes.Equal(p, content[bs:2*bs]) {
		t.Fatalf("a miss after upstream came back: %v", err)
	}
	if u.Reconnects() != 1 || u.Failures() != 1 || dials.Load() < 3 {
		t.Fatalf("%d reconnects, %d failures, %d dials", u.Reconnects(), u.Failures(), dials.Load())
	}
}

// TestUpstreamReadOutlivesCaller: a reader that goes away does not cut
// off the shared connection.
func TestUpstreamReadOutlivesCaller(t *testing.T) {
	mem := upstream(t, randomContent(4*bs))
	mem.gate = make(chan struct{})
	first := newConn(mem)
	u := hostcache.NewUpstream(first, func(context.Context) (hostcache.Conn, error) { return newConn(mem), nil }, hostcache.UpstreamOptions{})
	defer u.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- u.ReadAt(ctx, make([]byte, 512), 0) }()
	// The caller goes away while its read is at the upstream.
	waitFor(t, 5*time.Second, "the read to reach the upstream", func() bool { return mem.reads.Load() == 1 })
	cancel()
	close(mem.gate)
	if err := <-errc; err != nil {
		t.Fatalf("the read of a caller that went away: %v", err)
	}
	if u.Failures() != 0 {
		t.Fatal("the caller's cancellation gave the connection up")
	}
}
