package blockbench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DiskStats are a block device's cumulative counters from
// /sys/dev/block/MAJ:MIN/stat (the fields of /proc/diskstats): I/O
// requests completed, after the block layer merged adjacent ones, and
// sectors of 512 bytes.
type DiskStats struct {
	Reads, ReadSectors   int64
	Writes, WriteSectors int64
}

// Sub returns the counts between an earlier reading o and d.
func (d DiskStats) Sub(o DiskStats) DiskStats {
	return DiskStats{Reads: d.Reads - o.Reads, ReadSectors: d.ReadSectors - o.ReadSectors,
		Writes: d.Writes - o.Writes, WriteSectors: d.WriteSectors - o.WriteSectors}
}

// ErrNoBlockDevice is returned by DiskOf for a file system on no block
// device (tmpfs, overlay).
var ErrNoBlockDevice = errors.New("no block device")

// Disk is the block device that holds a directory.
type Disk struct {
	Name string // as in /proc/diskstats: vda, nvme0n1p2
	stat string // its stat file
}

// DiskOf finds the block device holding path.
func DiskOf(path string) (Disk, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Disk{}, fmt.Errorf("stat %s: %w", path, err)
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	sys := filepath.Join("/sys/dev/block", dev)
	stat := filepath.Join(sys, "stat")
	if _, err := os.Stat(stat); err != nil {
		return Disk{}, fmt.Errorf("%s (device %s): %w", path, dev, ErrNoBlockDevice)
	}
	name := dev
	if real, err := filepath.EvalSymlinks(sys); err == nil {
		name = filepath.Base(real)
	}
	return Disk{Name: name, stat: stat}, nil
}

// Read reads the device's counters now.
func (d Disk) Read() (DiskStats, error) {
	b, err := os.ReadFile(d.stat)
	if err != nil {
		return DiskStats{}, err
	}
	return parseDiskStat(string(b))
}

// parseDiskStat reads the stat file's fields: 1 reads completed, 3
// sectors read, 5 writes completed, 7 sectors written.
func parseDiskStat(s string) (DiskStats, error) {
	f := strings.Fields(s)
	if len(f) < 7 {
		return DiskStats{}, fmt.Errorf("disk stat %q: %d fields", s, len(f))
	}
	var v [4]int64
	for i, k := range []int{0, 2, 4, 6} {
		n, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil {
			return DiskStats{}, fmt.Errorf("disk stat field %d: %w", k+1, err)
		}
		v[i] = n
	}
	return DiskStats{Reads: v[0], ReadSectors: v[1], Writes: v[2], WriteSectors: v[3]}, nil
}

// syncDir writes back every dirty page of the file system holding dir
// (syncfs), so that what the caches wrote has reached the disk when the
// counters are read.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}
