package blocktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/usher-vdi/usher/internal/block"
)

// Size is the size of the devices the suite asks for.
const Size = 1 << 20

// Run runs the suite against writable devices of Size bytes, all zeros,
// that open returns. The suite closes them.
func Run(t *testing.T, open func(t *testing.T) block.Device) {
	ctx := context.Background()
	t.Run("ReadsZerosWhenNew", func(t *testing.T) {
		d := open(t)
		defer d.Close()
		if got, want := d.Size(), int64(Size); got != want {
			t.Fatalf("Size = %d, want %d", got, want)
		}
		p := bytes.Repeat([]byte{0xff}, 8192)
		must(t, d.ReadAt(ctx, p, 4096))
		if !block.IsZero(p) {
			t.Fatal("new device does not read as zeros")
		}
	})
	t.Run("RandomWritesReadBack", func(t *testing.T) {
		d := open(t)
		defer d.Close()
		model := make([]byte, Size)
		r := rand.New(rand.NewPCG(1, 2))
		for i := range 300 {
			off := r.Int64N(Size - 1)
			n := 1 + r.Int64N(min(Size-off, 70000))
			switch i % 5 {
			case 0, 1, 2:
				p := make([]byte, n)
				for j := range p {
					p[j] = byte(r.Uint32())
				}
				must(t, d.WriteAt(ctx, p, off, 0))
				copy(model[off:], p)
			case 3:
				must(t, d.Zero(ctx, off, n, 0))
				clear(model[off : off+n])
			case 4:
				p := make([]byte, n)
				must(t, d.ReadAt(ctx, p, off))
				if !bytes.Equal(p, model[off:off+n]) {
					t.Fatalf("step %d: read at %d len %d differs from what was written", i, off, n)
				}
			}
		}
		must(t, d.Flush(ctx))
		got := make([]byte, Size)
		must(t, d.ReadAt(ctx, got, 0))
		if !bytes.Equal(got, model) {
			t.Fatal("whole device differs from what was written")
		}
	})
	t.Run("TrimReadsZeros", func(t *testing.T) {
		d := open(t)
		defer d.Close()
		must(t, d.WriteAt(ctx, bytes.Repeat([]byte{7}, 3*4096), 4096, 0))
		must(t, d.Trim(ctx, 4096, 3*4096, 0))
		p := make([]byte, 3*4096)
		must(t, d.ReadAt(ctx, p, 4096))
		if !block.IsZero(p) {
			t.Fatal("trimmed range does not read as zeros")
		}
	})
	t.Run("OutOfRange", func(t *testing.T) {
		d := open(t)
		defer d.Close()
		p := make([]byte, 4096)
		if err := d.ReadAt(ctx, p, Size-100); !errors.Is(err, block.ErrOutOfRange) {
			t.Fatalf("read past the end: %v, want ErrOutOfRange", err)
		}
		if err := d.WriteAt(ctx, p, Size-100, 0); !errors.Is(err, block.ErrNoSpace) {
			t.Fatalf("write past the end: %v, want ErrNoSpace", err)
		}
		if err := d.Zero(ctx, Size, 1, 0); !errors.Is(err, block.ErrNoSpace) {
			t.Fatalf("zero past the end: %v, want ErrNoSpace", err)
		}
		if err := d.ReadAt(ctx, p[:0], Size); err != nil {
			t.Fatalf("empty read at the end: %v", err)
		}
	})
	t.Run("Extents", func(t *testing.T) {
		d := open(t)
		defer d.Close()
		must(t, d.WriteAt(ctx, bytes.Repeat([]byte{1}, 65536), 65536, 0))
		ext, err := block.Extents(ctx, d, 0, Size, nil)
		must(t, err)
		var total int64
		for _, e := range ext {
			if e.Length <= 0 {
				t.Fatalf("extent of length %d", e.Length)
			}
			total += e.Length
		}
		if total > Size {
			t.Fatalf("extents cover %d bytes, more than the %d asked", total, Size)
		}
		// The written range must not be reported as zeros.
		var pos int64
		for _, e := range ext {
			if e.Flags&block.Zeroed != 0 && pos < 2*65536 && pos+e.Length > 65536 {
				t.Fatalf("written range reported as zeros: %+v", ext)
			}
			pos += e.Length
		}
	})
	t.Run("InlineWrites", func(t *testing.T) {
		d := open(t)
		defer d.Close()
		if _, ok := block.As[block.InlineWriter](d); !ok {
			t.Skip("not a block.InlineWriter")
		}
		model := make([]byte, Size)
		r := rand.New(rand.NewPCG(3, 4))
		inline := 0
		for i := range 400 {
			off, n := r.Int64N(Size/4096)*4096, 4096*(1+r.Int64N(4))
			if i%4 == 3 { // unaligned
				off, n = r.Int64N(Size-1), 1+r.Int64N(9000)
			}
			n = min(n, Size-off)
			p := make([]byte, n)
			for j := range p {
				p[j] = byte(r.Uint32())
			}
			if block.TryWriteAt(d, p, off) {
				inline++
			} else {
				must(t, d.WriteAt(ctx, p, off, 0))
			}
			copy(model[off:], p)
			q := make([]byte, n)
			must(t, d.ReadAt(ctx, q, off))
			if !bytes.Equal(p, q) {
				t.Fatalf("step %d: read at %d len %d differs from what was written", i, off, n)
			}
		}
		if inline == 0 {
			t.Fatal("TryWriteAt took no write, not even whole blocks")
		}
		got := make([]byte, Size)
		must(t, d.ReadAt(ctx, got, 0))
		if !bytes.Equal(got, model) {
			t.Fatal("whole device differs from what was written")
		}
		if block.TryWriteAt(d, make([]byte, 4096), Size-2048) {
			t.Fatal("TryWriteAt past the end returned true")
		}
	})
	t.Run("OptionalInterfacesAgree", func(t *testing.T) {
		d := open(t)
		defer d.Close()
		model := make([]byte, Size)
		r := rand.New(rand.NewPCG(5, 6))
		for range 40 {
			off := r.Int64N(Size/4096) * 4096
			p := make([]byte, 4096*(1+r.Int64N(8)))
			p = p[:min(int64(len(p)), Size-off)]
			for j := range p {
				p[j] = byte(r.Uint32())
			}
			must(t, d.WriteAt(ctx, p, off, 0))
			copy(model[off:], p)
		}
		checkOptional(t, d, model)
	})
	t.Run("Concurrent", func(t *testing.T) {
		d := open(t)
		defer d.Close()
		done := make(chan error)
		for g := range 8 {
			go func() {
				p := bytes.Repeat([]byte{byte(g + 1)}, 4096)
				q := make([]byte, 4096)
				var err error
				for i := range 50 {
					off := int64(g*32+i%32) * 4096
					if err = d.WriteAt(ctx, p, off, 0); err != nil {
						break
					}
					if err = d.ReadAt(ctx, q, off); err != nil {
						break
					}
					if !bytes.Equal(p, q) {
						err = errors.New("read back differs")
						break
					}
				}
				done <- err
			}()
		}
		for range 8 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	})
}

