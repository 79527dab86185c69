// Package ext4boot finds and reads the kernel and initramfs of an image
// version in its ext4 filesystem, through the version's block.Device,
// with github.com/diskfs/go-diskfs: the filesystem on the whole disk,
// or else the first MBR or GPT partition that holds one. It follows
// /vmlinuz and /initrd.img (Debian's symbolic links into /boot,
// absolute or relative), then /boot/vmlinuz and /boot/initrd.img, and
// else takes the newest /boot/vmlinuz-VERSION that has an
// /boot/initrd.img-VERSION.
//
// It is the boot server's adapter of go-diskfs, which no other package
// imports; it imports block and boot.
package ext4boot

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path"
	"strings"
	"time"

	"github.com/diskfs/go-diskfs/backend"
	"github.com/diskfs/go-diskfs/filesystem/ext4"
	"github.com/diskfs/go-diskfs/partition"

	"github.com/usher-vdi/usher/internal/block"
)

// ErrNotFound: the filesystem holds no kernel or initramfs where Find
// looks, or the disk holds no ext4 filesystem.
var ErrNotFound = errors.New("no kernel and initramfs found")

// MaxFileSize bounds a kernel or an initramfs that Read returns.
const MaxFileSize = 512 << 20

// Files are the kernel and initramfs that a filesystem boots.
type Files struct {
	// Kernel and Initrd are paths in the filesystem, without a leading
	// slash, symbolic links resolved: "boot/vmlinuz-6.1.0-26-amd64".
	Kernel, Initrd string
	// Partition is the index (from 1) of the partition that holds the
	// filesystem, 0 for a filesystem on the whole disk.
	Partition int
}

// FS is an ext4 filesystem of a block device, open for reading.
type FS struct {
	fs        *ext4.FileSystem
	partition int
}

// Open opens the ext4 filesystem on dev (or on its first partition
// that holds one). It fails with ErrNotFound when there is none. ctx
// bounds the reads that Open and the FS's methods make of dev.
func Open(ctx context.Context, dev block.Device) (*FS, error) {
	st := &storage{ctx: ctx, dev: dev, size: dev.Size()}
	if isExt4(st, 0) {
		fs, err := ext4.Read(st, st.size, 0, 512)
		if err != nil {
			return nil, fmt.Errorf("read the ext4 filesystem: %w", err)
		}
		return &FS{fs: fs}, nil
	}
	table, err := partition.Read(st, 512, 512)
	if err != nil {
		return nil, fmt.Errorf("%w: the disk holds neither an ext4 filesystem nor a partition table", ErrNotFound)
	}
	for _, p := range table.GetPartitions() {
		start, size := p.GetStart(), p.GetSize()
		if size <= 0 || start < 0 || start+size > st.size || !isExt4(st, start) {
			continue
		}
		fs, err := ext4.Read(st, size, start, 512)
		if err != nil {
			return nil, fmt.Errorf("read the ext4 filesystem of partition %d: %w", p.GetIndex(), err)
		}
		return &FS{fs: fs, partition: p.GetIndex()}, nil
	}
	return nil, fmt.Errorf("%w: no partition of the disk holds an ext4 filesystem", ErrNotFound)
}

// isExt4 reports whether an ext2/3/4 superblock's magic is where one
// would be for a filesystem at off.
func isExt4(r io.ReaderAt, off int64) bool {
	var magic [2]byte
	if _, err := r.ReadAt(magic[:], off+1024+0x38); err != nil {
		return false
	}
	return binary.LittleEndian.Uint16(magic[:]) == 0xEF53
}

