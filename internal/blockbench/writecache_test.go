package blockbench

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// tinyWorkload is the default workload scaled down 512 times: a few
// hundred operations per target.
func tinyWorkload() Workload {
	w := DefaultWorkload()
	w.Scale = 512
	return w
}

func TestRunWritecache(t *testing.T) {
	res, err := RunWritecache(context.Background(), WritecacheConfig{Targets: 2, Workload: tinyWorkload(), Dir: t.TempDir(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(res.Modes), len(Modes); got != want {
		t.Fatalf("modes: got %d, want %d", got, want)
	}
	sd, _ := res.Mode(ModeServerDisk)
	ro, _ := res.Mode(ModeRAMOverflow)
	ram, _ := res.Mode(ModeDeviceRAM)
	if sd.DiskOpsPerTarget == 0 || sd.P95IOPS == 0 {
		t.Fatalf("server-disk reached no disk: %+v", sd)
	}
	if ro.DiskOpsPerTarget > sd.DiskOpsPerTarget/100 {
		t.Fatalf("ram-overflow disk ops %.1f per target, server-disk %.1f: want 100x fewer", ro.DiskOpsPerTarget, sd.DiskOpsPerTarget)
	}
	if ram.FailedWrites != 0 || ram.DiskOpsPerTarget != 0 {
		t.Fatalf("device RAM with a budget that holds the working set: %+v", ram)
	}
	if ro.OpsPerTarget != sd.OpsPerTarget {
		t.Fatalf("modes replayed different work: %.0f and %.0f ops per target", ro.OpsPerTarget, sd.OpsPerTarget)
	}

	var out bytes.Buffer
	if err := res.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range append(append([]string{}, Modes...), "XenDesktop", "disks for 500", "goals") {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
}

func TestOpsScaleKeepsRates(t *testing.T) {
	a, b := DefaultWorkload(), DefaultWorkload()
	a.Scale, b.Scale = 64, 128
	na, nb := len(a.ops(0, 1, 1)), len(b.ops(0, 1, 1))
	if r := float64(na) / float64(nb); r < 1.9 || r > 2.1 {
		t.Fatalf("halving the scale should double the operations: %d and %d", na, nb)
	}
}
