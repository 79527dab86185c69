package blob

import (
	"bytes"
	"os"
	"sync"
	"sync/atomic"
)

// A HeadFile is a sealed memory file holding an HTTP answer's head
// followed by a blob's bytes, so that the whole answer leaves in one
// sendfile(2) instead of a write of the head and a sendfile of the body.
// It is counted: each holder releases its reference once, and the last
// release closes the file (a holder that forgets leaves it to the
// garbage collector).
type HeadFile struct {
	f    *os.File
	fd   int
	size int64
	refs atomic.Int64
}

// Fd returns the file's descriptor, valid until the holder's Release.
func (h *HeadFile) Fd() int { return h.fd }

// Size returns the length of the head and the blob together.
func (h *HeadFile) Size() int64 { return h.size }

// Release gives the holder's reference back.
func (h *HeadFile) Release() {
	if n := h.refs.Add(-1); n == 0 {
		h.f.Close()
	} else if n < 0 {
		panic("blob: HeadFile released more often than taken")
	}
}

// headFileAfter is how many answers with one head a blob sends in two
// parts before it makes a head file for the next ones: a head that is
// not repeated (a Date header changes each second) would cost a copy of
// the blob per answer.
const headFileAfter = 8

// maxHead bounds the head a head file takes.
const maxHead = 1 << 10

// headState is a blob's current head file, and the head it counts uses of.
type headState struct {
	mu   sync.Mutex
	head []byte
	seen int
	hf   *HeadFile
}

// HeadFile returns a head file of head and the blob, with a reference the
// caller must Release, or nil: for a blob without a file (File), a long
// head, and until the same head was asked for headFileAfter times in a
// row. A blob keeps one head file, for its last head.
func (b *Blob) HeadFile(head []byte) *HeadFile {
	if len(b.b) < MinFileSize || len(head) > maxHead || len(head) == 0 {
		return nil
	}
	s := &b.hs
	s.mu.Lock()
	defer s.mu.Unlock()
	if !bytes.Equal(s.head, head) {
		s.head, s.seen = append(s.head[:0], head...), 0
		if s.hf != nil {
			s.hf.Release()
			s.hf = nil
		}
	}
	if s.hf != nil {
		s.hf.refs.Add(1)
		return s.hf
	}
	if s.seen++; s.seen < headFileAfter {
		return nil
	}
	f := memFile(head, b.b)
	if f == nil {
		s.seen = 0 // try again after as many
		return nil
	}
	hf := &HeadFile{f: f, fd: int(f.Fd()), size: int64(len(head) + len(b.b))}
	hf.refs.Store(2) // the blob's and the caller's
	s.hf = hf
	return hf
}
