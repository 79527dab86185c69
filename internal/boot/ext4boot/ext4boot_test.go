package ext4boot_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/boot/ext4boot"
	"github.com/usher-vdi/usher/internal/boot/ext4boot/ext4test"
)

func TestFind(t *testing.T) {
	for _, tc := range []struct {
		name           string
		layout         ext4test.Layout
		kernel, initrd string
		partition      int
	}{
		{"relative links", ext4test.Layout{}, "boot/vmlinuz-6.1.0-x", "boot/initrd.img-6.1.0-x", 0},
		{"absolute links", ext4test.Layout{Links: "absolute"}, "boot/vmlinuz-6.1.0-x", "boot/initrd.img-6.1.0-x", 0},
		{"newest without links", ext4test.Layout{Links: "none", Versions: []string{"6.1.0-10-amd64", "6.1.0-9-amd64"}}, "boot/vmlinuz-6.1.0-10-amd64", "boot/initrd.img-6.1.0-10-amd64", 0},
		{"partitioned", ext4test.Layout{Partitioned: true}, "boot/vmlinuz-6.1.0-x", "boot/initrd.img-6.1.0-x", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := ext4test.Build(t, t.TempDir(), tc.layout)
			dev, err := block.OpenFile(img.Path, true)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			fs, err := ext4boot.Open(t.Context(), dev)
			if err != nil {
				t.Fatal(err)
			}
			files, err := fs.Find()
			if err != nil {
				t.Fatal(err)
			}
			if files.Kernel != tc.kernel || files.Initrd != tc.initrd || files.Partition != tc.partition {
				t.Fatalf("Find = %+v, want %s, %s in partition %d", files, tc.kernel, tc.initrd, tc.partition)
			}
			k, err := fs.ReadFile(files.Kernel)
			if err != nil {
				t.Fatal(err)
			}
			i, err := fs.ReadFile(files.Initrd)
			if err != nil {
				t.Fatal(err)
			}
			if tc.name != "newest without links" && (!bytes.Equal(k, img.Kernel) || !bytes.Equal(i, img.Initrd)) {
				t.Fatalf("kernel %d bytes, initrd %d bytes: not the files in the image (%d, %d)", len(k), len(i), len(img.Kernel), len(img.Initrd))
			}
		})
	}
}

func TestNoFilesystem(t *testing.T) {
	p := filepath.Join(t.TempDir(), "blank.raw")
	if err := os.WriteFile(p, make([]byte, 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	dev, err := block.OpenFile(p, true)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if _, err := ext4boot.Open(t.Context(), dev); !errors.Is(err, ext4boot.ErrNotFound) {
		t.Fatalf("Open of a blank disk = %v, want ErrNotFound", err)
	}
}

// BenchmarkReadBootFiles reads a Debian-sized kernel (8 MiB) and
// initramfs (40 MiB) out of an ext4 image through a block device, as the
// boot server does for each version it serves first.
func BenchmarkReadBootFiles(b *testing.B) {
	img := ext4test.Build(b, b.TempDir(), ext4test.Layout{KernelSize: 8 << 20, InitrdSize: 40 << 20})
	dev, err := block.OpenFile(img.Path, true)
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	b.SetBytes(int64(len(img.Kernel) + len(img.Initrd)))
	for b.Loop() {
		fs, err := ext4boot.Open(b.Context(), dev)
		if err != nil {
			b.Fatal(err)
		}
		files, err := fs.Find()
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range []string{files.Kernel, files.Initrd} {
			if _, err := fs.ReadFile(p); err != nil {
				b.Fatal(err)
			}
		}
	}
}
