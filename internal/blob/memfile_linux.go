package blob

import (
	"os"

	"golang.org/x/sys/unix"
)

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
