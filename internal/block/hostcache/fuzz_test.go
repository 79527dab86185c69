package hostcache

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/usher-vdi/usher/internal/block"
)

// FuzzIndex: any bytes after a valid header, as the index a crash or a
// bad disk leaves, open without a panic or a slot out of range, and
// reads through the cache still return their whole length.
func FuzzIndex(f *testing.F) {
	var k Key
	f.Add([]byte{})
	f.Add(record(0, slot{key: k, length: 4096, crc: 1}))
	f.Add(append(record(3, slot{key: k, length: 512, crc: 7}), record(1, slot{key: k, length: 4096})...))
	f.Add(record(1<<30, slot{length: 1 << 20}))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, IndexFile), append(header(4096), data...), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Open(dir, Options{Size: 16 * 4096, BlockSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		up := block.NewMemory(64 << 10)
		d := c.Wrap(up, "img")
		p := make([]byte, 10000)
		if err := d.ReadAt(context.Background(), p, 3000); err != nil {
			t.Fatal(err)
		}
		if st := c.Stats(); st.Used > st.Slots {
			t.Fatalf("%d blocks used of %d slots", st.Used, st.Slots)
		}
	})
}
