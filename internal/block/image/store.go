package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/atomicfile"
	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/digest"
	"github.com/usher-vdi/usher/internal/block/writecache"
)

// State is where a version is in its life cycle.
type State string

// Version states, in the order Promote moves through them. An image has
// at most one version in production: promoting a version to production
// moves the one there before it to Superseded.
//
// Superseded is what Citrix PVS shows as a released version that is no
// longer the default: it was in production, production devices no
// longer boot it (IMAGE names the production version), and it stays
// listed and servable by number (IMAGE@N), read-only, for targets still
// on it. It is not Test: a test version is one on its way to
// production, and a superseded version cannot be promoted again (merge
// it into a new version to bring its content back).
const (
	Maintenance State = "maintenance"
	Test        State = "test"
	Production  State = "production"
	Superseded  State = "superseded"
)

// Errors callers branch on, with errors.Is. The store's errors wrap them
// in an *Error that says, in one sentence, which image and version.
var (
	ErrNoStore  = errors.New("no image store")
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
	ErrState    = errors.New("not allowed in this state")
)

// Error is an error of the store: Msg names the image (and version) and
// says what is wrong; Err is one of the sentinel errors above.
type Error struct {
	Err error
	Msg string
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

func errorf(kind error, format string, args ...any) error {
	return &Error{Err: kind, Msg: fmt.Sprintf(format, args...)}
}

// Version is one version of an image.
type Version struct {
	Number  int       `json:"number"`
	Kind    string    `json:"kind"`             // "base" or "delta"
	Parent  int       `json:"parent,omitempty"` // of a delta
	State   State     `json:"state"`
	Created time.Time `json:"created"`
	Note    string    `json:"note,omitempty"`
}

// Image describes an image and its versions, oldest first.
type Image struct {
	Name     string    `json:"name"`
	Size     int64     `json:"size"`
	Versions []Version `json:"versions"`
}

// Production is the production version (the newest, in a store written
// before promotion superseded the previous one), or -1.
func (im Image) Production() int {
	for i := len(im.Versions) - 1; i >= 0; i-- {
		if im.Versions[i].State == Production {
			return im.Versions[i].Number
		}
	}
	return -1
}

// Version returns version n.
func (im Image) Version(n int) (Version, bool) {
	for _, v := range im.Versions {
		if v.Number == n {
			return v, true
		}
	}
	return Version{}, false
}

// Store is a directory of images. Methods are safe for concurrent use.
type Store struct {
	dir string
	mu  sync.Mutex // serialises changes to image.json files, and guards writers
	// writers are the maintenance versions ("NAME@N") with a private-mode
	// writer attached. Such a version cannot be promoted: its writes are
	// only complete once the writer has flushed and gone.
	writers map[string]bool

	fmu     sync.Mutex         // guards flights
	flights map[string]*flight // tables being computed, by "NAME@N"

	// Logger, when set before the store is used, hears of tables of
	// digests computed again (missing or damaged) or not saved.
	Logger *slog.Logger
}

func (s *Store) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// ErrBusy is returned for a maintenance version that already has a writer,
// or that cannot be promoted because its writer is still attached.
var ErrBusy = errors.New("version has a writer attached")

// AttachWriter marks version n of name as written in private mode, so
// that Promote refuses it (ErrBusy) until detach is called; it fails with
// ErrBusy when the version already has a writer. The export stack calls
// it before opening a maintenance version writable for a connection.
func (s *Store) AttachWriter(name string, n int) (detach func(), err error) {
	key := fmt.Sprintf("%s@%d", name, n)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writers[key] {
		return nil, errorf(ErrBusy, "version %d of image %q already has a writer", n, name)
	}
	if s.writers == nil {
		s.writers = map[string]bool{}
	}
	s.writers[key] = true
	return func() {
		s.mu.Lock()
		delete(s.writers, key)
		s.mu.Unlock()
	}, nil
}

// Open opens the existing store in dir. It fails with ErrNoStore when dir
// does not exist or is not a directory: only Create makes a store.
func Open(dir string) (*Store, error) {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, errorf(ErrNoStore, "no image store at %s", dir)
	case err != nil:
		return nil, fmt.Errorf("image store: %w", err)
	case !fi.IsDir():
		return nil, errorf(ErrNoStore, "image store %s is not a directory", dir)
	}
	return &Store{dir: dir}, nil
}

