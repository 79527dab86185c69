package blob

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// newFile returns a file holding b that can no longer change, or nil: an
// unnamed file of dir when dir is set and can hold one, else a sealed
// memory file.
func newFile(b []byte, dir string) *os.File {
	if dir != "" {
		if f := dirFile(b, dir); f != nil {
			return f
		}
	}
	return memFile(b)
}

// dirFile returns a read-only, unnamed file of dir holding b, or nil.
// O_EXCL keeps it unnamed for good: it cannot be linked into dir, and it
// goes when the last descriptor closes.
func dirFile(b []byte, dir string) *os.File {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_EXCL|unix.O_CLOEXEC, 0o400)
	if err != nil {
		return nil
	}
	w := os.NewFile(uintptr(fd), "usher-blob")
	defer w.Close()
	if n, err := w.Write(b); err != nil || n != len(b) {
		return nil
	}
	// Opened again read-only, the file cannot be written through the
	// descriptor the blob hands out.
	rfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(rfd), "usher-blob")
}

// memFile returns a sealed memory file holding b, or nil.
func memFile(b []byte) *os.File {
	fd, err := unix.MemfdCreate("usher-blob", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), "usher-blob")
	if n, err := f.Write(b); err != nil || n != len(b) {
		f.Close()
		return nil
	}
	// Sealed, the file can no longer change, whoever holds it.
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
		f.Close()
		return nil
	}
	return f
}
