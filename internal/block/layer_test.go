package block_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/blocktest"
)

// memoryWith is a writable Memory holding content.
func memoryWith(t *testing.T, content []byte) *block.Memory {
	t.Helper()
	m := block.NewMemory(int64(len(content)))
	if err := m.WriteAt(context.Background(), content, 0, 0); err != nil {
		t.Fatal(err)
	}
	return m
}

// fileWith is a read-only File holding content.
func fileWith(t *testing.T, content []byte) *block.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk")
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := block.OpenFile(path, true)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestMemoryReader(t *testing.T) {
	blocktest.RunReader(t, func(t *testing.T, content []byte) block.Device {
		m := memoryWith(t, content)
		m.SetReadOnly(true)
		return m
	})
}

func TestFileReader(t *testing.T) {
	blocktest.RunReader(t, func(t *testing.T, content []byte) block.Device { return fileWith(t, content) })
}

func TestReadOnly(t *testing.T) {
	t.Run("OverWritableMemory", func(t *testing.T) {
		blocktest.RunReader(t, func(t *testing.T, content []byte) block.Device {
			return block.ReadOnly(memoryWith(t, content))
		})
		blocktest.RunReadOnly(t, block.ReadOnly(memoryWith(t, blocktest.Content())))
	})
	t.Run("OverFile", func(t *testing.T) {
		blocktest.RunReader(t, func(t *testing.T, content []byte) block.Device {
			return block.ReadOnly(fileWith(t, content))
		})
	})
	t.Run("KeepsReadSideInterfaces", func(t *testing.T) {
		d := block.ReadOnly(block.NewMemory(4096))
		if _, ok := block.As[block.Extenter](d); !ok {
			t.Fatal("As found no Extenter under ReadOnly")
		}
		if _, ok := block.As[block.MemReader](d); ok {
			t.Fatal("As found a MemReader that Memory does not have")
		}
	})
	t.Run("ClosesTheDevice", func(t *testing.T) {
		f := fileWith(t, make([]byte, 4096))
		if err := block.ReadOnly(f).Close(); err != nil {
			t.Fatal(err)
		}
		if err := f.ReadAt(context.Background(), make([]byte, 1), 0); err == nil {
			t.Fatal("the file still reads after closing the ReadOnly view")
		}
	})
}

func TestNopCloser(t *testing.T) {
	blocktest.Run(t, func(t *testing.T) block.Device {
		return block.NopCloser(block.NewMemory(blocktest.Size))
	})
	t.Run("KeepsInlineWrites", func(t *testing.T) {
		if _, ok := block.As[block.InlineWriter](block.NopCloser(block.NewMemory(4096))); !ok {
			t.Fatal("As found no InlineWriter under NopCloser")
		}
	})
	t.Run("DoesNotClose", func(t *testing.T) {
		f := fileWith(t, make([]byte, 4096))
		defer f.Close()
		if err := block.NopCloser(f).Close(); err != nil {
			t.Fatal(err)
		}
		if err := f.ReadAt(context.Background(), make([]byte, 1), 0); err != nil {
			t.Fatalf("read after closing the NopCloser: %v", err)
		}
	})
	t.Run("StacksWithReadOnly", func(t *testing.T) {
		m := block.NewMemory(blocktest.Size)
		blocktest.RunReadOnly(t, block.NopCloser(block.ReadOnly(m)))
		blocktest.RunReadOnly(t, block.ReadOnly(block.NopCloser(m)))
	})
}
