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

func TestParseSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"4096", 4096, true}, {"512MiB", 512 << 20, true}, {"4k", 4096, true},
		{"1G", 1 << 30, true}, {"2gb", 2 << 30, true}, {"", 0, false}, {"-1", 0, false}, {"12x", 0, false},
	} {
		got, err := block.ParseSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
