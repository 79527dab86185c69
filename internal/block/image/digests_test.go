package image_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/usher-vdi/usher/internal/block/digest"
	"github.com/usher-vdi/usher/internal/block/image"
)

// digestSize is an image size that is a multiple neither of
// digest.BlockSize nor of 4 KiB: its last block is short.
const digestSize = 7*digest.BlockSize + 3*4096 + 123

// digestContent is digestSize bytes, each 64 KiB block its own but
// block 2, zeros.
func digestContent() []byte {
	p := make([]byte, digestSize)
	for i := range p {
		p[i] = byte(i/digest.BlockSize*7 + i%251)
	}
	clear(p[2*digest.BlockSize : 3*digest.BlockSize])
	return p
}

// digestStore returns a store in dir holding image "img" imported from
// content, version 0 in production.
func digestStore(t *testing.T, content []byte) (st *image.Store, imgDir string) {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.raw")
	must(t, os.WriteFile(src, content, 0o644))
	st, err := image.Create(filepath.Join(dir, "store"))
	must(t, err)
	_, err = st.Import(context.Background(), "img", src)
	must(t, err)
	return st, filepath.Join(dir, "store", "img")
}

// newDelta adds version n in maintenance, writes each of writes (offset
// → bytes) into it and promotes it to test.
func newDelta(t *testing.T, st *image.Store, writes map[int64][]byte) int {
	t.Helper()
	ctx := context.Background()
	v, err := st.NewVersion(ctx, "img", "")
	must(t, err)
	d := openVersion(t, st, v.Number, true)
	for off, p := range writes {
		must(t, d.WriteAt(ctx, p, off, 0))
	}
	must(t, d.Flush(ctx))
	must(t, d.Close())
	_, err = st.Promote(ctx, "img", v.Number)
	must(t, err)
	return v.Number
}

// computed is the table of version n as digest.Compute reads it.
func computed(t *testing.T, st *image.Store, n int) *digest.Table {
	t.Helper()
	d := openVersion(t, st, n, false)
	defer d.Close()
	tab, err := digest.Compute(context.Background(), d, digest.BlockSize, nil)
	must(t, err)
	return tab
}

func digestsOf(t *testing.T, st *image.Store, n int) *digest.Table {
	t.Helper()
	tab, err := st.Digests(context.Background(), "img", n)
	must(t, err)
	return tab
}

// fileTable reads version n's table file.
func fileTable(t *testing.T, imgDir string, n int) *digest.Table {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(imgDir, fmt.Sprintf("v%d.digests", n)))
	must(t, err)
	var tab digest.Table
	must(t, tab.UnmarshalBinary(b))
	return &tab
}

func sameTable(t *testing.T, what string, got, want *digest.Table) {
	t.Helper()
	if got.BlockSize != want.BlockSize || got.Size != want.Size || len(got.Sums) != len(want.Sums) {
		t.Fatalf("%s: a table of %d blocks of %d bytes for %d bytes, want %d of %d for %d",
			what, len(got.Sums), got.BlockSize, got.Size, len(want.Sums), want.BlockSize, want.Size)
	}
	for i := range got.Sums {
		if got.Sums[i] != want.Sums[i] {
			t.Fatalf("%s: block %d's digest differs", what, i)
		}
	}
}

func TestImportComputesDigests(t *testing.T) {
	content := digestContent()
	st, dir := digestStore(t, content)
	want := computed(t, st, 0)
	if got := int64(len(want.Sums)); got != 8 || want.Len(7) != 3*4096+123 {
		t.Fatalf("the test image has %d blocks, the last of %d bytes", got, want.Len(7))
	}
	sameTable(t, "v0.digests", fileTable(t, dir, 0), want)
	sameTable(t, "Digests", digestsOf(t, st, 0), want)
	if got := digestsOf(t, st, 0).Sums[7]; got != digest.Of(content[7*digest.BlockSize:]) {
		t.Fatal("the short last block's digest is not of its bytes")
	}
	if !digest.IsZero(want.Sums[2], digest.BlockSize) {
		t.Fatal("the zero block's digest is not the zero digest")
	}
	// atomicfile's temporary files are hidden ones beside the file.
	if tmp, _ := filepath.Glob(filepath.Join(dir, ".*")); len(tmp) > 0 {
		t.Fatalf("temporary files left: %v", tmp)
	}
}

