package blockbench

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// knownWrites is exactly 256 writes of 4 KiB, each to another block
// (fio's random map visits every block of --io_size once).
var knownWrites = []Phase{{Name: "known", Args: []string{"--rw=randwrite", "--bs=4k", "--size=1m", "--io_size=1m", "--iodepth=4"}}}

// TestMeasuredKnownJob: a known fio job through the server-disk write
// cache reaches its file as exactly that many writes and bytes (the
// meter), the disk's counters saw at least those bytes written (diskstats,
// after syncfs), and the same job under a RAM cache that holds it reaches
// no file at all.
func TestMeasuredKnownJob(t *testing.T) {
	fio, err := exec.LookPath("fio")
	if err != nil {
		t.Skip("fio is not installed (scripts/test installs it)")
	}
	res, err := RunMeasured(context.Background(), MeasuredConfig{Dir: t.TempDir(), Targets: 1, ImageSize: 16 * mib, Phases: knownWrites,
		Modes: []string{ModeServerDisk, ModeRAMOverflow}, Fio: fio})
	if err != nil {
		t.Fatal(err)
	}
	sd, ro := res.Modes[0], res.Modes[1]
	for _, m := range []MeasuredMode{sd, ro} {
		if m.ClientWrites != 256 || m.CacheWrites != 256 || m.ClientReads != 0 {
			t.Errorf("%s: fio wrote %d (read %d), the cache received %d writes; want 256", m.Mode, m.ClientWrites, m.ClientReads, m.CacheWrites)
		}
	}
	if sd.DiskWrites != 256 || sd.DiskWriteBytes != 1*mib {
		t.Errorf("server disk: %d writes, %d bytes reached the cache file; want 256 and 1 MiB", sd.DiskWrites, sd.DiskWriteBytes)
	}
	if ro.DiskWrites != 0 || ro.DiskReads != 0 {
		t.Errorf("RAM with room to spare: %d writes and %d reads reached the overflow file", ro.DiskWrites, ro.DiskReads)
	}
	if sd.Device == "" {
		if !strings.Contains(res.Device, ErrNoBlockDevice.Error()) {
			t.Fatalf("no device and no reason: %q", res.Device)
		}
		t.Logf("diskstats not compared: %s", res.Device)
		return
	}
	// Other processes share the disk, and the file system adds its
	// journal: the disk saw at least what the meter says, never less.
	if got := sd.DevWriteSectors * 512; got < sd.DiskWriteBytes || sd.DevWrites == 0 {
		t.Errorf("disk %s: %d bytes in %d writes, less than the %d bytes the meter counted", sd.Device, got, sd.DevWrites, sd.DiskWriteBytes)
	}
}

func TestParseDiskStat(t *testing.T) {
	got, err := parseDiskStat("   12049     3151  1306818    12405    51632    43210  2473312    98765        0    61234   123456\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := (DiskStats{Reads: 12049, ReadSectors: 1306818, Writes: 51632, WriteSectors: 2473312}); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "1 2 3", "1 2 x 4 5 6 7"} {
		if _, err := parseDiskStat(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if _, err := DiskOf("/proc"); !errors.Is(err, ErrNoBlockDevice) {
		t.Errorf("/proc: %v, want ErrNoBlockDevice", err)
	}
}
