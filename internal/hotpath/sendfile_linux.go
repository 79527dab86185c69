package hotpath

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// sendFile sends hdr, then body (which f holds from its start) on the
// connection, with sendfile(2), waiting for the socket as the
// connection's write deadline allows. The head goes with MSG_MORE, so that
// it leaves in the body's first segment. Should the kernel refuse
// sendfile for this file, the body is written instead. It returns the
// bytes of body sent.
func sendFile(rc syscall.RawConn, hdr []byte, f *os.File, body []byte) (int64, error) {
	src, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var srcFD int
	src.Control(func(fd uintptr) { srcFD = int(fd) })
	n := int64(len(body))
	var off int64
	sent, copying := 0, false
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		for sent < len(hdr) {
			m, err := unix.SendmsgN(int(fd), hdr[sent:], nil, nil, unix.MSG_MORE|unix.MSG_NOSIGNAL)
			switch {
			case err == unix.EAGAIN:
				return false
			case err == unix.EINTR:
				continue
			case err != nil:
				serr = err
				return true
			}
			sent += m
		}
		for off < n {
			var m int
			var err error
			if copying {
				m, err = unix.Write(int(fd), body[off:])
				off += int64(max(m, 0))
			} else {
				m, err = unix.Sendfile(int(fd), srcFD, &off, int(n-off))
			}
			switch {
			case err == unix.EAGAIN:
				return false
			case err == unix.EINTR:
				continue
			case (err == unix.EINVAL || err == unix.ENOSYS) && !copying:
				copying = true
			case err != nil:
				serr = err
				return true
			case m == 0:
				serr = errors.New("sendfile: file shorter than its blob")
				return true
			}
		}
		return true
	})
	if err == nil {
		err = serr
	}
	return off, err
}
