package imageexport_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/blocktest"
	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/block/imageexport"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/ramcache"
)

// storeWith returns a store holding image "img" with content as its
// version 0 (production) and, when maintenance is set, a version 1 in
// maintenance over it.
func storeWith(t *testing.T, content []byte, maintenance bool) *image.Store {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.raw")
	must(t, os.WriteFile(src, content, 0o644))
	st, err := image.Create(filepath.Join(dir, "store"))
	must(t, err)
	_, err = st.Import(ctx, "img", src)
	must(t, err)
	if maintenance {
		_, err = st.NewVersion(ctx, "img", "")
		must(t, err)
	}
	return st
}

// open opens export name of e for one connection; closing the device
// closes e too.
func open(t *testing.T, e *imageexport.Images, name string) block.Device {
	t.Helper()
	d, _, err := e.Open(context.Background(), name, t.Name())
	must(t, err)
	return closeBoth{d, e}
}

type closeBoth struct {
	block.Device
	e *imageexport.Images
}

func (c closeBoth) Unwrap() block.Device { return c.Device }

func (c closeBoth) Close() error {
	err := c.Device.Close()
	if cerr := c.e.Close(); err == nil {
		err = cerr
	}
	return err
}

func TestConformance(t *testing.T) {
	t.Run("Shared", func(t *testing.T) {
		blocktest.RunReader(t, func(t *testing.T, content []byte) block.Device {
			var reg meter.Registry
			e := &imageexport.Images{Store: storeWith(t, content, false), Cache: ramcache.New(64<<20, 0), Meters: &reg}
			return open(t, e, "img")
		})
		e := &imageexport.Images{Store: storeWith(t, blocktest.Content(), false), Cache: ramcache.New(64<<20, 0)}
		d := open(t, e, "img@0")
		defer d.Close()
		blocktest.RunReadOnly(t, d)
		if _, ok := block.As[block.SliceReader](d); !ok {
			t.Fatal("a shared export lost the RAM cache's SliceReader")
		}
	})
	t.Run("ServerDiskWriteCache", func(t *testing.T) {
		blocktest.Run(t, func(t *testing.T) block.Device {
			e := &imageexport.Images{Store: storeWith(t, make([]byte, blocktest.Size), false), Cache: ramcache.New(64<<20, 0), WriteCacheDir: t.TempDir()}
			return open(t, e, "img")
		})
	})
	t.Run("Private", func(t *testing.T) {
		blocktest.Run(t, func(t *testing.T) block.Device {
			e := &imageexport.Images{Store: storeWith(t, make([]byte, blocktest.Size), true), AllowAnonymousWrites: true}
			return open(t, e, "img@1")
		})
		e := &imageexport.Images{Store: storeWith(t, make([]byte, blocktest.Size), true), AllowAnonymousWrites: true}
		d := open(t, e, "img@1")
		defer d.Close()
		if _, ok := block.As[block.InlineWriter](d); !ok {
			t.Fatal("a private export lost the version's InlineWriter")
		}
	})
}

func TestParseName(t *testing.T) {
	for _, tt := range []struct {
		in         string
		img        string
		n          int
		hasVersion bool
		ok         bool
	}{
		{"win11", "win11", 0, false, true},
		{"win11@3", "win11", 3, true, true},
		{"win11@0", "win11", 0, true, true},
		{"win11@x", "win11", 0, true, false},
		{"win11@", "win11", 0, true, false},
		{"", "", 0, false, true},
		{"win11@03", "win11", 0, true, false},
		{"win11@+3", "win11", 0, true, false},
		{"win11@-1", "win11", 0, true, false},
	} {
		img, n, has, err := imageexport.ParseName(tt.in)
		if img != tt.img || n != tt.n || has != tt.hasVersion || (err == nil) != tt.ok {
			t.Errorf("ParseName(%q) = %q, %d, %v, %v; want %q, %d, %v, ok %v", tt.in, img, n, has, err, tt.img, tt.n, tt.hasVersion, tt.ok)
		}
		if tt.ok && tt.hasVersion {
			if got := imageexport.Name(img, n); got != tt.in {
				t.Errorf("Name(%q, %d) = %q, want %q", img, n, got, tt.in)
			}
		}
	}
}
