package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestBenchWritecacheModelTiny(t *testing.T) {
	var out, errb bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	dir := t.TempDir()
	err := m.benchWritecache(context.Background(), []string{"--model", "--targets", "2", "--scale", "512", "--dir", filepath.Join(dir, "scratch"),
		"--out", filepath.Join(dir, "out"), "--cpuprofile", filepath.Join(dir, "cpu.pprof")})
	if err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	s := out.String()
	for _, want := range []string{"A MODEL on a virtual clock", "server-disk", "ram-overflow-small", "device-disk", "disks for 500", "XenDesktop", "goals"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	for _, name := range []string{"result.json", "report.md", "report.json", "report.csv", "report.html", "disk-iops.svg", "../cpu.pprof"} {
		if fi, err := os.Stat(filepath.Join(dir, "out", name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "out", "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| mode ", "| ram-overflow-small ", "XenDesktop", "Goal: "} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	csv, err := os.ReadFile(filepath.Join(dir, "out", "report.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(csv), "mode,RAM budget,") || !strings.Contains(string(csv), "\nserver-disk,") {
		t.Errorf("report.csv:\n%s", csv)
	}
}

// TestBenchWritecacheMeasured runs the measured bench small: every mode
// ran fio, the disk modes wrote to their files and the RAM mode with room
// did not, and the report holds the published table beside.
func TestBenchWritecacheMeasured(t *testing.T) {
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("fio is not installed (scripts/test installs it)")
	}
	dir := t.TempDir()
	code, stdout, stderr := run(t, "", "bench", "writecache", "--targets", "2", "--size", "16MiB", "--boot", "4MiB", "--steady", "1s",
		"--steady-iops", "100", "--dir", filepath.Join(dir, "scratch"), "--out", filepath.Join(dir, "out"))
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	rep := readReport(t, filepath.Join(dir, "out"))
	tb := rep.Tables[0]
	col := func(name string) int {
		i := slices.Index(tb.Header, name)
		if i < 0 {
			t.Fatalf("no column %q in %v", name, tb.Header)
		}
		return i
	}
	client, file := col("client IOPS"), col("cache-file IOPS")
	rows := map[string][]string{}
	for _, r := range tb.Rows {
		rows[r[0]] = r
	}
	for _, mode := range []string{"server-disk", "device-ram", "ram-overflow", "ram-overflow-small", "device-disk"} {
		r, ok := rows[mode]
		if !ok || r[client] == "0" {
			t.Errorf("%s: %v", mode, r)
		}
	}
	if rows["server-disk"][file] == "0.0" || rows["device-ram"][file] != "0.0" || rows["ram-overflow"][file] != "0.0" {
		t.Errorf("cache-file IOPS: server-disk %s, device-ram %s, ram-overflow %s", rows["server-disk"][file], rows["device-ram"][file], rows["ram-overflow"][file])
	}
	if !strings.Contains(stdout, "XenDesktop") || len(rep.Headlines) != 5 {
		t.Errorf("no published table or headlines (%d):\n%s", len(rep.Headlines), stdout)
	}
}
