package image_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/blocktest"
	"github.com/usher-vdi/usher/internal/block/image"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// storeWith returns a store holding image "img" with content as its
// version 0 and a version 1 in maintenance over it.
func storeWith(t *testing.T, content []byte) *image.Store {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.raw")
	must(t, os.WriteFile(src, content, 0o644))
	st, err := image.Create(filepath.Join(dir, "store"))
	must(t, err)
	_, err = st.Import(ctx, "img", src)
	must(t, err)
	_, err = st.NewVersion(ctx, "img", "")
	must(t, err)
	return st
}

func openVersion(t *testing.T, st *image.Store, n int, writable bool) block.Device {
	t.Helper()
	d, err := st.OpenVersion(context.Background(), "img", n, writable)
	must(t, err)
	return d
}

func TestVersionConformance(t *testing.T) {
	t.Run("Base", func(t *testing.T) {
		blocktest.RunReader(t, func(t *testing.T, content []byte) block.Device {
			return openVersion(t, storeWith(t, content), 0, false)
		})
	})
	t.Run("Delta", func(t *testing.T) {
		blocktest.RunReader(t, func(t *testing.T, content []byte) block.Device {
			return openVersion(t, storeWith(t, content), 1, false)
		})
	})
	t.Run("MaintenanceWritable", func(t *testing.T) {
		blocktest.Run(t, func(t *testing.T) block.Device {
			return openVersion(t, storeWith(t, make([]byte, blocktest.Size)), 1, true)
		})
	})
	t.Run("RefusesWrites", func(t *testing.T) {
		st := storeWith(t, blocktest.Content())
		for _, n := range []int{0, 1} {
			d := openVersion(t, st, n, false)
			blocktest.RunReadOnly(t, d)
			d.Close()
		}
	})
}

func TestMergeKeepsContent(t *testing.T) {
	ctx := context.Background()
	content := blocktest.Content()
	st := storeWith(t, content)
	d := openVersion(t, st, 1, true)
	must(t, d.WriteAt(ctx, []byte("v1"), 3<<10, 0))
	copy(content[3<<10:], "v1")
	must(t, d.Flush(ctx))
	must(t, d.Close())
	_, err := st.Promote(ctx, "img", 1)
	must(t, err)
	for _, full := range []bool{false, true} {
		mv, err := st.Merge(ctx, "img", 1, full)
		must(t, err)
		m := openVersion(t, st, mv.Number, false)
		got := make([]byte, len(content))
		must(t, m.ReadAt(ctx, got, 0))
		m.Close()
		if !bytes.Equal(got, content) {
			t.Fatalf("merge (full %v) content differs", full)
		}
	}
}

func TestOpenNeedsAStore(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "typo")
	if _, err := image.Open(missing); !errors.Is(err, image.ErrNoStore) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("open a missing store: %v, want ErrNoStore naming %s", err, missing)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("open made the store: %v", err)
	}
	file := filepath.Join(dir, "file")
	must(t, os.WriteFile(file, []byte("x"), 0o644))
	if _, err := image.Open(file); !errors.Is(err, image.ErrNoStore) {
		t.Fatalf("open a file as a store: %v, want ErrNoStore", err)
	}
	if _, err := image.Create(file); err == nil {
		t.Fatal("create a store over a file succeeded")
	}

	// Create makes the directory with the first import, not before, nor
	// for an import that fails.
	st, err := image.Create(missing)
	must(t, err)
	if _, err := st.Import(context.Background(), "img", filepath.Join(dir, "nope.raw")); err == nil {
		t.Fatal("import of a missing file succeeded")
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed import made the store: %v", err)
	}
	src := filepath.Join(dir, "src.raw")
	must(t, os.WriteFile(src, make([]byte, 64<<10), 0o644))
	_, err = st.Import(context.Background(), "img", src)
	must(t, err)
	if _, err := image.Open(missing); err != nil {
		t.Fatalf("open after import: %v", err)
	}
}

func TestImportSaysWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	st, err := image.Create(filepath.Join(dir, "store"))
	must(t, err)
	src := filepath.Join(dir, "src.raw")
	must(t, os.WriteFile(src, make([]byte, 64<<10), 0o644))
	empty := filepath.Join(dir, "empty.raw")
	must(t, os.WriteFile(empty, nil, 0o644))
	_, err = st.Import(context.Background(), "taken", src)
	must(t, err)
	for _, tc := range []struct {
		name, src, want string
		is              error
	}{
		{"img", dir, "import img: " + dir + " is a directory, not a raw disk image", nil},
		{"img", "..", "import img: .. is a directory, not a raw disk image", nil},
		{"img", filepath.Join(dir, "nope"), "import img: " + filepath.Join(dir, "nope") + " does not exist", nil},
		{"img", empty, "import img: " + empty + " is empty", nil},
		{"..", src, `import "..": an image name is up to 128 letters, digits, '.', '_' and '-', starting with a letter or digit`, nil},
		{"taken", src, `image "taken" already exists`, image.ErrExists},
	} {
		_, err := st.Import(context.Background(), tc.name, tc.src)
		if err == nil || err.Error() != tc.want {
			t.Errorf("import %s %s: %v, want %q", tc.name, tc.src, err, tc.want)
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("import %s %s: %v is not %v", tc.name, tc.src, err, tc.is)
		}
	}
}

