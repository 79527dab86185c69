package block

import "context"

// Wrapper is implemented by a layer that changes some of the Device
// methods of the device it wraps and adds nothing else: ReadOnly,
// NopCloser, a close hook. Unwrap returns the wrapped device, and As
// looks through it for the optional interfaces (MemReader, SliceReader,
// InlineWriter, Extenter) that the layer does not implement itself, so
// a wrapper keeps every capability of its device without forwarding
// each one by hand, and claims none the device lacks.
//
// A wrapper that refuses something an optional interface does (as
// ReadOnly refuses inline writes) implements that interface itself to
// refuse it, which stops As there. A layer that changes what reads
// return (a cache) must not implement Wrapper.
type Wrapper interface {
	Device
	Unwrap() Device
}

// As returns the first device in d's chain (d, then what each Wrapper's
// Unwrap returns) that implements T, as errors.As does for errors. It is
// how callers ask for an optional interface; a plain type assertion
// would miss one under a wrapper.
func As[T any](d Device) (T, bool) {
	for d != nil {
		if t, ok := d.(T); ok {
			return t, true
		}
		w, ok := d.(Wrapper)
		if !ok {
			break
		}
		d = w.Unwrap()
	}
	var zero T
	return zero, false
}

// ReadOnly returns d with every write refused: WriteAt, Zero and Trim
// fail with ErrReadOnly, TryWriteAt takes nothing, and ReadOnly reports
// true. Reads, Flush and Close go to d, and d's read-side optional
// interfaces (MemReader, SliceReader, Extenter) stay reachable through
// As. Closing the result closes d.
func ReadOnly(d Device) Device { return readOnly{d} }

type readOnly struct{ Device }

var (
	_ Wrapper      = readOnly{}
	_ InlineWriter = readOnly{}
)

func (r readOnly) Unwrap() Device { return r.Device }

func (readOnly) ReadOnly() bool { return true }

func (readOnly) WriteAt(context.Context, []byte, int64, Flags) error { return ErrReadOnly }

func (readOnly) Zero(context.Context, int64, int64, Flags) error { return ErrReadOnly }

func (readOnly) Trim(context.Context, int64, int64, Flags) error { return ErrReadOnly }

// TryWriteAt refuses every inline write, so that As does not find d's.
func (readOnly) TryWriteAt([]byte, int64) bool { return false }

// NopCloser returns d with a Close that does nothing, for a device that
// several users share and its owner closes. Everything else, optional
// interfaces included, is d's.
func NopCloser(d Device) Device { return nopCloser{d} }

type nopCloser struct{ Device }

var _ Wrapper = nopCloser{}

func (n nopCloser) Unwrap() Device { return n.Device }

func (nopCloser) Close() error { return nil }
