package atomicfile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// entries returns the names in dir.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func mustRead(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteFileReplacesWhole(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	if err := WriteFile(name, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(name, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, name); got != "two" {
		t.Fatalf("read %q, want two", got)
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Fatalf("the directory holds %q, want only f (no temporary left)", got)
	}
}

func TestWriteFileKeepsTheModeWhateverTheUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	for _, mode := range []os.FileMode{0o644, 0o600, 0o640, 0o444} {
		name := filepath.Join(dir, mode.String())
		if err := WriteFile(name, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != mode {
			t.Errorf("mode %v, want %v", got, mode)
		}
	}
	// A replacement takes the mode it is given, not the old file's.
	name := filepath.Join(dir, "key")
	if err := WriteFile(name, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(name, []byte("b"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(name); fi.Mode().Perm() != 0o600 {
		t.Errorf("replaced file's mode %v, want 0600", fi.Mode().Perm())
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
	if got := entries(t, dir); len(got) != 2 {
		t.Fatalf("the directory holds %q, want d and f (no temporary left)", got)
	}
	if got := mustRead(t, name); got != "old" {
		t.Fatalf("f holds %q, want old", got)
	}
}

func TestWriteFailureOfTheWriterKeepsOld(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "index")
	if err := WriteFile(name, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(name, 0o600, func(w io.Writer) error {
		// More than the buffer, so that part reaches the temporary file.
		w.Write(bytes.Repeat([]byte("n"), 1<<20))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Write returned %v, want the writer's error", err)
	}
	if got := mustRead(t, name); got != "old" {
		t.Fatalf("index holds %q after a failed write, want old", got)
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Fatalf("the directory holds %q, want only index (no temporary left)", got)
	}
}

func TestWriteFileMissingDirectory(t *testing.T) {
	name := filepath.Join(t.TempDir(), "no", "f")
	if err := WriteFile(name, []byte("x"), 0o600); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("WriteFile in a missing directory returned %v, want ErrNotExist", err)
	}
}

// TestNoPartialFileVisible has readers read the file while it is
// replaced, again and again, by contents of different sizes: each read
// must see one whole content.
func TestNoPartialFileVisible(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "state")
	contents := [][]byte{
		bytes.Repeat([]byte("a"), 3<<20),
		bytes.Repeat([]byte("b"), 100),
		bytes.Repeat([]byte("c"), 700<<10),
	}
	if err := WriteFile(name, contents[0], 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	reads := 0
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				b, err := os.ReadFile(name)
				mu.Lock()
				reads++
				if err != nil {
					bad = append(bad, err.Error())
				} else if !slicesContain(contents, b) {
					bad = append(bad, "a read of "+strconv.Itoa(len(b))+" bytes that is no whole content")
				}
				mu.Unlock()
			}
		}()
	}
	deadline := time.Now().Add(2 * time.Second)
	writes := 0
	for writes < 60 && time.Now().Before(deadline) {
		if err := WriteFile(name, contents[writes%len(contents)], 0o600); err != nil {
			t.Fatal(err)
		}
		writes++
	}
	close(done)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d of %d reads during %d replacements saw no whole file, the first: %s", len(bad), reads, writes, bad[0])
	}
	if reads == 0 || writes < 3 {
		t.Fatalf("%d reads during %d replacements: nothing raced", reads, writes)
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Fatalf("the directory holds %q, want only state", got)
	}
}

func slicesContain(set [][]byte, b []byte) bool {
	for _, s := range set {
		if bytes.Equal(s, b) {
			return true
		}
	}
	return false
}

func TestReplace(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "copy.db")
	if err := WriteFile(name, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := name + ".new"
	if err := os.WriteFile(tmp, []byte("new"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := Replace(tmp, name); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, name); got != "new" {
		t.Fatalf("read %q, want new", got)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the replacement is still at its temporary name: %v", err)
	}
	// A missing replacement changes nothing.
	if err := Replace(tmp, name); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Replace of a missing file returned %v, want ErrNotExist", err)
	}
	if got := mustRead(t, name); got != "new" {
		t.Fatalf("read %q after a failed Replace, want new", got)
	}
}
