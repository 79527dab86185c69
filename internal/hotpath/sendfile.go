package hotpath

import (
	"github.com/usher-vdi/usher/internal/blob"
)

var _ blob.Writer = (*response)(nil)

// WriteBlob writes a blob. When it is the whole body of the response, as
// declared by Content-Length, and it has a file, the head and the body go
// out with sendfile(2) where the platform has it, without copying the body
// from user space.
func (w *response) WriteBlob(b *blob.Blob) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(200)
	}
	if w.err != nil || w.headerSent || w.cl != int64(b.Len()) || !w.o.files() {
		return w.Write(b.Bytes())
	}
	f, ok := b.File()
	if !ok {
		return w.Write(b.Bytes())
	}
	n, err := w.o.sendBlob(w.head(b.Bytes(), -1), b, f)
	if err != nil {
		w.err, w.closeAfter = err, true
	}
	if w.err != nil {
		return 0, w.err
	}
	w.written = n
	return int(n), nil
}