// Find finds the kernel and initramfs the filesystem boots.
func (f *FS) Find() (Files, error) {
	for _, pair := range [][2]string{{"vmlinuz", "initrd.img"}, {"boot/vmlinuz", "boot/initrd.img"}} {
		k, kerr := f.resolve(pair[0])
		i, ierr := f.resolve(pair[1])
		if kerr == nil && ierr == nil {
			return Files{Kernel: k, Initrd: i, Partition: f.partition}, nil
		}
	}
	entries, err := f.fs.ReadDir("boot")
	if err != nil {
		return Files{}, fmt.Errorf("%w: no /vmlinuz and /initrd.img, and no /boot directory", ErrNotFound)
	}
	best := ""
	for _, e := range entries {
		v, ok := strings.CutPrefix(e.Name(), "vmlinuz-")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if _, err := f.resolve("boot/initrd.img-" + v); err != nil {
			continue
		}
		if best == "" || versionLess(best, v) {
			best = v
		}
	}
	if best == "" {
		return Files{}, fmt.Errorf("%w: no /vmlinuz and /initrd.img, and no /boot/vmlinuz-VERSION with its /boot/initrd.img-VERSION", ErrNotFound)
	}
	return Files{Kernel: "boot/vmlinuz-" + best, Initrd: "boot/initrd.img-" + best, Partition: f.partition}, nil
}

// resolve follows symbolic links from p to a regular file, within the
// filesystem.
func (f *FS) resolve(p string) (string, error) {
	for range 8 {
		fi, err := f.fs.Stat(p)
		if err != nil {
			return "", err
		}
		if fi.Mode().IsRegular() {
			return p, nil
		}
		if fi.Mode()&iofs.ModeSymlink == 0 {
			return "", fmt.Errorf("%s is not a file", p)
		}
		target, err := f.fs.ReadLink(p)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			p = path.Clean(strings.TrimPrefix(target, "/"))
		} else {
			p = path.Join(path.Dir(p), target)
		}
		if p == ".." || strings.HasPrefix(p, "../") || p == "." {
			return "", fmt.Errorf("link %s leaves the filesystem", target)
		}
	}
	return "", fmt.Errorf("%s: too many levels of symbolic links", p)
}

// ReadFile returns the content of a file Find named. It fails for a
// file larger than MaxFileSize.
func (f *FS) ReadFile(p string) ([]byte, error) {
	fi, err := f.fs.Stat(p)
	if err != nil {
		return nil, err
	}
	if fi.Size() > MaxFileSize {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d a boot file may have", p, fi.Size(), MaxFileSize)
	}
	return f.fs.ReadFile(p)
}

// Close releases the filesystem (not the device).
func (f *FS) Close() error { return nil }

// versionLess orders kernel versions as people read them: runs of
// digits by value ("6.1.0-9" before "6.1.0-10").
func versionLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if len(na) != len(nb) {
				return len(na) < len(nb)
			}
			if na != nb {
				return na < nb
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// storage is a read-only backend.Storage over a block.Device.
type storage struct {
	ctx  context.Context
	dev  block.Device
	size int64
	off  int64 // for Read and Seek
}

var _ backend.Storage = (*storage)(nil)

func (s *storage) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read at %d: negative offset", off)
	}
	if off >= s.size {
		return 0, io.EOF
	}
	n := len(p)
	if rest := s.size - off; int64(n) > rest {
		n = int(rest)
	}
	if err := s.dev.ReadAt(s.ctx, p[:n], off); err != nil {
		return 0, err
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (s *storage) Read(p []byte) (int, error) {
	n, err := s.ReadAt(p, s.off)
	s.off += int64(n)
	return n, err
}

func (s *storage) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += s.off
	case io.SeekEnd:
		offset += s.size
	default:
		return 0, fmt.Errorf("seek: whence %d", whence)
	}
	if offset < 0 {
		return 0, fmt.Errorf("seek to %d: negative offset", offset)
	}
	s.off = offset
	return offset, nil
}

func (s *storage) Stat() (iofs.FileInfo, error) { return info{s.size}, nil }
func (s *storage) Close() error                 { return nil }
func (s *storage) Sys() (*os.File, error) {
	return nil, errors.New("a block device of the image store has no file")
}
func (s *storage) Writable() (backend.WritableFile, error) {
	return nil, backend.ErrIncorrectOpenMode
}
func (s *storage) Path() string { return "" }

// info is the FileInfo of a storage.
type info struct{ size int64 }

func (i info) Name() string        { return "image" }
func (i info) Size() int64         { return i.size }
func (i info) Mode() iofs.FileMode { return 0o444 }
func (i info) ModTime() time.Time  { return time.Time{} }
func (i info) IsDir() bool         { return false }
func (i info) Sys() any            { return nil }