func TestPromoteComputesChangedBlocks(t *testing.T) {
	ctx := context.Background()
	st, dir := digestStore(t, digestContent())
	v, err := st.NewVersion(ctx, "img", "")
	must(t, err)
	if _, err := st.Digests(ctx, "img", v.Number); !errors.Is(err, image.ErrState) || !strings.Contains(err.Error(), "no digests until it is promoted") {
		t.Fatalf("digests of a maintenance version: %v, want ErrState", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "v1.digests")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a maintenance version has a table file: %v", err)
	}
	d := openVersion(t, st, v.Number, true)
	must(t, d.WriteAt(ctx, []byte("one 4 KiB block of block 1"), digest.BlockSize+5*4096, 0))
	must(t, d.WriteAt(ctx, []byte("across blocks 3 and 4"), 4*digest.BlockSize-10, 0))
	must(t, d.WriteAt(ctx, []byte("the short last block"), digestSize-30, 0))
	must(t, d.WriteAt(ctx, make([]byte, 4096), 0, 0)) // zeros over data
	must(t, d.Flush(ctx))
	must(t, d.Close())
	_, err = st.Promote(ctx, "img", v.Number)
	must(t, err)

	parent, got := digestsOf(t, st, 0), digestsOf(t, st, v.Number)
	sameTable(t, "promoted delta", got, computed(t, st, v.Number))
	sameTable(t, "v1.digests", fileTable(t, dir, v.Number), got)
	changed := map[int]bool{0: true, 1: true, 3: true, 4: true, 7: true}
	for i := range got.Sums {
		if same := got.Sums[i] == parent.Sums[i]; same == changed[i] {
			t.Errorf("block %d: same as the parent's %v, want %v", i, same, !changed[i])
		}
	}
	// Test → production keeps the table.
	_, err = st.Promote(ctx, "img", v.Number)
	must(t, err)
	sameTable(t, "in production", digestsOf(t, st, v.Number), got)

	stats, err := st.InspectDigests(ctx, "img", v.Number)
	must(t, err)
	if want := (image.DigestStats{Blocks: 8, Distinct: 8, Zero: 1, Changed: 5}); stats != want {
		t.Fatalf("InspectDigests = %+v, want %+v", stats, want)
	}
}

// A maintenance version's writer that disconnects without a last flush
// loses nothing: the promoted version has the writes, and its table
// their digests.
func TestPromoteUnflushedWrites(t *testing.T) {
	ctx := context.Background()
	st, _ := digestStore(t, digestContent())
	v, err := st.NewVersion(ctx, "img", "")
	must(t, err)
	d := openVersion(t, st, v.Number, true)
	p := bytes.Repeat([]byte{9}, digest.BlockSize)
	must(t, d.WriteAt(ctx, p, digest.BlockSize, 0))
	must(t, d.Close())
	_, err = st.Promote(ctx, "img", v.Number)
	must(t, err)
	r := openVersion(t, st, v.Number, false)
	defer r.Close()
	got := make([]byte, digest.BlockSize)
	must(t, r.ReadAt(ctx, got, digest.BlockSize))
	if !bytes.Equal(got, p) {
		t.Fatal("a write not flushed before the writer closed was lost")
	}
	sameTable(t, "promoted", digestsOf(t, st, v.Number), computed(t, st, v.Number))
}

// A delta that rewrites a block with the bytes it had keeps the block's
// digest: the table says what the content is, not what was written.
func TestPromoteRewriteSameBytes(t *testing.T) {
	content := digestContent()
	st, _ := digestStore(t, content)
	n := newDelta(t, st, map[int64][]byte{5 * digest.BlockSize: content[5*digest.BlockSize : 5*digest.BlockSize+4096]})
	sameTable(t, "rewritten", digestsOf(t, st, n), digestsOf(t, st, 0))
}

