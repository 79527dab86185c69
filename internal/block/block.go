package block

import (
	"context"
	"errors"
	"fmt"
)

// Errors that layers return and that callers (the NBD server above all)
// branch on with errors.Is. Anything else is an I/O error.
var (
	// ErrReadOnly: a write, trim or zero on a device that takes no writes.
	ErrReadOnly = errors.New("block: device is read-only")
	// ErrNoSpace: the write does not fit, either beyond the end of the
	// device or because a layer's space (a RAM budget, an overflow file)
	// is exhausted. Nothing already written is lost.
	ErrNoSpace = errors.New("block: no space left")
	// ErrOutOfRange: a read, trim or extent query beyond the end of the
	// device.
	ErrOutOfRange = errors.New("block: range beyond the end of the device")
	// ErrNotSupported: the device cannot do this operation the way the
	// flags ask (a FastZero that would not be fast, for example).
	ErrNotSupported = errors.New("block: operation not supported")
	// ErrClosed: the device was closed.
	ErrClosed = errors.New("block: device is closed")
)

// Flags modify a write, zero or trim.
type Flags uint8

const (
	// FUA (force unit access): the call returns only once the data is
	// stable, as if followed by Flush.
	FUA Flags = 1 << iota
	// NoHole asks Zero to leave the range allocated rather than punch a
	// hole.
	NoHole
	// FastZero asks Zero to fail with ErrNotSupported rather than be
	// slower than a write of the same range.
	FastZero
)

// Device is a range of bytes [0, Size) that can be read and written at
// any offset. Every method is safe for concurrent use; concurrent writes
// to overlapping ranges leave either one's data, as with a disk.
//
// Contracts shared by all methods: a range that does not lie within
// [0, Size) fails with ErrOutOfRange (reads, trims, zeros) or ErrNoSpace
// (writes) and changes nothing; a device that takes no writes fails
// WriteAt, Zero and Trim with ErrReadOnly; any other failure is an I/O
// error that callers report as such.
type Device interface {
	// ReadAt fills p with the bytes at off. It reads all of p or fails.
	ReadAt(ctx context.Context, p []byte, off int64) error
	// WriteAt writes all of p at off or fails. With FUA the data is
	// stable when it returns.
	WriteAt(ctx context.Context, p []byte, off int64, f Flags) error
	// Zero makes [off, off+n) read as zeros (NoHole, FastZero, FUA apply).
	Zero(ctx context.Context, off, n int64, f Flags) error
	// Trim tells the device that [off, off+n) is no longer needed. Its
	// content is undefined afterwards (layers here make it read as zeros).
	Trim(ctx context.Context, off, n int64, f Flags) error
	// Flush returns once every write that returned before Flush was
	// called is stable. Volatile devices (RAM caches) return at once.
	Flush(ctx context.Context) error
	// Size is the device size in bytes; it does not change.
	Size() int64
	// ReadOnly reports whether writes fail with ErrReadOnly.
	ReadOnly() bool
	// Close releases the device. Calls after Close fail with ErrClosed
	// or are undefined; Close does not close a device it wraps unless
	// its constructor says so.
	Close() error
}

// ExtentFlags describe a run of bytes, as NBD's base:allocation does.
type ExtentFlags uint32

const (
	// Hole: the run is not allocated in the backing store.
	Hole ExtentFlags = 1 << iota
	// Zeroed: the run reads as zeros.
	Zeroed
)

// Extent is a run of Length bytes sharing the same Flags.
type Extent struct {
	Length int64
	Flags  ExtentFlags
}

// Extenter is implemented by devices that know which ranges are holes
// or zeros. Extents appends to dst the extents covering [off, off+n) in
// order, starting exactly at off; it may stop early (the caller asks
// again) but returns at least one extent when n > 0. A range beyond the
// end fails with ErrOutOfRange.
type Extenter interface {
	Extents(ctx context.Context, off, n int64, dst []Extent) ([]Extent, error)
}

// Extents reports the extents of d, or one allocated extent for the
// whole range when d has no Extenter (found with As).
func Extents(ctx context.Context, d Device, off, n int64, dst []Extent) ([]Extent, error) {
	if err := CheckRange(d, off, n); err != nil {
		return dst, err
	}
	if e, ok := As[Extenter](d); ok {
		return e.Extents(ctx, off, n, dst)
	}
	return append(dst, Extent{Length: n}), nil
}

// CheckRange returns ErrOutOfRange unless [off, off+n) lies within d.
func CheckRange(d Device, off, n int64) error {
	if off < 0 || n < 0 || off > d.Size() || n > d.Size()-off {
		return fmt.Errorf("%w: offset %d length %d size %d", ErrOutOfRange, off, n, d.Size())
	}
	return nil
}

// CheckWrite is CheckRange for writes: ErrReadOnly on a read-only device,
// ErrNoSpace beyond the end.
func CheckWrite(d Device, off, n int64) error {
	if d.ReadOnly() {
		return ErrReadOnly
	}
	if off < 0 || n < 0 || off > d.Size() || n > d.Size()-off {
		return fmt.Errorf("%w: write at offset %d length %d beyond size %d", ErrNoSpace, off, n, d.Size())
	}
	return nil
}

// MemReader is implemented by devices that can sometimes serve a read
// from memory without blocking (a RAM cache hit). TryReadAt fills p
// with the bytes at off and returns true, or returns false, leaving p's
// content undefined, when it cannot do so without I/O or the range is
// not within the device; the caller then calls ReadAt. It never blocks
// on I/O, so a server may run it on its request-reading goroutine.
type MemReader interface {
	TryReadAt(p []byte, off int64) bool
}

// TryReadAt is d's TryReadAt, or false when d has no MemReader (found
// with As).
func TryReadAt(d Device, p []byte, off int64) bool {
	if m, ok := As[MemReader](d); ok {
		return m.TryReadAt(p, off)
	}
	return false
}

// InlineWriter is implemented by devices that can sometimes take a
// write without waiting for a disk or the network: a copy into memory,
// or a buffered write into the page cache of a local file. TryWriteAt
// writes all of p at off and returns true, with the same effect as
// WriteAt without flags; or it returns false when it cannot do so
// quickly, when the range is not within the device, or on any failure,
// and the caller then calls WriteAt with the same p (TryWriteAt may
// have written part of it). A server may run it on its
// request-reading goroutine.
type InlineWriter interface {
	TryWriteAt(p []byte, off int64) bool
}

// TryWriteAt is d's TryWriteAt, or false when d has no InlineWriter
// (found with As).
func TryWriteAt(d Device, p []byte, off int64) bool {
	if w, ok := As[InlineWriter](d); ok {
		return w.TryWriteAt(p, off)
	}
	return false
}

// SliceReader is implemented by devices that keep data in memory they
// never modify or reuse (a RAM cache of a read-only image), so that a
// server can send it without copying it first. TrySlices appends to dst
// slices of that memory which, concatenated, are the n bytes at off,
// and returns true; or it returns false, leaving dst's new elements
// undefined, when any of the bytes is not in memory or the range is not
// within the device. It never blocks on I/O. Callers must not modify
// the slices.
type SliceReader interface {
	TrySlices(off, n int64, dst [][]byte) ([][]byte, bool)
}

// TrySlices is d's TrySlices, or false when d has no SliceReader
// (found with As).
func TrySlices(d Device, off, n int64, dst [][]byte) ([][]byte, bool) {
	if s, ok := As[SliceReader](d); ok {
		return s.TrySlices(off, n, dst)
	}
	return dst, false
}
