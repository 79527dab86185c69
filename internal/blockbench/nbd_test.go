package blockbench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRunNBD(t *testing.T) {
	if testing.Short() {
		t.Skip("runs fio")
	}
	fio, err := exec.LookPath("fio")
	if err != nil {
		t.Skip("fio not installed")
	}
	nbdkit, _ := exec.LookPath("nbdkit")
	res, err := RunNBD(context.Background(), NBDConfig{Dir: t.TempDir(), ImageSize: 16 * mib, Runtime: time.Second, Rounds: 1,
		Fio: fio, Nbdkit: nbdkit, Workers: 4, RAMCache: 16 * mib, Tests: []string{TestRandRead, TestCOWWrite}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(res.Tests), 2; got != want {
		t.Fatalf("tests: got %d, want %d", got, want)
	}
	for _, tt := range res.Tests {
		if tt.UsherIOPS <= 0 {
			t.Errorf("%s: usher did no I/O", tt.Test)
		}
		if tt.UsherCPUPerIO <= 0 || tt.ClientCores <= 0 {
			t.Errorf("%s: CPU not measured: usher %v s/IO, fio %v cores", tt.Test, tt.UsherCPUPerIO, tt.ClientCores)
		}
		if nbdkit == "" {
			continue
		}
		if tt.CeilingIOPS <= 0 || tt.NbdkitCPUPerIO <= 0 || tt.Verdict == "" {
			t.Errorf("%s: ceiling %v IOPS, nbdkit %v s/IO, verdict %q", tt.Test, tt.CeilingIOPS, tt.NbdkitCPUPerIO, tt.Verdict)
		}
		// A ratio only where the client leaves 1.5 × room above both.
		if ratio := tt.Ratio > 0; ratio != (tt.CeilingIOPS >= 1.5*max(tt.UsherIOPS, tt.NbdkitIOPS)) {
			t.Errorf("%s: ratio %v with ceiling %.0f, usher %.0f, nbdkit %.0f", tt.Test, tt.Ratio, tt.CeilingIOPS, tt.UsherIOPS, tt.NbdkitIOPS)
		}
	}
	var out bytes.Buffer
	if err := res.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), TestCOWWrite) {
		t.Errorf("table lacks %s:\n%s", TestCOWWrite, out.String())
	}
}

func TestNBDReport(t *testing.T) {
	res := &NBDResult{Runtime: "5s", Rounds: 2, Environment: "loopback", Tests: []NBDTest{
		{Test: TestRandRead, UsherIOPS: 60000, NbdkitIOPS: 64000, Ratio: 0.94, Verdict: "0.94", CeilingIOPS: 100000, Runs: []NBDRun{
			{Server: "usher", Round: 1, IOPS: 59000, BW: 59000 * 4096}, {Server: "nbdkit", Round: 1, IOPS: 65000, BW: 65000 * 4096},
			{Server: "usher", Round: 2, IOPS: 61000, BW: 61000 * 4096}, {Server: "nbdkit", Round: 2, IOPS: 63000, BW: 63000 * 4096}}},
		{Test: TestSeqRead, UsherIOPS: 7000, Runs: []NBDRun{{Server: "usher", Round: 1, IOPS: 7000}, {Server: "usher", Round: 2, IOPS: 7100}}},
	}}
	rep, err := res.Report("usher bench nbd --rounds 2")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(rep.Tables), 2; got != want {
		t.Fatalf("%d tables, want %d", got, want)
	}
	if got, want := len(rep.CSV.Rows), 6; got != want {
		t.Errorf("%d CSV rows, want %d (every run)", got, want)
	}
	// Only the test nbdkit ran has a ratio to plot.
	if len(rep.Figures) != 1 || !strings.Contains(string(rep.Figures[0].SVG), TestRandRead) ||
		strings.Contains(string(rep.Figures[0].SVG), TestSeqRead) {
		t.Errorf("figures %d", len(rep.Figures))
	}
	dir := t.TempDir()
	if err := rep.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "| randread-4k  | nbdkit | 1     | 65000") {
		t.Errorf("report.md:\n%s", md)
	}
}