// Create opens the store in dir, whose directory (and its parents) the
// first Import creates. It fails when dir exists and is not a directory.
func Create(dir string) (*Store, error) {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("image store: %w", err)
	case !fi.IsDir():
		return nil, fmt.Errorf("image store %s is not a directory", dir)
	}
	return &Store{dir: dir}, nil
}

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func (s *Store) path(name string, parts ...string) string {
	return filepath.Join(append([]string{s.dir, name}, parts...)...)
}

func (s *Store) load(name string) (Image, error) {
	if !validName.MatchString(name) {
		return Image{}, errorf(ErrNotFound, "image %q not found", name)
	}
	b, err := os.ReadFile(s.path(name, "image.json"))
	if errors.Is(err, os.ErrNotExist) {
		return Image{}, errorf(ErrNotFound, "image %q not found", name)
	}
	if err != nil {
		return Image{}, fmt.Errorf("image %q: %w", name, err)
	}
	var im Image
	if err := json.Unmarshal(b, &im); err != nil {
		return Image{}, fmt.Errorf("image %q: %s: %w", name, s.path(name, "image.json"), err)
	}
	supersede(&im, im.Production())
	return im, nil
}

// supersede moves every production version but n to Superseded. Stores
// written before promotion did so may hold several.
func supersede(im *Image, n int) {
	for i, v := range im.Versions {
		if v.State == Production && v.Number != n {
			im.Versions[i].State = Superseded
		}
	}
}