// Content returns the content RunReader gives its devices: Size bytes
// of random data, with some 64 KiB chunks left zero.
func Content() []byte {
	r := rand.New(rand.NewPCG(7, 8))
	p := make([]byte, Size)
	for c := 0; c < Size; c += 64 << 10 {
		if r.IntN(3) == 0 {
			continue
		}
		for i := c; i < c+64<<10; i++ {
			p[i] = byte(r.Uint32())
		}
	}
	return p
}

// RunReader runs the read side of the suite against devices that open
// returns holding content (Content(), Size bytes): read-only devices,
// and layers such as the RAM cache whose device under them must not
// change. It checks reads, ranges, concurrency, and that the optional
// interfaces agree with ReadAt. The suite closes the devices.
func RunReader(t *testing.T, open func(t *testing.T, content []byte) block.Device) {
	ctx := context.Background()
	content := Content()
	t.Run("ReadsContent", func(t *testing.T) {
		d := open(t, bytes.Clone(content))
		defer d.Close()
		if got, want := d.Size(), int64(Size); got != want {
			t.Fatalf("Size = %d, want %d", got, want)
		}
		r := rand.New(rand.NewPCG(9, 10))
		for i := range 200 {
			off := r.Int64N(Size - 1)
			n := 1 + r.Int64N(min(Size-off, 70000))
			p := make([]byte, n)
			must(t, d.ReadAt(ctx, p, off))
			if !bytes.Equal(p, content[off:off+n]) {
				t.Fatalf("step %d: read at %d len %d differs from the content", i, off, n)
			}
		}
		got := make([]byte, Size)
		must(t, d.ReadAt(ctx, got, 0))
		if !bytes.Equal(got, content) {
			t.Fatal("whole device differs from the content")
		}
	})
	t.Run("OutOfRange", func(t *testing.T) {
		d := open(t, bytes.Clone(content))
		defer d.Close()
		p := make([]byte, 4096)
		if err := d.ReadAt(ctx, p, Size-100); !errors.Is(err, block.ErrOutOfRange) {
			t.Fatalf("read past the end: %v, want ErrOutOfRange", err)
		}
		if err := d.ReadAt(ctx, p, -1); !errors.Is(err, block.ErrOutOfRange) {
			t.Fatalf("read before the start: %v, want ErrOutOfRange", err)
		}
		if _, err := block.Extents(ctx, d, Size-100, 4096, nil); !errors.Is(err, block.ErrOutOfRange) {
			t.Fatalf("extents past the end: %v, want ErrOutOfRange", err)
		}
		if err := d.ReadAt(ctx, p[:0], Size); err != nil {
			t.Fatalf("empty read at the end: %v", err)
		}
	})
	t.Run("OptionalInterfacesAgree", func(t *testing.T) {
		d := open(t, bytes.Clone(content))
		defer d.Close()
		checkOptional(t, d, content)
	})
	t.Run("ConcurrentReads", func(t *testing.T) {
		d := open(t, bytes.Clone(content))
		defer d.Close()
		done := make(chan error)
		for g := range 8 {
			go func() {
				r := rand.New(rand.NewPCG(uint64(g), 11))
				p := make([]byte, 8192)
				var err error
				for range 50 {
					off := r.Int64N(Size - int64(len(p)))
					if err = d.ReadAt(ctx, p, off); err != nil {
						break
					}
					if !bytes.Equal(p, content[off:off+int64(len(p))]) {
						err = fmt.Errorf("read at %d differs from the content", off)
						break
					}
				}
				done <- err
			}()
		}
		for range 8 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	})
}

