//go:build linux || darwin

package hotpath

import "syscall"

// RaiseFileLimit raises the process's soft limit on open files
// (RLIMIT_NOFILE) to its hard limit, and returns the soft limit before
// and after, and the hard limit. (Go's runtime does so at start on Linux
// too; a process started otherwise, or a runtime that stops, must not
// leave the broker at a soft 1,024.)
func RaiseFileLimit() (before, after, hard uint64, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, 0, err
	}
	before, hard = lim.Cur, lim.Max
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return before, before, hard, err
		}
	}
	return before, lim.Cur, hard, nil
}

// fileLimit is the soft limit on open files, at most maxFileLimit (for
// an unlimited one).
func fileLimit() (int, bool) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, false
	}
	return int(min(lim.Cur, maxFileLimit)), true
}

// maxFileLimit is the most descriptors DefaultMaxConns counts on.
const maxFileLimit = 1 << 20
