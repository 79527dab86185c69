package datadir

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/usher-vdi/usher/internal/atomicfile"
	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
)

// Files in a data directory.
const (
	SiteDBFile   = "site.db"
	LockFile     = "serve.lock"
	TokenKeyFile = "token.key"
	// EnrolmentSecretFile holds the secret VDAs enrol with.
	EnrolmentSecretFile = "enrolment.secret"
)

// Default returns the default data directory for an environment:
// $USHER_DATA, else $XDG_STATE_HOME/usher, else ~/.local/state/usher.
func Default(getenv func(string) string) string {
	if d := getenv("USHER_DATA"); d != "" {
		return d
	}
	if d := getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "usher")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".local", "state", "usher")
	}
	return "usher-data"
}

// Dir is an opened data directory.
type Dir struct {
	path string
	lock *os.File // held by a server; nil otherwise
}

// Open creates the directory if needed and checks that it is writable.
// With exclusive, it takes the directory's lock so that two servers never
// share one site DB, and fails with an error naming the other server's
// pid if it holds the lock.
func Open(path string, exclusive bool) (*Dir, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", path, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("data directory %s cannot be created: %w", abs, unwrapPath(err))
	}
	// The directory holds the site DB, keys and secrets: its owner's
	// alone (0700), whatever the umask or the mode it had. The owner's own
	// bits stay, so that a read-only directory is still reported as such.
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", abs, unwrapPath(err))
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		if err := os.Chmod(abs, perm&0o700); err != nil {
			return nil, fmt.Errorf("data directory %s cannot be made private (mode 0700): %w", abs, unwrapPath(err))
		}
	}
	d := &Dir{path: abs}
	if !exclusive {
		probe, err := os.CreateTemp(abs, ".write-check-*")
		if err != nil {
			return nil, fmt.Errorf("data directory %s is not writable: %w", abs, unwrapPath(err))
		}
		probe.Close()
		os.Remove(probe.Name())
		return d, nil
	}
	f, err := os.OpenFile(filepath.Join(abs, LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data directory %s is not writable: %w", abs, unwrapPath(err))
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid := "unknown"
		if b, rerr := os.ReadFile(f.Name()); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			pid = strings.TrimSpace(string(b))
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data directory %s is in use by another usher serve (pid %s); stop it or pick another directory with --data", abs, pid)
		}
		return nil, fmt.Errorf("lock data directory %s: %w", abs, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	d.lock = f
	return d, nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Close releases the lock, if Open took it.
func (d *Dir) Close() error {
	if d.lock == nil {
		return nil
	}
	d.lock.Truncate(0)
	err := d.lock.Close() // closing releases the flock
	d.lock = nil
	return err
}

// Path is the directory's absolute path.
func (d *Dir) Path() string { return d.path }

// SiteDB is the path of the embedded site DB.
func (d *Dir) SiteDB() string { return filepath.Join(d.path, SiteDBFile) }

// OpenStore opens the directory's embedded site DB.
func (d *Dir) OpenStore(ctx context.Context, opts sqlitestore.Options) (*sqlitestore.Store, error) {
	st, err := sqlitestore.Open(ctx, d.SiteDB(), opts)
	if err != nil {
		return nil, fmt.Errorf("open site DB %s: %w", d.SiteDB(), err)
	}
	return st, nil
}

// EnrolmentSecret returns the secret VDAs enrol with, creating it on first
// use, and the file that holds it.
func (d *Dir) EnrolmentSecret() (secret, path string, err error) {
	path = filepath.Join(d.path, EnrolmentSecretFile)
	b, err := os.ReadFile(path)
	if err == nil {
		secret := strings.TrimSpace(string(b))
		if len(secret) < 16 {
			return "", path, fmt.Errorf("enrolment secret in %s is shorter than 16 characters", path)
		}
		return secret, path, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", path, fmt.Errorf("read enrolment secret: %w", err)
	}
	secret = auth.RandomSecret(24)
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		return "", path, fmt.Errorf("write enrolment secret: %w", err)
	}
	return secret, path, nil
}

// SetEnrolmentSecret keeps secret as the directory's copy of the site's
// enrolment secret (0600), unless the file holds it already, and returns
// the file's path.
func (d *Dir) SetEnrolmentSecret(secret string) (path string, err error) {
	path = filepath.Join(d.path, EnrolmentSecretFile)
	if len(secret) < 16 {
		return path, fmt.Errorf("the site's enrolment secret is shorter than 16 characters")
	}
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == secret {
		return path, nil
	}
	if err := atomicfile.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		return path, fmt.Errorf("write enrolment secret: %w", err)
	}
	return path, nil
}

// TokenKey returns the key that signs bearer tokens, creating it on first
// use. Keeping it in the data directory keeps tokens valid across
// restarts.
func (d *Dir) TokenKey() ([]byte, error) {
	path := filepath.Join(d.path, TokenKeyFile)
	key, err := os.ReadFile(path)
	if err == nil {
		if len(key) < 32 {
			return nil, fmt.Errorf("token key %s is %d bytes, want 32; delete it to make a new one", path, len(key))
		}
		return key, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read token key: %w", err)
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, key, 0o600); err != nil {
		return nil, fmt.Errorf("write token key: %w", err)
	}
	return key, nil
}