// checkOptional checks that d's optional interfaces, found as the
// block helpers find them, agree with ReadAt on a device holding model:
// what TryReadAt and TrySlices return when they report ok are the bytes
// ReadAt returns, they report false outside the device, and extents
// cover the range asked, in order, with every Zeroed run reading as
// zeros.
func checkOptional(t *testing.T, d block.Device, model []byte) {
	t.Helper()
	ctx := context.Background()
	size := int64(len(model))
	r := rand.New(rand.NewPCG(12, 13))
	for i := range 300 {
		off := r.Int64N(size - 1)
		if i%2 == 0 {
			off &^= 4095
		}
		n := 1 + r.Int64N(min(size-off, 3*65536))
		p := make([]byte, n)
		must(t, d.ReadAt(ctx, p, off)) // warms a cache, so that the Try calls can hit
		if !bytes.Equal(p, model[off:off+n]) {
			t.Fatalf("read at %d len %d differs from what the device holds", off, n)
		}
		q := bytes.Repeat([]byte{0xa5}, int(n))
		if block.TryReadAt(d, q, off) && !bytes.Equal(q, model[off:off+n]) {
			t.Fatalf("TryReadAt at %d len %d reported ok with other bytes than ReadAt", off, n)
		}
		marker := []byte("kept")
		if sl, ok := block.TrySlices(d, off, n, [][]byte{marker}); ok {
			if len(sl) == 0 || &sl[0][0] != &marker[0] {
				t.Fatalf("TrySlices at %d len %d did not append to dst", off, n)
			}
			if got := bytes.Join(sl[1:], nil); !bytes.Equal(got, model[off:off+n]) {
				t.Fatalf("TrySlices at %d len %d reported ok with %d other bytes than ReadAt", off, n, len(got))
			}
		}
		if i%10 == 0 {
			checkExtents(t, d, model, off, n)
		}
	}
	checkExtents(t, d, model, 0, size)
	p := make([]byte, 4096)
	if block.TryReadAt(d, p, size-100) || block.TryReadAt(d, p, -1) {
		t.Fatal("TryReadAt outside the device reported ok")
	}
	if _, ok := block.TrySlices(d, size-100, 4096, nil); ok {
		t.Fatal("TrySlices outside the device reported ok")
	}
}

