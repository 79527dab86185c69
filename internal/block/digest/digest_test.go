package digest_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/digest"
)

func device(t testing.TB, size int) (*block.Memory, []byte) {
	t.Helper()
	p := make([]byte, size)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	clear(p[digest.BlockSize : 2*digest.BlockSize]) // a zero block
	m := block.NewMemory(int64(size))
	if err := m.WriteAt(context.Background(), p, 0, 0); err != nil {
		t.Fatal(err)
	}
	return m, p
}

func TestComputeAndRoundTrip(t *testing.T) {
	size := 5*digest.BlockSize + 1000 // a short last block
	m, p := device(t, size)
	tab, err := digest.Compute(context.Background(), m, digest.BlockSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.Sums) != 6 || tab.Len(5) != 1000 {
		t.Fatalf("%d sums, last of %d bytes", len(tab.Sums), tab.Len(5))
	}
	for i := range tab.Sums {
		off := i * digest.BlockSize
		if want := digest.Of(p[off:min(size, off+digest.BlockSize)]); tab.Sums[i] != want {
			t.Fatalf("block %d: wrong digest", i)
		}
	}
	if !digest.IsZero(tab.Sums[1], digest.BlockSize) || digest.IsZero(tab.Sums[0], digest.BlockSize) {
		t.Fatal("IsZero is wrong")
	}
	b, _ := tab.MarshalBinary()
	if int64(len(b)) != tab.EncodedSize() {
		t.Fatalf("%d bytes, EncodedSize %d", len(b), tab.EncodedSize())
	}
	var got digest.Table
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if got.Size != tab.Size || got.BlockSize != tab.BlockSize || len(got.Sums) != len(tab.Sums) || got.Sums[3] != tab.Sums[3] {
		t.Fatal("the table does not survive its wire form")
	}
	// Damage anywhere is refused.
	for _, at := range []int{0, 9, 13, 20, 25, digest.HeaderSize + 40} {
		bad := bytes.Clone(b)
		bad[at] ^= 1
		if err := got.UnmarshalBinary(bad); err == nil {
			t.Fatalf("a flipped bit at %d was accepted", at)
		}
	}
	if err := got.UnmarshalBinary(b[:len(b)-32]); err == nil {
		t.Fatal("a short table was accepted")
	}

	// Update recomputes only what it is told.
	q := bytes.Repeat([]byte{7}, digest.BlockSize)
	m.WriteAt(context.Background(), q, 3*digest.BlockSize, 0)
	old := tab.Sums[3]
	if err := tab.Update(context.Background(), m, []int64{3}, nil); err != nil {
		t.Fatal(err)
	}
	if tab.Sums[3] == old || tab.Sums[3] != digest.Of(q) {
		t.Fatal("Update did not recompute block 3")
	}
}

func TestExportName(t *testing.T) {
	n := digest.ExportName("win11@3")
	if got, ok := digest.ParseExportName(n); !ok || got != "win11@3" {
		t.Fatalf("%q -> %q %v", n, got, ok)
	}
	if _, ok := digest.ParseExportName("win11@3"); ok {
		t.Fatal("an image's export parsed as a table's")
	}
}

func FuzzUnmarshal(f *testing.F) {
	m, _ := device(f, 3*digest.BlockSize)
	tab, _ := digest.Compute(context.Background(), m, digest.BlockSize, nil)
	b, _ := tab.MarshalBinary()
	f.Add(b)
	f.Add(b[:digest.HeaderSize])
	f.Fuzz(func(t *testing.T, b []byte) {
		var tab digest.Table
		if err := tab.UnmarshalBinary(b); err != nil {
			return
		}
		again, _ := tab.MarshalBinary()
		if !bytes.Equal(again, b) {
			t.Fatal("an accepted table does not encode back to itself")
		}
	})
}
