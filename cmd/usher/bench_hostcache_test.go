package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/blockbench"
)

// TestBenchHostcache runs seed 003's experiment tiny (2 hosts × 3 VMs,
// a small fraction of the workload), every server and the VMs in
// processes of their own: every pass completes with no I/O error and
// every read byte-correct; after the daemons' restart the VMs cost the
// stream nothing (persist ≥ 99.9 % fewer central I/Os than the baseline,
// in all and in the busiest second); the cold storm reads each block
// once per host. nbdkit's passes and the 4 KiB comparison run when
// nbdkit and fio are installed; their ratio is not judged at this size.
func TestBenchHostcache(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a stream, host caches, nbdkits and load generators")
	}
	_, errNbdkit := exec.LookPath("nbdkit")
	_, errFio := exec.LookPath("fio")
	dir := t.TempDir()
	args := []string{"bench", "hostcache", "--hosts", "2", "--vms", "3", "--scale", "200", "--steady", "1s", "--rounds", "1", "--runtime", "1s",
		"--dir", filepath.Join(dir, "scratch"), "--out", filepath.Join(dir, "out")}
	if errNbdkit != nil {
		args = append(args, "--nbdkit", "")
	}
	if errFio != nil {
		args = append(args, "--fio", "")
	}
	code, stdout, stderr := run(t, "", args...)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	b, err := os.ReadFile(filepath.Join(dir, "out", "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res blockbench.HostcacheResult
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	want := []string{"baseline", "cold", "warm", "persist"}
	if errNbdkit == nil {
		want = append(want, "nbdkit-cold", "nbdkit-warm")
	}
	var names []string
	for _, p := range res.Passes {
		names = append(names, p.Name)
		vm := p.VMs
		if vm.Boot.Errors+vm.Steady.Errors+vm.Boot.Mismatches+vm.Steady.Mismatches != 0 {
			t.Errorf("%s: %d errors, %d wrong reads: %s%s", p.Name, vm.Boot.Errors+vm.Steady.Errors, vm.Boot.Mismatches+vm.Steady.Mismatches,
				vm.Boot.FirstError, vm.Steady.FirstError)
		}
		if vm.Boot.Reads == 0 || vm.Steady.Writes == 0 || len(vm.Hosts) != 2 {
			t.Errorf("%s: %d boot reads, %d steady writes, %d hosts", p.Name, vm.Boot.Reads, vm.Steady.Writes, len(vm.Hosts))
		}
	}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("passes %v; want %v", names, want)
	}
	base, _ := res.Pass("baseline")
	persist, _ := res.Pass("persist")
	cold, _ := res.Pass("cold")
	if base.Total.Reads == 0 || base.Total.Writes == 0 || base.Total.MaxTotal <= 0 {
		t.Fatalf("the baseline cost the stream %d reads, %d writes, at most %.0f IOPS", base.Total.Reads, base.Total.Writes, base.Total.MaxTotal)
	}
	if r := 1 - float64(persist.Total.Total())/float64(base.Total.Total()); r < blockbench.GoalPersistReduction {
		t.Errorf("persist: %d central I/Os against the baseline's %d: %.4f fewer", persist.Total.Total(), base.Total.Total(), r)
	}
	if r := 1 - persist.Total.MaxTotal/base.Total.MaxTotal; r < blockbench.GoalPersistReduction {
		t.Errorf("persist: at most %.0f central IOPS against the baseline's %.0f", persist.Total.MaxTotal, base.Total.MaxTotal)
	}
	if len(cold.Upstream) != 2 {
		t.Fatalf("cold: upstream reads of %d hosts", len(cold.Upstream))
	}
	for _, h := range cold.Upstream {
		if h.BootBlocks == 0 || h.Ratio() > blockbench.GoalStormRatio || h.Ratio() < 1 {
			t.Errorf("cold storm, host %d: %d upstream reads for %d distinct blocks", h.Host, h.BootReads, h.BootBlocks)
		}
	}
	if cold.Total.Writes != 0 {
		t.Errorf("cold: %d VM writes reached the stream; they stay on the host", cold.Total.Writes)
	}
	for _, f := range []string{"figure: persist", "figure: cold storm", "Seed 003", "22,729", "Report: "} {
		if !strings.Contains(stdout, f) {
			t.Errorf("the output lacks %q:\n%s", f, stdout)
		}
	}
	if !strings.Contains(stderr, "hostcache: cold: booted") {
		t.Errorf("no progress on stderr:\n%s", stderr)
	}
	rep := readReport(t, filepath.Join(dir, "out"))
	if len(rep.Headlines) < 2 {
		t.Errorf("%d headlines", len(rep.Headlines))
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "central-iops.svg")); err != nil {
		t.Error(err)
	}

	t.Run("nbdkit", func(t *testing.T) {
		if errNbdkit != nil || errFio != nil {
			t.Skip("nbdkit or fio is not installed (scripts/test installs them)")
		}
		k, _ := res.Pass("nbdkit-cold")
		if k.Total.Reads == 0 || k.Total.Writes != 0 {
			t.Errorf("nbdkit cold: %d central reads, %d writes", k.Total.Reads, k.Total.Writes)
		}
		r := res.Reads
		if r == nil || r.UsherIOPS <= 0 || r.NbdkitIOPS <= 0 || r.CeilingIOPS <= 0 || r.Verdict == "" {
			t.Fatalf("the 4 KiB read comparison: %+v", r)
		}
	})
}
