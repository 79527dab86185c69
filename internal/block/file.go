package block

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// File is a Device backed by a regular file or a block device, read and
// written with pread and pwrite so that concurrent calls need no lock.
// Trim and Zero punch holes where the file system allows; Extents uses
// SEEK_DATA and SEEK_HOLE.
type File struct {
	f        *os.File
	size     int64
	readOnly bool
	closed   atomic.Bool
}

var (
	_ Device   = (*File)(nil)
	_ Extenter = (*File)(nil)
)

// OpenFile opens the file at path as a device of its current size.
func OpenFile(path string, readOnly bool) (*File, error) {
	flag := os.O_RDWR
	if readOnly {
		flag = os.O_RDONLY
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("size of %s: %w", path, err)
	}
	return &File{f: f, size: size, readOnly: readOnly}, nil
}

// CreateFile creates (or truncates) a sparse file of size bytes at path
// and opens it as a writable device. A block device at path (a local
// disk for an overflow) is opened as it is: neither truncated nor
// chmodded, its size the device's whatever size says.
func CreateFile(path string, size int64) (*File, error) {
	if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0 {
		return OpenFile(path, false)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	// Images, write caches and overflow files hold users' data: their
	// owner's alone, whatever the umask or the mode of a file truncated.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, err
	}
	return &File{f: f, size: size}, nil
}

// Name is the path the file was opened with.
func (d *File) Name() string { return d.f.Name() }

// Size implements Device.
func (d *File) Size() int64 { return d.size }

// ReadOnly implements Device.
func (d *File) ReadOnly() bool { return d.readOnly }

// ReadAt implements Device. Bytes past the end of a file shorter than
// the device (never the case unless it was truncated under us) read as
// zeros.
func (d *File) ReadAt(_ context.Context, p []byte, off int64) error {
	if err := CheckRange(d, off, int64(len(p))); err != nil {
		return err
	}
	n, err := d.f.ReadAt(p, off)
	if errors.Is(err, io.EOF) {
		clear(p[n:])
		return nil
	}
	return err
}

// WriteAt implements Device.
func (d *File) WriteAt(ctx context.Context, p []byte, off int64, f Flags) error {
	if err := CheckWrite(d, off, int64(len(p))); err != nil {
		return err
	}
	if _, err := d.f.WriteAt(p, off); err != nil {
		return mapErrno(err)
	}
	if f&FUA != 0 {
		return d.Flush(ctx)
	}
	return nil
}

// Zero implements Device: a hole is punched unless NoHole is set, then
// the range is zeroed in place; FastZero fails when neither is possible.
func (d *File) Zero(ctx context.Context, off, n int64, f Flags) error {
	if err := CheckWrite(d, off, n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	mode := uint32(unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE)
	if f&NoHole != 0 {
		mode = unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE
	}
	err := unix.Fallocate(int(d.f.Fd()), mode, off, n)
	if err != nil && f&NoHole != 0 {
		// Some file systems lack ZERO_RANGE: punching and reallocating
		// gives the same result.
		if err = unix.Fallocate(int(d.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n); err == nil {
			err = unix.Fallocate(int(d.f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, n)
		}
	}
	if err != nil {
		if f&FastZero != 0 {
			return ErrNotSupported
		}
		if err := WriteZeros(ctx, d, off, n); err != nil {
			return err
		}
	}
	if f&FUA != 0 {
		return d.Flush(ctx)
	}
	return nil
}

// Trim implements Device by punching a hole: the range reads as zeros.
func (d *File) Trim(ctx context.Context, off, n int64, f Flags) error {
	if d.readOnly {
		return ErrReadOnly
	}
	if err := CheckRange(d, off, n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	// A file system without hole punching simply keeps the data: trim
	// is advisory.
	_ = unix.Fallocate(int(d.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if f&FUA != 0 {
		return d.Flush(ctx)
	}
	return nil
}

// Flush implements Device with fdatasync.
func (d *File) Flush(context.Context) error {
	if d.readOnly {
		return nil
	}
	return unix.Fdatasync(int(d.f.Fd()))
}

// Extents implements Extenter with SEEK_DATA and SEEK_HOLE. Holes are
// reported as Hole|Zeroed, data as allocated.
func (d *File) Extents(_ context.Context, off, n int64, dst []Extent) ([]Extent, error) {
	if err := CheckRange(d, off, n); err != nil {
		return dst, err
	}
	end := off + n
	fd := int(d.f.Fd())
	for off < end {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil {
			if errors.Is(err, unix.ENXIO) { // no data after off
				return append(dst, Extent{Length: end - off, Flags: Hole | Zeroed}), nil
			}
			return append(dst, Extent{Length: end - off}), nil // unknown: allocated
		}
		if data > off {
			l := min(data, end) - off
			dst = append(dst, Extent{Length: l, Flags: Hole | Zeroed})
			off += l
			continue
		}
		hole, err := unix.Seek(fd, off, unix.SEEK_HOLE)
		if err != nil || hole <= off {
			hole = end
		}
		l := min(hole, end) - off
		dst = append(dst, Extent{Length: l})
		off += l
	}
	return dst, nil
}

// Close implements Device.
func (d *File) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	return d.f.Close()
}

// mapErrno turns a full disk or quota into ErrNoSpace.
func mapErrno(err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) || errors.Is(err, unix.EFBIG) {
		return fmt.Errorf("%w: %v", ErrNoSpace, err)
	}
	return err
}

var zeros [64 << 10]byte

// WriteZeros zeroes [off, off+n) of d with plain writes.
func WriteZeros(ctx context.Context, d Device, off, n int64) error {
	for n > 0 {
		c := min(n, int64(len(zeros)))
		if err := d.WriteAt(ctx, zeros[:c], off, 0); err != nil {
			return err
		}
		off += c
		n -= c
	}
	return nil
}

// IsZero reports whether p is all zeros.
func IsZero(p []byte) bool {
	for len(p) >= 8 {
		if p[0]|p[1]|p[2]|p[3]|p[4]|p[5]|p[6]|p[7] != 0 {
			return false
		}
		p = p[8:]
	}
	for _, b := range p {
		if b != 0 {
			return false
		}
	}
	return true
}
