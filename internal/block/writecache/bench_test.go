package writecache_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/writecache"
)

// BenchmarkOverlayWrite4K writes random 4 KiB blocks into a sparse
// overlay over a 256 MiB base, through WriteAt and through TryWriteAt
// (the NBD server's inline path).
func BenchmarkOverlayWrite4K(b *testing.B) {
	const size = 256 << 20
	for _, bc := range []struct {
		name  string
		write func(o *writecache.Overlay, p []byte, off int64) error
	}{
		{"WriteAt", func(o *writecache.Overlay, p []byte, off int64) error {
			return o.WriteAt(context.Background(), p, off, 0)
		}},
		{"TryWriteAt", func(o *writecache.Overlay, p []byte, off int64) error {
			if !o.TryWriteAt(p, off) {
				b.Fatal("TryWriteAt refused a whole block")
			}
			return nil
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			o, err := writecache.OpenOverlay(readOnlyBase(size), filepath.Join(b.TempDir(), "ov"), false)
			if err != nil {
				b.Fatal(err)
			}
			defer o.Close()
			p := make([]byte, 4096)
			r := rand.New(rand.NewPCG(1, 1))
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				if err := bc.write(o, p, r.Int64N(size/4096)*4096); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRAMWrite4K writes random 4 KiB blocks into a RAM write cache
// whose budget holds them all.
func BenchmarkRAMWrite4K(b *testing.B) {
	const size = 256 << 20
	c := writecache.NewRAM(readOnlyBase(size), writecache.RAMOptions{Budget: size})
	defer c.Close()
	p := make([]byte, 4096)
	r := rand.New(rand.NewPCG(1, 1))
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if err := c.WriteAt(context.Background(), p, r.Int64N(size/4096)*4096, 0); err != nil {
			b.Fatal(err)
		}
	}
}

var _ block.InlineWriter = (*writecache.RAM)(nil)
