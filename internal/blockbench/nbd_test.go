package blockbench

import (
	"bytes"
	"context"
	"os/exec"
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
		if nbdkit != "" && tt.Ratio <= 0 {
			t.Errorf("%s: no ratio", tt.Test)
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
