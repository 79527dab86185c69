package writecache_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/block/writecache"
)

const crashEnv = "USHER_WRITECACHE_CRASH_CHILD"

// TestFlushSurvivesSIGKILL writes through NBD into a persistent overlay
// served by a child process, flushes, kills the child with SIGKILL and
// checks that the flushed data is found when the overlay is reopened.
func TestFlushSurvivesSIGKILL(t *testing.T) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crashChild(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFlushSurvivesSIGKILL$")
	cmd.Env = append(os.Environ(), crashEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "ready" {
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := nbd.Dial(ctx, "unix", filepath.Join(dir, "sock"), "")
	if err != nil {
		t.Fatal(err)
	}
	flushed := bytes.Repeat([]byte("flushed!"), 4096/8*3)
	if err := c.WriteAt(ctx, flushed, 8192, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteAt(ctx, []byte("partial block"), 100, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	fua := bytes.Repeat([]byte{0xf0}, 4096)
	if err := c.WriteAt(ctx, fua, 1<<19, block.FUA); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill() // SIGKILL
	cmd.Wait()
	c.Close()

	o, err := writecache.OpenOverlay(zeroBase(), filepath.Join(dir, "overlay"), true)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	for _, w := range []struct {
		off  int64
		data []byte
	}{{8192, flushed}, {100, []byte("partial block")}, {1 << 19, fua}} {
		got := make([]byte, len(w.data))
		if err := o.ReadAt(context.Background(), got, w.off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, w.data) {
			t.Fatalf("data at %d acknowledged as stable was lost after SIGKILL", w.off)
		}
	}
}

func zeroBase() block.Device { return readOnlyBase(1 << 20) }

func crashChild(dir string) {
	o, err := writecache.OpenOverlay(zeroBase(), filepath.Join(dir, "overlay"), true)
	if err != nil {
		panic(err)
	}
	ln, err := nbd.Listen("unix:" + filepath.Join(dir, "sock"))
	if err != nil {
		panic(err)
	}
	s := &nbd.Server{Exports: nbd.Devices{"": o}}
	os.Stdout.WriteString("ready\n")
	s.Serve(ln) // until killed
}

func TestFilesAreOwnerOnly(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	dir := t.TempDir()
	path := filepath.Join(dir, "overlay")
	overflow := filepath.Join(dir, "overflow")
	for _, p := range []string{path, overflow} { // left wide by an earlier run
		if err := os.WriteFile(p, nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	o, err := writecache.OpenOverlay(zeroBase(), path, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.WriteAt(context.Background(), make([]byte, 4096), 0, block.FUA); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	of, err := block.CreateFile(overflow, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	of.Close()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("%s: mode %o, want 600", e.Name(), got)
		}
	}
}

// TestCloseKeepsUnflushedWrites: a persistent overlay closed in order
// (its client disconnected without a last flush) keeps every write.
func TestCloseKeepsUnflushedWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "overlay")
	o, err := writecache.OpenOverlay(zeroBase(), path, true)
	if err != nil {
		t.Fatal(err)
	}
	w := bytes.Repeat([]byte("unflushed"), 1000)
	if err := o.WriteAt(ctx, w, 12345, 0); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	o, err = writecache.OpenOverlay(zeroBase(), path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	got := make([]byte, len(w))
	if err := o.ReadAt(ctx, got, 12345); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, w) {
		t.Fatal("writes not flushed before an orderly close were lost")
	}
}