func TestPromoteSupersedesProduction(t *testing.T) {
	ctx := context.Background()
	st := storeWith(t, make([]byte, 64<<10))
	for range 2 { // maintenance → test → production
		_, err := st.Promote(ctx, "img", 1)
		must(t, err)
	}
	im, err := st.Get(ctx, "img")
	must(t, err)
	states := func(im image.Image) []image.State {
		var s []image.State
		for _, v := range im.Versions {
			s = append(s, v.State)
		}
		return s
	}
	if got, want := states(im), []image.State{image.Superseded, image.Production}; !slices.Equal(got, want) || im.Production() != 1 {
		t.Fatalf("after promoting version 1: states %v, production %d; want %v, 1", got, im.Production(), want)
	}
	_, err = st.Promote(ctx, "img", 0)
	if want := `version 0 of image "img" was superseded by version 1 and cannot go back to production; merge it into a new version instead`; !errors.Is(err, image.ErrState) || err.Error() != want {
		t.Fatalf("promote a superseded version: %v, want %q", err, want)
	}
	// A merge of the superseded version brings its content back, through
	// test to production, superseding version 1.
	mv, err := st.Merge(ctx, "img", 0, false)
	must(t, err)
	_, err = st.Promote(ctx, "img", mv.Number)
	must(t, err)
	im, err = st.Get(ctx, "img")
	must(t, err)
	if got, want := states(im), []image.State{image.Superseded, image.Superseded, image.Production}; !slices.Equal(got, want) {
		t.Fatalf("after promoting the merge: %v, want %v", got, want)
	}
}

// A store written before promotion superseded the previous production
// version reads as if it had.
func TestOldStoreHasOneProduction(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "img"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "img", "image.json"), []byte(`{"name": "img", "size": 4096, "versions": [
		{"number": 0, "kind": "base", "state": "production"},
		{"number": 1, "kind": "delta", "parent": 0, "state": "production"},
		{"number": 2, "kind": "delta", "parent": 1, "state": "test"}]}`), 0o644))
	st, err := image.Open(dir)
	must(t, err)
	im, err := st.Get(ctx, "img")
	must(t, err)
	if im.Versions[0].State != image.Superseded || im.Versions[1].State != image.Production || im.Production() != 1 {
		t.Fatalf("old store reads as %+v", im.Versions)
	}
}

func TestErrorsNameWhatIsWrong(t *testing.T) {
	ctx := context.Background()
	st := storeWith(t, make([]byte, 64<<10))
	_, errGet := st.Get(ctx, "nope")
	_, errPromote := st.Promote(ctx, "img", 7)
	_, errVersion := st.NewVersion(ctx, "img", "")
	_, errMerge := st.Merge(ctx, "img", 1, false)
	_, errProd := st.Promote(ctx, "img", 0)
	for _, tc := range []struct {
		err  error
		is   error
		want string
	}{
		{errGet, image.ErrNotFound, `image "nope" not found`},
		{errPromote, image.ErrNotFound, `image "img" has no version 7`},
		{errVersion, image.ErrState, `image "img" already has version 1 in maintenance; promote it before adding another`},
		{errMerge, image.ErrState, `version 1 of image "img" is in maintenance; promote it first`},
		{errProd, image.ErrState, `version 0 of image "img" is already in production`},
	} {
		if !errors.Is(tc.err, tc.is) || tc.err.Error() != tc.want {
			t.Errorf("error %v, want %q (%v)", tc.err, tc.want, tc.is)
		}
	}
}

func TestFilesAreOwnerOnly(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	ctx := context.Background()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.raw")
	must(t, os.WriteFile(src, bytes.Repeat([]byte{7}, 1<<16), 0o666))
	root := filepath.Join(dir, "store")
	st, err := image.Create(root)
	must(t, err)
	_, err = st.Import(ctx, "img", src)
	must(t, err)
	_, err = st.NewVersion(ctx, "img", "")
	must(t, err)
	d := openVersion(t, st, 1, true)
	must(t, d.Close())
	err = filepath.WalkDir(root, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if e.IsDir() {
			want = 0o700
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %o, want %o", path, got, want)
		}
		return nil
	})
	must(t, err)
}
