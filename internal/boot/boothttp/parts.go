package boothttp

import "io"

// parts is byte slices one after the other as one file, read without
// copying them: an initramfs followed by usher's overlay.
type parts [][]byte

var _ io.ReaderAt = parts(nil)

// newParts returns the slices as one file that http.ServeContent can seek.
func newParts(p ...[]byte) *io.SectionReader {
	var size int64
	for _, b := range p {
		size += int64(len(b))
	}
	return io.NewSectionReader(parts(p), 0, size)
}

func (p parts) ReadAt(b []byte, off int64) (int, error) {
	n := 0
	for _, s := range p {
		if off >= int64(len(s)) {
			off -= int64(len(s))
			continue
		}
		n += copy(b[n:], s[off:])
		off = 0
		if n == len(b) {
			return n, nil
		}
	}
	return n, io.EOF
}
