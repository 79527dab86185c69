package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBenchWritecacheTiny(t *testing.T) {
	var out, errb bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	dir := t.TempDir()
	err := m.benchWritecache(context.Background(), []string{"--targets", "2", "--scale", "512", "--dir", filepath.Join(dir, "scratch"),
		"--out", filepath.Join(dir, "out"), "--cpuprofile", filepath.Join(dir, "cpu.pprof")})
	if err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	s := out.String()
	for _, want := range []string{"server-disk", "ram-overflow-small", "device-disk", "disks for 500", "XenDesktop", "goals"} {
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