func TestMergeCopiesDigests(t *testing.T) {
	ctx := context.Background()
	st, dir := digestStore(t, digestContent())
	n1 := newDelta(t, st, map[int64][]byte{100: []byte("v1")})
	n2 := newDelta(t, st, map[int64][]byte{6*digest.BlockSize + 1: []byte("v2")})
	want := computed(t, st, n2)
	for _, full := range []bool{false, true} {
		mv, err := st.Merge(ctx, "img", n2, full)
		must(t, err)
		sameTable(t, fmt.Sprintf("merge (full %v)", full), digestsOf(t, st, mv.Number), want)
		sameTable(t, fmt.Sprintf("merge (full %v) computed", full), computed(t, st, mv.Number), want)
		sameTable(t, fmt.Sprintf("merge (full %v) file", full), fileTable(t, dir, mv.Number), want)
	}
	// A merge of a version without a table computes it.
	must(t, os.Remove(filepath.Join(dir, fmt.Sprintf("v%d.digests", n1))))
	for _, full := range []bool{false, true} {
		mv, err := st.Merge(ctx, "img", n1, full)
		must(t, err)
		sameTable(t, fmt.Sprintf("merge (full %v) of a version without a table", full), fileTable(t, dir, mv.Number), computed(t, st, n1))
	}
}

// A store written before tables: every version's is computed when asked
// for (a delta's from its parent's, computed first), and saved.
func TestMissingDigestsAreComputed(t *testing.T) {
	st, dir := digestStore(t, digestContent())
	n1 := newDelta(t, st, map[int64][]byte{3 * digest.BlockSize: []byte("v1")})
	n2 := newDelta(t, st, map[int64][]byte{5 * digest.BlockSize: []byte("v2")})
	for _, n := range []int{0, n1, n2} {
		must(t, os.Remove(filepath.Join(dir, fmt.Sprintf("v%d.digests", n))))
	}
	// Concurrent callers share one computation, and each gets its own
	// table.
	var wg sync.WaitGroup
	tabs := make([]*digest.Table, 4)
	for i := range tabs {
		wg.Go(func() {
			tab, err := st.Digests(context.Background(), "img", n2)
			if err != nil {
				t.Error(err)
				return
			}
			tabs[i] = tab
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	want := computed(t, st, n2)
	for _, tab := range tabs {
		sameTable(t, "computed again", tab, want)
	}
	tabs[0].Sums[0] = digest.Sum{}
	sameTable(t, "another caller's", tabs[1], want)
	for _, n := range []int{0, n1, n2} {
		sameTable(t, fmt.Sprintf("v%d.digests saved", n), fileTable(t, dir, n), computed(t, st, n))
	}
}

func TestDamagedDigestsAreComputedAgain(t *testing.T) {
	st, dir := digestStore(t, digestContent())
	n := newDelta(t, st, map[int64][]byte{0: []byte("v1")})
	path := filepath.Join(dir, fmt.Sprintf("v%d.digests", n))
	good, err := os.ReadFile(path)
	must(t, err)
	other := &digest.Table{BlockSize: digest.BlockSize, Size: digestSize - 1, Sums: make([]digest.Sum, 8)}
	otherSize, err := other.MarshalBinary()
	must(t, err)
	for name, damage := range map[string]func([]byte) []byte{
		"a digest":      func(b []byte) []byte { b[digest.HeaderSize+40]++; return b },
		"the header":    func(b []byte) []byte { b[10]++; return b },
		"torn":          func(b []byte) []byte { return b[:len(b)-7] },
		"empty":         func([]byte) []byte { return nil },
		"another image": func([]byte) []byte { return otherSize },
		"not a table":   func(b []byte) []byte { return []byte("hello") },
		"zeroed":        func(b []byte) []byte { clear(b); return b },
	} {
		t.Run(name, func(t *testing.T) {
			must(t, os.WriteFile(path, damage(append([]byte(nil), good...)), 0o600))
			sameTable(t, "served", digestsOf(t, st, n), computed(t, st, n))
			sameTable(t, "saved", fileTable(t, dir, n), computed(t, st, n))
		})
	}
}

func TestDigestsErrors(t *testing.T) {
	ctx := context.Background()
	st, _ := digestStore(t, digestContent())
	for _, tc := range []struct {
		name string
		n    int
		is   error
		want string
	}{
		{"nope", 0, image.ErrNotFound, `image "nope" not found`},
		{"img", 3, image.ErrNotFound, `image "img" has no version 3`},
	} {
		if _, err := st.Digests(ctx, tc.name, tc.n); !errors.Is(err, tc.is) || err.Error() != tc.want {
			t.Errorf("Digests(%q, %d): %v, want %q", tc.name, tc.n, err, tc.want)
		}
	}
}
