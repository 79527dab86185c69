package hostexport_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/digest"
	"github.com/usher-vdi/usher/internal/block/hostcache"
	"github.com/usher-vdi/usher/internal/block/hostexport"
	"github.com/usher-vdi/usher/internal/block/nbd"
)

// TestRebootNeverSeesLastBootsWrites: a VM of a freshly started host
// cache with local writes connects, writes (whole blocks and parts of
// blocks, some never read before, so the cache is cold under them),
// disconnects and connects again at once, many times; every new boot
// reads the image as it is, never a byte of an earlier boot's writes.
func TestRebootNeverSeesLastBootsWrites(t *testing.T) {
	img := content(9)
	s := newStream(t, map[string][]byte{"golden": img})
	h := newHost(t, s, hostexport.WritesLocal, map[string]string{"a": "golden"})
	ctx := context.Background()
	dial := func() *nbd.Client {
		t.Helper()
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c, err := nbd.Dial(dctx, "tcp", h.addr, "a")
		must(t, err)
		return c
	}
	const boots = 60
	c := dial()
	for i := range boots {
		// This boot's writes: a whole block, a part of one, one across
		// two blocks, at places that move from boot to boot.
		b := int64(i % (imageSize / digest.BlockSize))
		mark := bytes.Repeat([]byte{byte(0x80 | i)}, digest.BlockSize)
		must(t, c.WriteAt(ctx, mark, b*digest.BlockSize, 0))
		must(t, c.WriteAt(ctx, mark[:100], ((b+7)%30)*digest.BlockSize+1000, 0))
		must(t, c.WriteAt(ctx, mark[:3000], ((b+13)%30)*digest.BlockSize+2500, 0))
		p := make([]byte, digest.BlockSize)
		must(t, c.ReadAt(ctx, p, b*digest.BlockSize))
		if !bytes.Equal(p, mark) {
			t.Fatalf("boot %d does not read its own write back", i)
		}
		must(t, c.Close())
		c = dial()
		got := readAll(t, c)
		if !bytes.Equal(got, img) {
			for off := 0; off < len(img); off += digest.BlockSize {
				end := min(len(img), off+digest.BlockSize)
				if !bytes.Equal(got[off:end], img[off:end]) {
					t.Fatalf("boot %d reads block %d of an earlier boot's writes (%x...)", i+1, off/digest.BlockSize, got[off:off+8])
				}
			}
		}
	}
	c.Close()
}

// TestBootOwnsItsOverlay: a boot's local writes live in a file of its
// own. A late second close of the last boot (a teardown that runs again
// once the next boot has begun) leaves the new boot's writes alone; the
// next boot reads the image as it is; overlays a stopped host left
// behind are removed when it starts.
func TestBootOwnsItsOverlay(t *testing.T) {
	img := content(10)
	s := newStream(t, map[string][]byte{"golden": img})
	c, err := hostcache.Open(t.TempDir(), hostcache.Options{Size: 16 << 20})
	must(t, err)
	t.Cleanup(func() { c.Close() })
	wd := t.TempDir()
	for _, left := range []string{"a.overlay", "a.7.overlay"} {
		must(t, os.WriteFile(filepath.Join(wd, left), []byte("a crashed host's writes"), 0o600))
	}
	x, err := hostexport.New(hostexport.Config{
		Dial:  func(ctx context.Context, exp string) (*nbd.Client, error) { return nbd.Dial(ctx, "tcp", s.addr, exp) },
		Cache: c, VMs: map[string]string{"a": "golden"}, Writes: hostexport.WritesLocal, WritesDir: wd, Resolve: time.Nanosecond,
	})
	must(t, err)
	t.Cleanup(func() { x.Close() })
	overlays := func() []string {
		t.Helper()
		m, err := filepath.Glob(filepath.Join(wd, "*"))
		must(t, err)
		return m
	}
	if got := overlays(); len(got) != 0 {
		t.Fatalf("a starting host kept %v", got)
	}
	ctx := context.Background()
	open := func() block.Device {
		t.Helper()
		d, _, err := x.Open(ctx, "a", "127.0.0.1:1")
		must(t, err)
		return d
	}
	mark := bytes.Repeat([]byte{0xa5}, digest.BlockSize)
	d1 := open()
	must(t, d1.WriteAt(ctx, mark, 0, 0))
	must(t, d1.Close())
	d2 := open()
	must(t, d2.WriteAt(ctx, mark, 2*digest.BlockSize, 0))
	if err := d1.Close(); err != nil {
		t.Errorf("a second close of a boot: %v", err)
	}
	if got := overlays(); len(got) != 1 {
		t.Fatalf("the second boot's overlays after the first boot closed again: %v", got)
	}
	got := readAll(t, d2)
	if !bytes.Equal(got[:digest.BlockSize], img[:digest.BlockSize]) || !bytes.Equal(got[2*digest.BlockSize:3*digest.BlockSize], mark) {
		t.Fatal("the second boot does not read the image with its own write alone")
	}
	must(t, d2.Close())
	d3 := open()
	if !bytes.Equal(readAll(t, d3), img) {
		t.Fatal("the third boot reads an earlier boot's writes")
	}
	must(t, d3.Close())
	if got := overlays(); len(got) != 0 {
		t.Fatalf("overlays left after every boot ended: %v", got)
	}
}
