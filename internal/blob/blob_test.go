package blob_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/blob"
)

func TestFileHoldsTheBytes(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testFileHoldsTheBytes(t, "") })
	t.Run("dir", func(t *testing.T) {
		dir := t.TempDir()
		f := testFileHoldsTheBytes(t, dir)
		if f == nil {
			return
		}
		// The file is dir's, not a memory file standing in.
		if link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd())); err != nil || !strings.HasPrefix(link, dir+"/") {
			t.Errorf("the blob's file is %q (%v), not one of %s", link, err, dir)
		}
		if names, err := os.ReadDir(dir); err != nil || len(names) != 0 {
			t.Errorf("the blob's file has a name in %s: %v (%v)", dir, names, err)
		}
	})
	// A directory that cannot hold the file: a memory file stands in.
	t.Run("missing dir", func(t *testing.T) { testFileHoldsTheBytes(t, filepath.Join(t.TempDir(), "gone")) })
}

// testFileHoldsTheBytes checks a blob's file made in dir and returns it,
// or nil outside Linux.
func testFileHoldsTheBytes(t *testing.T, dir string) *os.File {
	blob.SetFileDir(dir)
	t.Cleanup(func() { blob.SetFileDir("") })
	data := bytes.Repeat([]byte("usher "), blob.MinFileSize)
	b := blob.New(data)
	f, ok := b.File()
	if runtime.GOOS != "linux" {
		if ok {
			t.Fatal("a file outside Linux")
		}
		return nil
	}
	if !ok {
		t.Fatal("no file for a large blob")
	}
	got := make([]byte, len(data)+1)
	n, err := f.ReadAt(got, 0)
	if err != io.EOF || !bytes.Equal(got[:n], data) {
		t.Fatalf("file holds %d bytes (%v), want the blob's %d", n, err, len(data))
	}
	if _, err := f.WriteAt([]byte("x"), 0); err == nil {
		t.Error("the file could be written: it is not sealed")
	}
	if err := f.Truncate(1); err == nil {
		t.Error("the file could be truncated")
	}
	if f2, _ := b.File(); f2 != f {
		t.Error("a second file for one blob")
	}
	return f
}

func TestSmallBlobHasNoFile(t *testing.T) {
	if _, ok := blob.New(make([]byte, blob.MinFileSize-1)).File(); ok {
		t.Error("a file for a small blob")
	}
}

type plainWriter struct{ bytes.Buffer }

type blobWriter struct{ got *blob.Blob }

func (w *blobWriter) Write(p []byte) (int, error)         { panic("Write instead of WriteBlob") }
func (w *blobWriter) WriteBlob(b *blob.Blob) (int, error) { w.got = b; return b.Len(), nil }

func TestWrite(t *testing.T) {
	b := blob.New([]byte("answer"))
	var pw plainWriter
	if n, err := blob.Write(&pw, b); n != 6 || err != nil || pw.String() != "answer" {
		t.Errorf("plain writer: %d, %v, %q", n, err, pw.String())
	}
	var bw blobWriter
	if n, err := blob.Write(&bw, b); n != 6 || err != nil || bw.got != b {
		t.Errorf("blob writer: %d, %v", n, err)
	}
}
