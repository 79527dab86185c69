package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileReplacesWhole(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	if err := WriteFile(name, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(name, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(name)
	if err != nil || string(got) != "two" {
		t.Fatalf("read %q, %v; want two", got, err)
	}
	fi, _ := os.Stat(name)
	if fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, want 0644", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("%d files in the directory, want 1 (no temporary left)", len(entries))
	}
}

func TestWriteFileFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	if err := WriteFile(name, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory where the file should go: the rename fails.
	bad := filepath.Join(dir, "d")
	if err := os.Mkdir(bad, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(bad, []byte("new"), 0o600); err == nil {
		t.Fatal("replacing a non-empty directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("%d entries, want 2 (no temporary left)", len(entries))
	}
}
