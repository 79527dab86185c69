package boothttp

import (
	"errors"
	"io"
)

// parts reads byte slices one after the other as one file, without
// copying them: an initramfs followed by usher's overlay.
type parts struct {
	parts [][]byte
	size  int64
	off   int64
}

var _ io.ReadSeeker = (*parts)(nil)

func newParts(p ...[]byte) *parts {
	r := &parts{parts: p}
	for _, b := range p {
		r.size += int64(len(b))
	}
	return r
}

func (r *parts) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	n, at := 0, int64(0)
	for _, b := range r.parts {
		end := at + int64(len(b))
		if r.off < end && n < len(p) {
			c := copy(p[n:], b[r.off-at:])
			n += c
			r.off += int64(c)
		}
		at = end
	}
	return n, nil
}

func (r *parts) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += r.off
	case io.SeekEnd:
		offset += r.size
	default:
		return 0, errors.New("boothttp: bad whence")
	}
	if offset < 0 {
		return 0, errors.New("boothttp: seek before the start")
	}
	r.off = offset
	return offset, nil
}
