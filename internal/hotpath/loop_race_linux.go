//go:build race

package hotpath

import "syscall"

// Under the race detector the loop's reads and writes go through package
// syscall, whose Read, Write and Sendfile tell the detector that what a
// peer wrote before sending happened before what the reader does after:
// raw system calls carry no such edge, and a test that changes state and
// then sends a request would be reported as racing with its handler.

func rawRead(fd int, p []byte) (int, error) {
	return syscall.Read(fd, p)
}

func rawSendfile(out, in int, off *int64, count int) (int, error) {
	return syscall.Sendfile(out, in, off, count)
}

// raceRelease marks a send for the detector: Sendfile on no descriptor
// records the release and fails at once.
func raceRelease() { syscall.Sendfile(-1, -1, nil, 0) }
