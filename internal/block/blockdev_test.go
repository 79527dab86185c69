package block_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/block"
)

// TestCreateFileBlockDevice: CreateFile on a block device (a loop device
// over a file, standing in for a target's local disk) opens it as it
// is: its size is the device's, not the one asked for, nothing is
// truncated, its mode is left alone, and writes reach it.
func TestCreateFileBlockDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a loop device")
	}
	losetup, err := exec.LookPath("losetup")
	if err != nil {
		t.Skip("losetup is not installed")
	}
	backing := filepath.Join(t.TempDir(), "disk")
	const size = 4 << 20
	old := bytes.Repeat([]byte{0xa5}, size)
	if err := os.WriteFile(backing, old, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(losetup, "--find", "--show", backing).CombinedOutput()
	if err != nil {
		t.Skipf("no loop device here: %v %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command(losetup, "--detach", dev).Run() })
	before, err := os.Stat(dev)
	if err != nil {
		t.Fatal(err)
	}

	f, err := block.CreateFile(dev, 1<<40)
	if err != nil {
		t.Fatalf("CreateFile(%s): %v", dev, err)
	}
	if got := f.Size(); got != size {
		t.Errorf("size %d, want the device's %d", got, size)
	}
	ctx := context.Background()
	got := make([]byte, 4096)
	if err := f.ReadAt(ctx, got, size-4096); err != nil || got[0] != 0xa5 {
		t.Errorf("the device's end reads %x (%v): truncated?", got[:4], err)
	}
	data := bytes.Repeat([]byte("usher"), 4096/5+1)[:4096]
	if err := f.WriteAt(ctx, data, 8192, block.FUA); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(dev)
	if err != nil {
		t.Fatalf("the device node is gone: %v", err)
	}
	if after.Mode() != before.Mode() {
		t.Errorf("mode %v, was %v", after.Mode(), before.Mode())
	}
	b, err := os.ReadFile(backing)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != size || !bytes.Equal(b[8192:8192+4096], data) || b[0] != 0xa5 {
		t.Errorf("the backing file: %d bytes, the write there: %v", len(b), bytes.Equal(b[8192:8192+4096], data))
	}
}
