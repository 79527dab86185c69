package datadir_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/usher-vdi/usher/internal/datadir"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
)

func TestDefault(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"USHER_DATA": "/d", "XDG_STATE_HOME": "/x", "HOME": "/h"}, "/d"},
		{map[string]string{"XDG_STATE_HOME": "/x", "HOME": "/h"}, "/x/usher"},
		{map[string]string{"HOME": "/h"}, "/h/.local/state/usher"},
		{nil, "usher-data"},
	} {
		if got := datadir.Default(func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("Default(%v) = %q, want %q", tc.env, got, tc.want)
		}
	}
}

func TestLock(t *testing.T) {
	path := t.TempDir()
	d, err := datadir.Open(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := datadir.Open(path, true); err == nil || !strings.Contains(err.Error(), "in use by another usher serve (pid ") {
		t.Fatalf("second exclusive Open: %v", err)
	}
	if o, err := datadir.Open(path, false); err != nil {
		t.Fatalf("shared Open beside the lock holder: %v", err)
	} else {
		o.Close()
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d, err = datadir.Open(path, true)
	if err != nil {
		t.Fatalf("exclusive Open after Close: %v", err)
	}
	d.Close()
}

func TestSecretsPersist(t *testing.T) {
	d, err := datadir.Open(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	s1, path, err := d.EnrolmentSecret()
	if err != nil || len(s1) < 16 {
		t.Fatalf("EnrolmentSecret: %q %v", s1, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v %v", fi.Mode(), err)
	}
	s2, _, _ := d.EnrolmentSecret()
	k1, err := d.TokenKey()
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := d.TokenKey()
	if s1 != s2 || string(k1) != string(k2) || len(k1) != 32 {
		t.Fatal("secrets are not kept")
	}
	os.WriteFile(path, []byte("short\n"), 0o600)
	if _, _, err := d.EnrolmentSecret(); err == nil {
		t.Error("a short enrolment secret was accepted")
	}
	os.WriteFile(filepath.Join(d.Path(), datadir.TokenKeyFile), []byte("short"), 0o600)
	if _, err := d.TokenKey(); err == nil {
		t.Error("a short token key was accepted")
	}
}

func TestUnwritable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes anywhere")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o500)
	defer os.Chmod(dir, 0o700)
	if _, err := datadir.Open(dir, false); err == nil || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("Open of a read-only directory: %v", err)
	}
}

// permissiveUmask sets the umask to 0 until the test ends, so that only
// the modes usher asks for protect its files.
func permissiveUmask(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestFilesAreOwnerOnly(t *testing.T) {
	permissiveUmask(t)
	for _, tc := range []struct {
		name   string
		before os.FileMode // 0: the directory does not exist
	}{{"new directory", 0}, {"open directory", 0o777}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "data")
			if tc.before != 0 {
				if err := os.Mkdir(path, tc.before); err != nil {
					t.Fatal(err)
				}
			}
			d, err := datadir.Open(path, true)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			st, err := d.OpenStore(context.Background(), sqlitestore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if err := st.Update(context.Background(), func(tx site.Tx) error {
				return tx.Groups().Create(context.Background(), site.Group{Name: "g"})
			}); err != nil {
				t.Fatal(err)
			}
			if _, err := d.TokenKey(); err != nil {
				t.Fatal(err)
			}
			if _, _, err := d.EnrolmentSecret(); err != nil {
				t.Fatal(err)
			}
			if got := mode(t, path); got != 0o700 {
				t.Errorf("data directory mode %o, want 700", got)
			}
			for _, f := range []string{datadir.SiteDBFile, datadir.SiteDBFile + "-wal", datadir.SiteDBFile + "-shm",
				datadir.LockFile, datadir.TokenKeyFile, datadir.EnrolmentSecretFile} {
				if got := mode(t, filepath.Join(path, f)); got != 0o600 {
					t.Errorf("%s mode %o, want 600", f, got)
				}
			}
		})
	}
}
