package blob

import (
	"bytes"
	"io"
	"os"
	"runtime"
	"testing"
)

func TestHeadFile(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("memory files are Linux's")
	}
	body := bytes.Repeat([]byte("0123456789abcdef"), MinFileSize/16+1)
	b := New(body)
	head := []byte("HTTP/1.1 200 OK\r\nDate: one\r\n\r\n")
	for i := range headFileAfter - 1 {
		if hf := b.HeadFile(head); hf != nil {
			t.Fatalf("a head file after %d uses of the head, want none before %d", i+1, headFileAfter)
		}
	}
	hf := b.HeadFile(head)
	if hf == nil {
		t.Fatalf("no head file after %d uses", headFileAfter)
	}
	got := make([]byte, hf.Size()+1)
	n, err := hf.f.ReadAt(got, 0)
	if err != io.EOF || !bytes.Equal(got[:n], append(append([]byte(nil), head...), body...)) {
		t.Fatalf("the head file holds %d bytes (%v), not the head and the body", n, err)
	}
	if again := b.HeadFile(head); again != hf {
		t.Fatal("the same head got another file")
	} else {
		again.Release()
	}

	// A new head: the blob lets the old file go, which stays open for
	// its holder until released.
	other := []byte("HTTP/1.1 200 OK\r\nDate: two\r\n\r\n")
	if b.HeadFile(other) != nil {
		t.Fatal("a head file for a new head at once")
	}
	if _, err := hf.f.Stat(); err != nil {
		t.Fatalf("a held head file was closed: %v", err)
	}
	hf.Release()
	if _, err := hf.f.Stat(); err != os.ErrClosed && !isClosed(err) {
		t.Fatalf("the last release left the file open: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("a release too many went unnoticed")
		}
	}()
	hf.Release()
}

func isClosed(err error) bool {
	pe, ok := err.(*os.PathError)
	return ok && pe.Err == os.ErrClosed
}

func TestHeadFileRefused(t *testing.T) {
	small := New([]byte("small"))
	for range 2 * headFileAfter {
		if small.HeadFile([]byte("h")) != nil {
			t.Fatal("a head file for a blob under MinFileSize")
		}
	}
	large := New(make([]byte, MinFileSize))
	long := bytes.Repeat([]byte("h"), maxHead+1)
	for range 2 * headFileAfter {
		if large.HeadFile(long) != nil {
			t.Fatal("a head file for a head over maxHead")
		}
	}
}
