package block

import (
	"context"
	"sync"
)

// memChunk is the allocation unit of Memory: chunks never written take
// no memory and read as zeros.
const memChunk = 64 << 10

// Memory is a sparse Device held in memory, for tests and RAM-only
// exports. Reads of distinct chunks do not contend.
type Memory struct {
	size     int64
	readOnly bool

	mu     sync.RWMutex
	chunks map[int64][]byte
}

var (
	_ Device       = (*Memory)(nil)
	_ Extenter     = (*Memory)(nil)
	_ InlineWriter = (*Memory)(nil)
)

// NewMemory returns a zeroed, writable in-memory device of size bytes.
func NewMemory(size int64) *Memory {
	return &Memory{size: size, chunks: make(map[int64][]byte)}
}

// SetReadOnly makes every later write fail with ErrReadOnly.
func (m *Memory) SetReadOnly(ro bool) {
	m.mu.Lock()
	m.readOnly = ro
	m.mu.Unlock()
}

// Size implements Device.
func (m *Memory) Size() int64 { return m.size }

// ReadOnly implements Device.
func (m *Memory) ReadOnly() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.readOnly
}

// ReadAt implements Device.
func (m *Memory) ReadAt(_ context.Context, p []byte, off int64) error {
	if err := CheckRange(m, off, int64(len(p))); err != nil {
		return err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	for len(p) > 0 {
		i, o := off/memChunk, off%memChunk
		n := min(int64(len(p)), memChunk-o)
		if c := m.chunks[i]; c != nil {
			copy(p[:n], c[o:])
		} else {
			clear(p[:n])
		}
		p, off = p[n:], off+n
	}
	return nil
}

// WriteAt implements Device.
func (m *Memory) WriteAt(_ context.Context, p []byte, off int64, _ Flags) error {
	if err := CheckWrite(m, off, int64(len(p))); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(p) > 0 {
		i, o := off/memChunk, off%memChunk
		n := min(int64(len(p)), memChunk-o)
		c := m.chunks[i]
		if c == nil {
			c = make([]byte, memChunk)
			m.chunks[i] = c
		}
		copy(c[o:], p[:n])
		p, off = p[n:], off+n
	}
	return nil
}

// TryWriteAt implements InlineWriter: a write to memory never waits.
func (m *Memory) TryWriteAt(p []byte, off int64) bool {
	return m.WriteAt(context.Background(), p, off, 0) == nil
}

// Zero implements Device; whole chunks are freed.
func (m *Memory) Zero(_ context.Context, off, n int64, _ Flags) error {
	if err := CheckWrite(m, off, n); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for n > 0 {
		i, o := off/memChunk, off%memChunk
		l := min(n, memChunk-o)
		if c := m.chunks[i]; c != nil {
			if l == memChunk {
				delete(m.chunks, i)
			} else {
				clear(c[o : o+l])
			}
		}
		off, n = off+l, n-l
	}
	return nil
}

// Trim implements Device as Zero.
func (m *Memory) Trim(ctx context.Context, off, n int64, f Flags) error {
	if m.ReadOnly() {
		return ErrReadOnly
	}
	if err := CheckRange(m, off, n); err != nil {
		return err
	}
	return m.Zero(ctx, off, n, f)
}

// Flush implements Device; memory is as stable as it gets.
func (m *Memory) Flush(context.Context) error { return nil }

// Close implements Device.
func (m *Memory) Close() error { return nil }

// Extents implements Extenter: chunks never written are holes.
func (m *Memory) Extents(_ context.Context, off, n int64, dst []Extent) ([]Extent, error) {
	if err := CheckRange(m, off, n); err != nil {
		return dst, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	end, first := off+n, len(dst)
	for off < end {
		i, o := off/memChunk, off%memChunk
		l := min(end-off, memChunk-o)
		var fl ExtentFlags
		if m.chunks[i] == nil {
			fl = Hole | Zeroed
		}
		if k := len(dst) - 1; k >= first && dst[k].Flags == fl {
			dst[k].Length += l
		} else {
			dst = append(dst, Extent{Length: l, Flags: fl})
		}
		off += l
	}
	return dst, nil
}
