package block_test

import (
	"path/filepath"
	"testing"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/blocktest"
)

func TestMemory(t *testing.T) {
	blocktest.Run(t, func(t *testing.T) block.Device { return block.NewMemory(blocktest.Size) })
	m := block.NewMemory(4096)
	m.SetReadOnly(true)
	blocktest.RunReadOnly(t, m)
}

func TestFile(t *testing.T) {
	blocktest.Run(t, func(t *testing.T) block.Device {
		f, err := block.CreateFile(filepath.Join(t.TempDir(), "disk"), blocktest.Size)
		if err != nil {
			t.Fatal(err)
		}
		return f
	})
	path := filepath.Join(t.TempDir(), "ro")
	f, err := block.CreateFile(path, 4096)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	ro, err := block.OpenFile(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	blocktest.RunReadOnly(t, ro)
}
