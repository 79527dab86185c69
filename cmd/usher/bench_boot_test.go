package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/bench"
	"github.com/usher-vdi/usher/internal/vmrun/vmruntest"
)

// TestBenchBoot runs usher bench boot as small as it goes: one VM
// booting from the local file, then one alone (the solo boot) and one in
// the pass through usher target --cache ram-overflow with a RAM budget
// well below the guests' writes. Three boots, not the five that two
// targets a pass would take: that the bench runs its targets at once and
// sums them is internal/bench's TestBootFigures, and VMs booting at once
// are the other boot tests'.
// It checks the report's structure and that the counts are there and
// agree: every guest read and wrote, the targets read from the stream and
// never wrote to it, the writes overflowed, the stream read the store's
// blocks under its RAM cache, and every figure has a verdict. Whether a
// figure is met is the bench's to say, not this test's.
func TestBenchBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("boots VMs")
	}
	// A boot test: it waits for a VM slot (internal/vmrun), not for the
	// package's other tests.
	t.Parallel()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil && os.Getenv("CI") != "true" {
		t.Skip("qemu-system-x86_64 is not installed (Debian: apt-get install qemu-system-x86)")
	}
	vmruntest.Image(t) // built once per machine, or the test skips (fails under CI)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	code, stdout, stderr := run(t, "", "bench", "boot", "--targets", "1", "--modes", "local,ram-overflow-small", "--write-mb", "16",
		"--small-ram", "4MiB", "--pass-timeout", "5m", "--dir", filepath.Join(dir, "scratch"), "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	for _, f := range []string{"report.md", "report.json", "report.csv", "report.html", "result.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	// One target a pass: a boot time per mode, no line to draw.
	if _, err := os.Stat(filepath.Join(out, "boot-seconds.svg")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("boot-seconds.svg with one target a pass: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(out, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res bench.BootResult
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Modes) != 2 || res.Modes[0].Mode != bench.BootLocal || res.Modes[1].Mode != bench.BootRAMOverflowSmall || res.Modes[1].Solo == nil {
		t.Fatalf("modes %+v; want local and ram-overflow-small, with a solo boot before it", res.Modes)
	}
	solo := *res.Modes[1].Solo
	if n := len(solo.Targets); n != 1 {
		t.Errorf("the solo boot: %d targets", n)
	}
	for _, m := range res.Modes {
		if n := len(m.Targets); n != 1 {
			t.Errorf("%s: %d targets, want 1", m.Mode, n)
		}
	}
	for _, m := range append([]bench.BootMode{solo}, res.Modes...) {
		for _, tg := range m.Targets {
			if tg.Guest.Reads == 0 || tg.Guest.Writes == 0 || tg.Guest.WriteBytes < 16<<20 {
				t.Errorf("%s %s: the guest's disk %+v; want reads, and writes of at least the workload's 16 MiB", m.Mode, tg.Name, tg.Guest)
			}
			if tg.BootSeconds <= 0 || tg.DoneSeconds <= tg.BootSeconds {
				t.Errorf("%s %s: booted at %.1f s, done at %.1f s", m.Mode, tg.Name, tg.BootSeconds, tg.DoneSeconds)
			}
			if m.Mode == bench.BootLocal {
				if tg.Stream != nil || tg.RAM != nil || tg.Overflow != nil {
					t.Errorf("local %s: usher layers %+v", tg.Name, tg)
				}
				continue
			}
			if tg.Stream == nil || tg.RAM == nil || tg.Overflow == nil {
				t.Fatalf("%s %s: a layer is missing: %+v", m.Mode, tg.Name, tg)
			}
			if tg.Stream.Reads == 0 || tg.Stream.Writes != 0 {
				t.Errorf("%s %s: reached the stream %+v; want reads and no writes", m.Mode, tg.Name, *tg.Stream)
			}
			// The device received the guest's writes (QEMU counts its
			// write-zeroes among them and may merge adjacent ones), the
			// workload's 16 MiB of random data at least, and those past
			// 4 MiB overflowed.
			if tg.RAM.Writes == 0 || tg.RAM.Writes+tg.RAM.Zeros > tg.Guest.Writes || tg.RAM.WriteBytes < 16<<20 {
				t.Errorf("%s %s: the device's write cache %+v against the guest's %+v", m.Mode, tg.Name, *tg.RAM, tg.Guest)
			}
			if tg.Overflow.Writes == 0 || tg.Overflow.WriteBytes < 8<<20 {
				t.Errorf("%s %s: overflow %+v; want the writes past the 4 MiB budget", m.Mode, tg.Name, *tg.Overflow)
			}
		}
		if m.Mode == bench.BootLocal {
			continue
		}
		if m.StoreReads == nil || m.StreamReceived == nil || m.StoreReads.Reads == 0 || m.StreamReceived.Reads < m.StoreReads.Reads {
			t.Errorf("%s: the stream received %+v and read %+v from the store", m.Mode, m.StreamReceived, m.StoreReads)
		}
		if m.DiskWrites() == 0 {
			t.Errorf("%s: no write reached a disk file", m.Mode)
		}
	}
	if len(res.Figures) != 3 {
		t.Errorf("%d figures, want 3 (overflow, shared reads, boot time): %+v", len(res.Figures), res.Figures)
	}
	for _, f := range res.Figures {
		if f.Verdict != bench.VerdictMet && f.Verdict != bench.VerdictNotMet {
			t.Errorf("figure %q: verdict %q", f.What, f.Verdict)
		}
		t.Logf("%s (%s): %s, goal %s: %s", f.What, f.Mode, f.Measured, f.Goal, f.Verdict)
	}
	if !strings.Contains(stdout, "Seed 001") || !strings.Contains(stdout, "The issue's figures") {
		t.Errorf("the printed report lacks seed 001's table or the figures:\n%s", stdout)
	}
}

func TestBenchBootWriteMode(t *testing.T) {
	code, _, stderr := run(t, "", "bench", "boot", "--write-mode", "huge")
	if code != 2 || !strings.Contains(stderr, `--write-mode "huge" is not large or small`) {
		t.Errorf("exit %d: %s", code, stderr)
	}
}

// TestBootSlots: usher bench boot gives its VMs as many slots as they
// need to boot at once, without touching the environment, and refuses a
// $USHER_BOOT_VMS that would hold some back.
func TestBootSlots(t *testing.T) {
	for _, tc := range []struct {
		name, env      string
		cpus, targets  int
		want           int
		wantUsageError bool
	}{
		{"unset, more CPUs than targets", "", 8, 4, 8, false},
		{"unset, fewer CPUs than targets", "", 2, 4, 4, false},
		{"not a number", "many", 2, 4, 4, false},
		{"set, enough", "6", 2, 4, 6, false},
		{"set, exactly", "4", 2, 4, 4, false},
		{"set, too few", "3", 8, 4, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := bootSlots(tc.env, tc.cpus, tc.targets)
			var ue usageError
			if gotUE := errors.As(err, &ue); gotUE != tc.wantUsageError || (err != nil) != tc.wantUsageError {
				t.Fatalf("bootSlots(%q, %d, %d): error %v, want a usage error: %v", tc.env, tc.cpus, tc.targets, err, tc.wantUsageError)
			}
			if got != tc.want {
				t.Errorf("bootSlots(%q, %d, %d) = %d, want %d", tc.env, tc.cpus, tc.targets, got, tc.want)
			}
		})
	}
}
