// Package blob holds immutable byte strings, such as pre-rendered
// enumeration answers, that a transport may send without copying them
// from user space: on Linux a large blob is also kept in a sealed memory
// file, which the lean HTTP loop (internal/hotpath) sends with sendfile(2).
//
// Any package may import it; it imports nothing of usher's.
package blob

import (
	"io"
	"os"
	"strconv"
	"sync"
)

// MinFileSize is the smallest blob given a file: below it a copy costs
// less than a second system call.
const MinFileSize = 16 << 10

// Blob is an immutable byte string. Its methods are safe for concurrent
// use.
type Blob struct {
	b    []byte
	once sync.Once
	// f is the blob's memory file, nil when it has none.
	f *os.File
	// length is the blob's length as a header value.
	length []string
}

// New returns a blob of b, which the caller must not change afterwards.
func New(b []byte) *Blob { return &Blob{b: b, length: []string{strconv.Itoa(len(b))}} }

// LengthHeader returns the blob's length as the value of an HTTP
// Content-Length header, made once: the caller must not change it.
func (b *Blob) LengthHeader() []string {
	if b.length == nil {
		return []string{strconv.Itoa(len(b.b))}
	}
	return b.length[:1:1]
}

// Bytes returns the blob's bytes, which must not be changed.
func (b *Blob) Bytes() []byte { return b.b }

// Len returns the blob's length.
func (b *Blob) Len() int { return len(b.b) }

// File returns a file that holds exactly the blob's bytes, for
// sendfile(2), made on first use; ok is false for a blob under
// MinFileSize, where memory files are not supported, or when making one
// failed. The caller must not change the file, its offset included
// (sendfile with an explicit offset leaves it alone), nor close it: the
// file is closed when the blob is garbage.
func (b *Blob) File() (f *os.File, ok bool) {
	if len(b.b) < MinFileSize {
		return nil, false
	}
	b.once.Do(func() { b.f = memFile(b.b) })
	return b.f, b.f != nil
}

// Writer is an io.Writer that can send a blob better than by writing its
// bytes.
type Writer interface {
	// WriteBlob writes the blob's bytes, as Write(b.Bytes()) would.
	WriteBlob(b *Blob) (int, error)
}

// Write writes b to w, through WriteBlob when w has it.
func Write(w io.Writer, b *Blob) (int, error) {
	if bw, ok := w.(Writer); ok {
		return bw.WriteBlob(b)
	}
	return w.Write(b.b)
}
