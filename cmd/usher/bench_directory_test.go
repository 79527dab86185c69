package main

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/bench"
	"github.com/usher-vdi/usher/internal/dirserver"
)

// TestBenchLogonStormDirectory runs usher bench logon-storm --directory,
// small, against a real slapd: every logon of every phase succeeds, each
// directory user's first logon binds as the user at least once, and the
// warm logons bind none.
func TestBenchLogonStormDirectory(t *testing.T) {
	if err := dirserver.Installed(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	const users = 30
	out := t.TempDir()
	code, stdout, stderr := run(t, "", "bench", "logon-storm", "--directory", "--users", strconv.Itoa(users), "--workers", "4", "--warm-rounds", "3", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	for _, want := range []string{"Directory operations per logon", "| " + bench.PhaseDirWarm, "user_bind"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	t.Logf("usher bench logon-storm --directory:\n%s", stdout)

	rep := readReport(t, out)
	phases := []string{bench.PhaseLocal, bench.PhaseLocalWarm, bench.PhaseDirCold, bench.PhaseDirWarm}
	if len(rep.Runs) != len(phases) {
		t.Fatalf("%d runs, want %d", len(rep.Runs), len(phases))
	}
	for i, r := range rep.Runs {
		s, want := r.Result.Steps[0], int64(users)
		if r.Name == bench.PhaseLocalWarm || r.Name == bench.PhaseDirWarm {
			want = 3 * int64(users) // --warm-rounds
		}
		if r.Name != phases[i] || s.Requests != want || s.OK != want || s.Errors != 0 {
			t.Errorf("run %d %q: %d logons, %d ok, %d errors (%v); want %q, %d ok", i, r.Name, s.Requests, s.OK, s.Errors, s.ErrorsByKind, phases[i], want)
		}
	}
	if len(rep.Headlines) != 2 {
		t.Errorf("headlines %+v, want the cold and the warm directory logons", rep.Headlines)
	}

	// report.csv: a row per phase, with the directory's operations.
	f, err := os.Open(filepath.Join(out, "report.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	count := func(phase, column string) float64 {
		t.Helper()
		col := -1
		for i, h := range rows[0] {
			if h == column {
				col = i
			}
		}
		for _, row := range rows[1:] {
			if row[0] == phase && col >= 0 {
				n, err := strconv.ParseFloat(row[col], 64)
				if err != nil {
					t.Fatalf("report.csv %s %s: %q", phase, column, row[col])
				}
				return n
			}
		}
		t.Fatalf("report.csv has no %s of %s:\n%v", column, phase, rows)
		return 0
	}
	if n := count(bench.PhaseDirCold, "user_bind"); n < users {
		t.Errorf("cold: %v user binds for %d users", n, users)
	}
	if n := count(bench.PhaseDirCold, "user_search"); n < users {
		t.Errorf("cold: %v user searches for %d users", n, users)
	}
	for _, op := range []string{"user_bind", "user_search", "group_search"} {
		if n := count(bench.PhaseDirWarm, op); n != 0 {
			t.Errorf("warm: %v %s operations, want none", n, op)
		}
	}
	for _, phase := range []string{bench.PhaseLocal, bench.PhaseLocalWarm} {
		if n := count(phase, "user_bind"); n != 0 {
			t.Errorf("%s: %v user binds, want none", phase, n)
		}
	}
	if n := count(bench.PhaseDirCold, "failed_ops") + count(bench.PhaseDirWarm, "failed_ops"); n != 0 {
		t.Errorf("%v directory operations failed", n)
	}
}

func TestBenchLogonStormDirectoryFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rate", "5"}, "--rate does not apply with --directory"},
		{[]string{"--ramp", "10"}, "--ramp does not apply with --directory"},
		{[]string{"--users", "0"}, "--users must be 1 to 100000"},
		{[]string{"--workers", "0"}, "--workers must be positive"},
	} {
		code, _, stderr := run(t, "", append([]string{"bench", "logon-storm", "--directory", "--out", ""}, tc.args...)...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %s; want %q", tc.args, code, stderr, tc.want)
		}
	}
}
