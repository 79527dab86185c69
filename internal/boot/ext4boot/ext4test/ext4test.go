// Package ext4test builds small ext4 disk images that boot nothing but
// look as a Debian system's do to a boot loader: /boot/vmlinuz-VERSION
// and /boot/initrd.img-VERSION (random bytes) and the /vmlinuz and
// /initrd.img links to them, made with mkfs.ext4 -d (e2fsprogs). For
// the tests of the boot server; only tests import it.
package ext4test

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Layout says what an image holds and how.
type Layout struct {
	// Versions are the kernel versions in /boot, oldest first; the links
	// name the last one. Default: one, "6.1.0-x".
	Versions []string
	// Links: "relative" (boot/vmlinuz-V, as Debian makes them), "absolute"
	// (/boot/vmlinuz-V) or "none".
	Links string
	// Partitioned puts the filesystem in the first partition of an MBR
	// disk, at 1 MiB, instead of on the whole disk.
	Partitioned bool
	// KernelSize and InitrdSize are the files' sizes (default 300 KiB
	// and 700 KiB).
	KernelSize, InitrdSize int
}

// Image is a built disk image: its path and the content of the kernel
// and initramfs that the links name (or the newest).
type Image struct {
	Path           string
	Kernel, Initrd []byte
}

// Build makes an image in dir, or skips the test without mkfs.ext4.
func Build(t testing.TB, dir string, l Layout) Image {
	t.Helper()
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		if _, err := os.Stat("/usr/sbin/mkfs.ext4"); err != nil {
			t.Skip("mkfs.ext4 (e2fsprogs) is not installed")
		}
		mkfs = "/usr/sbin/mkfs.ext4"
	}
	if len(l.Versions) == 0 {
		l.Versions = []string{"6.1.0-x"}
	}
	if l.KernelSize == 0 {
		l.KernelSize = 300 << 10
	}
	if l.InitrdSize == 0 {
		l.InitrdSize = 700 << 10
	}
	root := filepath.Join(dir, "root")
	must(t, os.MkdirAll(filepath.Join(root, "boot"), 0o755))
	must(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "etc", "hostname"), []byte("target\n"), 0o644))
	var img Image
	for _, v := range l.Versions {
		img.Kernel, img.Initrd = random(l.KernelSize), random(l.InitrdSize)
		must(t, os.WriteFile(filepath.Join(root, "boot", "vmlinuz-"+v), img.Kernel, 0o644))
		must(t, os.WriteFile(filepath.Join(root, "boot", "initrd.img-"+v), img.Initrd, 0o644))
	}
	last := l.Versions[len(l.Versions)-1]
	switch l.Links {
	case "", "relative":
		must(t, os.Symlink("boot/vmlinuz-"+last, filepath.Join(root, "vmlinuz")))
		must(t, os.Symlink("boot/initrd.img-"+last, filepath.Join(root, "initrd.img")))
	case "absolute":
		must(t, os.Symlink("/boot/vmlinuz-"+last, filepath.Join(root, "vmlinuz")))
		must(t, os.Symlink("/boot/initrd.img-"+last, filepath.Join(root, "initrd.img")))
	}
	img.Path = filepath.Join(dir, "disk.raw")
	size := int64(32 << 20)
	if need := int64(len(l.Versions)*(l.KernelSize+l.InitrdSize))*3/2 + 16<<20; need > size {
		size = need &^ (1<<20 - 1)
	}
	f, err := os.Create(img.Path)
	must(t, err)
	must(t, f.Truncate(size))
	must(t, f.Close())
	args := []string{"-q", "-F", "-d", root}
	if l.Partitioned {
		// One Linux partition from sector 2048 to the end.
		mbr := make([]byte, 512)
		p := mbr[446:462]
		p[4] = 0x83
		putLE32(p[8:], 2048)
		putLE32(p[12:], uint32(size/512-2048))
		mbr[510], mbr[511] = 0x55, 0xAA
		f, err := os.OpenFile(img.Path, os.O_WRONLY, 0)
		must(t, err)
		_, err = f.WriteAt(mbr, 0)
		must(t, err)
		must(t, f.Close())
		args = append(args, "-E", "offset=1048576")
		args = append(args, img.Path, fmt.Sprintf("%dM", size>>20-1))
	} else {
		args = append(args, img.Path)
	}
	if out, err := exec.Command(mkfs, args...).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	return img
}

func putLE32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
