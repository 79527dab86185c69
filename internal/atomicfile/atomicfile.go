// Package atomicfile is usher's one way to replace a file whole: a
// temporary file beside it, written and synced, renamed over the name,
// and the directory synced, so that a crash leaves the old file or the
// new one, never a part. Any package may import it.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile replaces name with data, with mode (before the umask is not
// applied: the mode is set on the file itself). On error the old file,
// if any, is untouched and no temporary file is left.
func WriteFile(name string, data []byte, mode os.FileMode) (err error) {
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
	if _, err = f.Write(data); err != nil {
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
	// The rename is durable once the directory is.
	if d, derr := os.Open(dir); derr == nil {
		derr = d.Sync()
		d.Close()
		if derr != nil {
			return derr
		}
	}
	return nil
}
