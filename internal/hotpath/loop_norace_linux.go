//go:build !race

package hotpath

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

func rawRead(fd int, p []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

func rawSendfile(out, in int, off *int64, count int) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_SENDFILE, uintptr(out), uintptr(in), uintptr(unsafe.Pointer(off)), uintptr(count), 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

func raceRelease() {}