// checkExtents checks the extents of [off, off+n) against model.
func checkExtents(t *testing.T, d block.Device, model []byte, off, n int64) {
	t.Helper()
	for n > 0 {
		ext, err := block.Extents(context.Background(), d, off, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(ext) == 0 {
			t.Fatalf("no extent for [%d, +%d)", off, n)
		}
		for _, e := range ext {
			if e.Length <= 0 || e.Length > n {
				t.Fatalf("extent of length %d in a range of %d", e.Length, n)
			}
			if e.Flags&block.Zeroed != 0 && !block.IsZero(model[off:off+e.Length]) {
				t.Fatalf("[%d, +%d) reported as zeros but holds data", off, e.Length)
			}
			off, n = off+e.Length, n-e.Length
		}
	}
}

// RunReadOnly checks that d reports read-only and refuses every write
// path: WriteAt, Zero and Trim fail with ErrReadOnly, TryWriteAt takes
// nothing, and the content is unchanged.
func RunReadOnly(t *testing.T, d block.Device) {
	t.Helper()
	ctx := context.Background()
	if !d.ReadOnly() {
		t.Fatal("ReadOnly() = false")
	}
	before := make([]byte, min(d.Size(), 8192))
	must(t, d.ReadAt(ctx, before, 0))
	defer func() {
		after := make([]byte, len(before))
		must(t, d.ReadAt(ctx, after, 0))
		if !bytes.Equal(before, after) {
			t.Fatal("a refused write changed the content")
		}
	}()
	if err := d.WriteAt(ctx, []byte{1}, 0, 0); !errors.Is(err, block.ErrReadOnly) {
		t.Fatalf("WriteAt: %v, want ErrReadOnly", err)
	}
	if err := d.Zero(ctx, 0, 1, 0); !errors.Is(err, block.ErrReadOnly) {
		t.Fatalf("Zero: %v, want ErrReadOnly", err)
	}
	if err := d.Trim(ctx, 0, 1, 0); !errors.Is(err, block.ErrReadOnly) {
		t.Fatalf("Trim: %v, want ErrReadOnly", err)
	}
	if block.TryWriteAt(d, bytes.Repeat([]byte{0x5a}, 4096), 0) {
		t.Fatal("TryWriteAt took a write")
	}
	if w, ok := block.As[block.InlineWriter](d); ok && w.TryWriteAt(bytes.Repeat([]byte{0x5a}, 4096), 0) {
		t.Fatal("the InlineWriter As finds took a write")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Extents asks d for the extents of [off, off+n) until they cover it and
// returns them with neighbouring runs of the same flags merged, so that
// devices that stop early or split runs differently compare equal.
func Extents(t testing.TB, d block.Device, off, n int64) []block.Extent {
	t.Helper()
	var all []block.Extent
	for n > 0 {
		ext, err := block.Extents(context.Background(), d, off, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ext {
			if k := len(all) - 1; k >= 0 && all[k].Flags == e.Flags {
				all[k].Length += e.Length
			} else {
				all = append(all, e)
			}
			off, n = off+e.Length, n-e.Length
		}
	}
	return all
}
