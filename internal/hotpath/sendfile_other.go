//go:build !linux

package hotpath

import (
	"errors"
	"os"
	"syscall"
)

// sendFile is never called here: blobs have no files outside Linux.
func sendFile(syscall.RawConn, []byte, *os.File, []byte) (int64, error) {
	return 0, errors.New("sendfile: not on this platform")
}