func (s *Store) save(im Image) error {
	b, err := json.MarshalIndent(im, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(s.path(im.Name, "image.json"), b, 0o600)
}

// Get returns the image name.
func (s *Store) Get(_ context.Context, name string) (Image, error) { return s.load(name) }

// List returns every image.
func (s *Store) List(context.Context) ([]Image, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, e := range ents {
		if im, err := s.load(e.Name()); err == nil {
			out = append(out, im)
		}
	}
	return out, nil
}

// Import creates image name from src, a raw disk image file or a block
// device, as its base, version 0 in production; zero blocks are left as
// holes. It creates the store's directory if need be, once name and src
// have been checked.
func (s *Store) Import(ctx context.Context, name, src string) (Image, error) {
	if !validName.MatchString(name) {
		return Image{}, fmt.Errorf("import %q: an image name is up to 128 letters, digits, '.', '_' and '-', starting with a letter or digit", name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := os.Stat(s.path(name)); err == nil {
		return Image{}, errorf(ErrExists, "image %q already exists", name)
	}
	fi, err := os.Stat(src)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return Image{}, fmt.Errorf("import %s: %s does not exist", name, src)
	case err != nil:
		return Image{}, fmt.Errorf("import %s: %w", name, err)
	case fi.IsDir():
		return Image{}, fmt.Errorf("import %s: %s is a directory, not a raw disk image", name, src)
	case !fi.Mode().IsRegular() && fi.Mode()&os.ModeDevice == 0:
		return Image{}, fmt.Errorf("import %s: %s is not a raw disk image (a regular file or a block device)", name, src)
	}
	in, err := block.OpenFile(src, true)
	if err != nil {
		return Image{}, fmt.Errorf("import %s: %w", name, err)
	}
	defer in.Close()
	if in.Size() == 0 {
		return Image{}, fmt.Errorf("import %s: %s is empty", name, src)
	}
	if err := os.MkdirAll(s.path(name), 0o700); err != nil {
		return Image{}, err
	}
	t := &digest.Table{BlockSize: digest.BlockSize, Size: in.Size(), Sums: make([]digest.Sum, digest.Blocks(in.Size(), digest.BlockSize))}
	if err := copySparse(ctx, in, s.path(name, baseFile(0)), t); err != nil {
		os.RemoveAll(s.path(name))
		return Image{}, err
	}
	if err := s.writeTable(name, 0, t); err != nil {
		os.RemoveAll(s.path(name))
		return Image{}, fmt.Errorf("import %s: %w", name, err)
	}
	im := Image{Name: name, Size: in.Size(), Versions: []Version{{Number: 0, Kind: "base", State: Production, Created: time.Now().UTC()}}}
	if err := s.save(im); err != nil {
		os.RemoveAll(s.path(name))
		return Image{}, err
	}
	return im, nil
}

// copySparse writes the content of d to a new file at path, skipping
// zero blocks, and syncs it. When t is set (a table of d's size and
// digest.BlockSize) it fills t's digests in the same pass.
func copySparse(ctx context.Context, d block.Device, path string, t *digest.Table) error {
	out, err := block.CreateFile(path, d.Size())
	if err != nil {
		return err
	}
	defer out.Close()
	buf := make([]byte, 1<<20) // a multiple of digest.BlockSize
	for off := int64(0); off < d.Size(); {
		n := min(int64(len(buf)), d.Size()-off)
		if err := d.ReadAt(ctx, buf[:n], off); err != nil {
			return err
		}
		if t != nil {
			for i := int64(0); i < n; i += digest.BlockSize {
				t.Sums[(off+i)/digest.BlockSize] = digest.Of(buf[i:min(n, i+digest.BlockSize)])
			}
		}
		for i := int64(0); i < n; i += writecache.BlockSize {
			c := buf[i:min(n, i+writecache.BlockSize)]
			if !block.IsZero(c) {
				if err := out.WriteAt(ctx, c, off+i, 0); err != nil {
					return err
				}
			}
		}
		off += n
	}
	return out.Flush(ctx)
}

// NewVersion adds a maintenance version over the newest version. Only
// one version may be in maintenance at a time.
func (s *Store) NewVersion(_ context.Context, name, note string) (Version, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	im, err := s.load(name)
	if err != nil {
		return Version{}, err
	}
	last := im.Versions[len(im.Versions)-1]
	for _, v := range im.Versions {
		if v.State == Maintenance {
			return Version{}, errorf(ErrState, "image %q already has version %d in maintenance; promote it before adding another", name, v.Number)
		}
	}
	v := Version{Number: last.Number + 1, Kind: "delta", Parent: last.Number, State: Maintenance, Created: time.Now().UTC(), Note: note}
	// A delta (and its map) left by a NewVersion that crashed before
	// saving the image is of no version: it goes, else the version
	// could never be added again.
	delta := s.path(name, deltaFile(v.Number))
	for _, f := range []string{delta, delta + ".map"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return Version{}, fmt.Errorf("image %q: %w", name, err)
		}
	}
	f, err := os.OpenFile(delta, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return Version{}, err
	}
	f.Close()
	// A table left by an operation that crashed before saving the image
	// would not be of this version.
	os.Remove(s.path(name, digestFile(v.Number)))
	im.Versions = append(im.Versions, v)
	return v, s.save(im)
}

func deltaFile(n int) string { return fmt.Sprintf("v%d.delta", n) }
func baseFile(n int) string  { return fmt.Sprintf("v%d.raw", n) }

// Promote moves version n one step: maintenance → test → production. A
// version promoted to production supersedes the one there before it. A
// version leaving maintenance gets its table of digests (see Digests):
// its parent's, with the blocks its delta wrote computed again.
func (s *Store) Promote(ctx context.Context, name string, n int) (Version, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	im, err := s.load(name)
	if err != nil {
		return Version{}, err
	}
	for i, v := range im.Versions {
		if v.Number != n {
			continue
		}
		switch v.State {
		case Maintenance:
			if s.writers[fmt.Sprintf("%s@%d", name, n)] {
				return Version{}, errorf(ErrBusy, "version %d of image %q has a private-mode writer attached; disconnect it before promoting", n, name)
			}
			if err := s.promoteTable(ctx, im, v); err != nil {
				return Version{}, fmt.Errorf("promote version %d of image %q: %w", n, name, err)
			}
			v.State = Test
		case Test:
			v.State = Production
			supersede(&im, n)
		case Production:
			return Version{}, errorf(ErrState, "version %d of image %q is already in production", n, name)
		case Superseded:
			return Version{}, errorf(ErrState, "version %d of image %q was superseded by version %d and cannot go back to production; merge it into a new version instead", n, name, im.Production())
		default:
			return Version{}, errorf(ErrState, "version %d of image %q is in state %q", n, name, v.State)
		}
		im.Versions[i] = v
		return v, s.save(im)
	}
	return Version{}, errorf(ErrNotFound, "image %q has no version %d", name, n)
}

// promoteTable computes and saves the table of delta v, leaving
// maintenance.
func (s *Store) promoteTable(ctx context.Context, im Image, v Version) error {
	dev, err := s.chain(im, v.Number, false)
	if err != nil {
		return err
	}
	defer dev.Close()
	t, err := s.deltaTable(ctx, im, v, dev)
	if err != nil {
		return fmt.Errorf("digests: %w", err)
	}
	return s.writeTable(im.Name, v.Number, t)
}

// chain opens version n read-only (writable if it is in maintenance and
// writable is set), with its parents.
func (s *Store) chain(im Image, n int, writable bool) (block.Device, error) {
	v, ok := im.Version(n)
	if !ok {
		return nil, errorf(ErrNotFound, "image %q has no version %d", im.Name, n)
	}
	if v.Kind == "base" {
		return block.OpenFile(s.path(im.Name, baseFile(n)), true)
	}
	parent, err := s.chain(im, v.Parent, false)
	if err != nil {
		return nil, err
	}
	o, err := writecache.OpenOverlay(parent, s.path(im.Name, deltaFile(n)), true)
	if err != nil {
		parent.Close()
		return nil, err
	}
	d := &version{Overlay: o}
	d.readOnly = !(writable && v.State == Maintenance)
	return d, nil
}

// OpenVersion opens version n of image name. A maintenance version
// opened writable takes writes into its delta (private mode); anything
// else is read-only. Closing it closes the chain.
func (s *Store) OpenVersion(_ context.Context, name string, n int, writable bool) (block.Device, error) {
	im, err := s.load(name)
	if err != nil {
		return nil, err
	}
	return s.chain(im, n, writable)
}

// version is a delta in the chain; closing it closes its parents.
type version struct {
	*writecache.Overlay
	readOnly bool
}

func (v *version) ReadOnly() bool { return v.readOnly }

func (v *version) WriteAt(ctx context.Context, p []byte, off int64, f block.Flags) error {
	if v.readOnly {
		return block.ErrReadOnly
	}
	return v.Overlay.WriteAt(ctx, p, off, f)
}

// TryWriteAt refuses every write of a read-only version; the overlay's
// own would bypass the check.
func (v *version) TryWriteAt(p []byte, off int64) bool {
	return !v.readOnly && v.Overlay.TryWriteAt(p, off)
}

func (v *version) Zero(ctx context.Context, off, n int64, f block.Flags) error {
	if v.readOnly {
		return block.ErrReadOnly
	}
	return v.Overlay.Zero(ctx, off, n, f)
}

func (v *version) Trim(ctx context.Context, off, n int64, f block.Flags) error {
	if v.readOnly {
		return block.ErrReadOnly
	}
	return v.Overlay.Trim(ctx, off, n, f)
}

func (v *version) Flush(ctx context.Context) error {
	if v.readOnly {
		return nil
	}
	return v.Overlay.Flush(ctx)
}

func (v *version) Close() error {
	err := v.Overlay.Close()
	if cerr := v.Overlay.Base().Close(); err == nil {
		err = cerr
	}
	return err
}

// Merge makes a new version with the content of version n: full makes
// it a new base (one raw file); partial makes one delta, over n's base,
// holding every block the deltas between them changed. The new version
// starts in test (its content is that of a version already out of
// maintenance); promote it to production.
func (s *Store) Merge(ctx context.Context, name string, n int, full bool) (Version, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	im, err := s.load(name)
	if err != nil {
		return Version{}, err
	}
	src, ok := im.Version(n)
	if !ok {
		return Version{}, errorf(ErrNotFound, "image %q has no version %d", name, n)
	}
	if src.State == Maintenance {
		return Version{}, errorf(ErrState, "version %d of image %q is in maintenance; promote it first", n, name)
	}
	dev, err := s.chain(im, n, false)
	if err != nil {
		return Version{}, err
	}
	defer dev.Close()
	nv := Version{Number: im.Versions[len(im.Versions)-1].Number + 1, State: Test, Created: time.Now().UTC(),
		Note: fmt.Sprintf("merge of version %d", n)}
	// The new version's content is n's, and so is its table.
	table, _ := s.readTable(im, n)
	if full || src.Kind == "base" {
		nv.Kind = "base"
		var fill *digest.Table
		if table == nil {
			fill = &digest.Table{BlockSize: digest.BlockSize, Size: im.Size, Sums: make([]digest.Sum, digest.Blocks(im.Size, digest.BlockSize))}
		}
		if err := copySparse(ctx, dev, s.path(name, baseFile(nv.Number)), fill); err != nil {
			return Version{}, err
		}
		if fill != nil {
			table = fill
		}
	} else {
		// Collect the deltas down to the base.
		var deltas []*writecache.Overlay
		var d block.Device = dev
		for {
			v, ok := d.(*version)
			if !ok {
				break
			}
			deltas = append(deltas, v.Overlay)
			d = v.Overlay.Base()
		}
		base := d
		for v := src; v.Kind == "delta"; v, _ = im.Version(v.Parent) {
			nv.Parent = v.Parent
		}
		o, err := writecache.OpenOverlay(base, s.path(name, deltaFile(nv.Number)), true)
		if err != nil {
			return Version{}, err
		}
		buf := make([]byte, writecache.BlockSize)
		nblocks := (im.Size + writecache.BlockSize - 1) / writecache.BlockSize
		for b := range nblocks {
			changed := false
			for _, dl := range deltas {
				changed = changed || dl.Written(b)
			}
			if !changed {
				continue
			}
			p := buf[:min(writecache.BlockSize, im.Size-b*writecache.BlockSize)]
			err := dev.ReadAt(ctx, p, b*writecache.BlockSize)
			if err == nil {
				err = o.WriteAt(ctx, p, b*writecache.BlockSize, 0)
			}
			if err != nil {
				o.Close()
				return Version{}, err
			}
		}
		if err := o.Flush(ctx); err != nil {
			o.Close()
			return Version{}, err
		}
		o.Close()
		nv.Kind = "delta"
		if table == nil {
			if table, err = s.table(ctx, im, n); err != nil {
				return Version{}, err
			}
		}
	}
	if err := s.writeTable(name, nv.Number, table); err != nil {
		return Version{}, err
	}
	im.Versions = append(im.Versions, nv)
	return nv, s.save(im)
}

// Inspect summarises version n: how many blocks its delta changed and
// how many bytes its files take on disk.
func (s *Store) Inspect(ctx context.Context, name string, n int) (Version, int64, int64, error) {
	im, err := s.load(name)
	if err != nil {
		return Version{}, 0, 0, err
	}
	v, ok := im.Version(n)
	if !ok {
		return Version{}, 0, 0, errorf(ErrNotFound, "image %q has no version %d", name, n)
	}
	file := baseFile(n)
	var blocks int64
	if v.Kind == "delta" {
		file = deltaFile(n)
		d, err := s.chain(im, n, false)
		if err != nil {
			return v, 0, 0, err
		}
		blocks = d.(*version).Blocks()
		d.Close()
	}
	var used int64
	if fi, err := os.Stat(s.path(name, file)); err == nil {
		used = diskUsage(fi)
	}
	return v, blocks, used, nil
}

var _ io.Closer = (*version)(nil)
