// Package atomicfile is usher's one way to replace a file whole, as
// Tailscale's atomicfile: the new content goes to a temporary file in
// the same directory, which is synced, renamed over the name, and the
// directory synced, so that a reader never sees a part of a file and a
// crash or a power cut at any moment leaves the old file or the new one,
// never a part, and once a call has returned, the new one.
//
// Every file that usher replaces in place (state files, keys and
// certificates, indexes, image metadata) is written through it. Any
// package may import it; it imports nothing of usher's.
package atomicfile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WriteFile replaces name with data, the file having mode exactly (the
// umask does not apply: the mode is set on the file itself). It returns
// only when the new file is durable: written, synced, renamed over name
// and its directory synced. On error no temporary file is left, the
// error names name, and name is as it was (the old file, or none),
// unless the error is the directory's sync: the new file is in place
// then, but a crash may still undo the rename.
func WriteFile(name string, data []byte, mode os.FileMode) error {
	return Write(name, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write is WriteFile for content too large to hold in memory: write
// writes it to w, which is buffered, and an error from write is returned
// (wrapped) with name left as it was. w is valid only during the call.
func Write(name string, mode os.FileMode, write func(w io.Writer) error) (err error) {
	dir := filepath.Dir(name)
	f, err := os.CreateTemp(dir, "."+filepath.Base(name)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			err = fmt.Errorf("write %s: %w", name, err)
		}
	}()
	if err = f.Chmod(mode); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 256<<10)
	if err = write(bw); err != nil {
		return err
	}
	if err = bw.Flush(); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, name); err != nil {
		return err
	}
	return syncDir(dir)
}

// Replace puts tmp, a whole file that the caller wrote by other means (a
// database that a library created at that path, a program's output), in
// name's place: it syncs tmp, renames it over name and syncs the
// directory, and returns when the new file is durable. tmp must be in
// name's directory (a rename does not cross file systems). On error
// before the rename, name is as it was and tmp is left for the caller,
// which made it, to remove; an error of the directory's sync is as
// WriteFile's.
func Replace(tmp, name string) error {
	if err := syncPath(tmp); err != nil {
		return fmt.Errorf("replace %s: %w", name, err)
	}
	if err := os.Rename(tmp, name); err != nil {
		return fmt.Errorf("replace %s: %w", name, err)
	}
	if err := syncDir(filepath.Dir(name)); err != nil {
		return fmt.Errorf("replace %s: %w", name, err)
	}
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error { return syncPath(dir) }

func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
