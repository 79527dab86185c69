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
	err := m.benchWritecache(context.Background(), []string{"--targets", "2", "--scale", "512", "--dir", filepath.Join(dir, "scratch"), "--out", filepath.Join(dir, "out")})
	if err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	s := out.String()
	for _, want := range []string{"server-disk", "ram-overflow-small", "device-disk", "disks for 500", "XenDesktop", "goals"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "result.json")); err != nil {
		t.Fatal(err)
	}
}
