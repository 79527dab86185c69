package image

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/usher-vdi/usher/internal/atomicfile"
	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/digest"
	"github.com/usher-vdi/usher/internal/block/writecache"
)

// Every version out of maintenance has a table of the digests of its
// blocks (block/digest) in vN.digests, in the table's wire form: Import
// computes the base's in the pass that copies it, Promote computes a
// delta's when it leaves maintenance (its parent's table with the blocks
// its delta wrote computed again) and Merge gives the new version its
// source's. A maintenance version has none: its content still changes.
//
// The files are a cache of data derivable from the versions' content:
// a missing one (a store written before the store computed them) or a
// damaged one is computed again when asked for, and saved.

func digestFile(n int) string { return fmt.Sprintf("v%d.digests", n) }

// Digests returns the table of the digests of version n of image name,
// over blocks of digest.BlockSize bytes; the caller may keep and change
// it. It fails with ErrNotFound for a missing image or version, and with
// ErrState for a version in maintenance, which has no table until it is
// promoted. A version whose table file is missing or damaged gets its
// table computed from its content (from its parent's table and its delta
// when the parent has one) and saved; Logger, when set, says so. A table
// that cannot be saved (a read-only store) is still returned.
func (s *Store) Digests(ctx context.Context, name string, n int) (*digest.Table, error) {
	im, err := s.load(name)
	if err != nil {
		return nil, err
	}
	v, ok := im.Version(n)
	if !ok {
		return nil, errorf(ErrNotFound, "image %q has no version %d", name, n)
	}
	if v.State == Maintenance {
		return nil, errorf(ErrState, "version %d of image %q is in maintenance: it has no digests until it is promoted", n, name)
	}
	return s.table(ctx, im, n)
}

// flight is one computation of a table that concurrent callers wait for.
type flight struct {
	done chan struct{}
	t    *digest.Table
	err  error
}

// table returns version n's table from its file, or computes and saves
// it (once for concurrent callers) when the file is missing or damaged.
func (s *Store) table(ctx context.Context, im Image, n int) (*digest.Table, error) {
	if t, _ := s.readTable(im, n); t != nil {
		return t, nil
	}
	key := fmt.Sprintf("%s@%d", im.Name, n)
	for {
		s.fmu.Lock()
		if f := s.flights[key]; f != nil {
			s.fmu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if f.err != nil && (errors.Is(f.err, context.Canceled) || errors.Is(f.err, context.DeadlineExceeded)) {
				continue // the caller that computed it gave up; this one may not
			}
			if f.err != nil {
				return nil, f.err
			}
			return clone(f.t), nil
		}
		f := &flight{done: make(chan struct{})}
		if s.flights == nil {
			s.flights = make(map[string]*flight)
		}
		s.flights[key] = f
		s.fmu.Unlock()

		f.t, f.err = s.recover(ctx, im, n)
		s.fmu.Lock()
		delete(s.flights, key)
		s.fmu.Unlock()
		close(f.done)
		if f.err != nil {
			return nil, f.err
		}
		return clone(f.t), nil
	}
}

// recover computes and saves the table of version n, whose file was
// missing or damaged when its caller looked (another caller may have
// saved it since).
func (s *Store) recover(ctx context.Context, im Image, n int) (*digest.Table, error) {
	t, why := s.readTable(im, n)
	if t != nil {
		return t, nil
	}
	v, _ := im.Version(n)
	dev, err := s.chain(im, n, false)
	if err != nil {
		return nil, fmt.Errorf("digests of version %d of image %q: %w", n, im.Name, err)
	}
	defer dev.Close()
	if v.Kind == "delta" {
		t, err = s.deltaTable(ctx, im, v, dev)
	} else {
		t, err = digest.Compute(ctx, dev, digest.BlockSize, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("digests of version %d of image %q: %w", n, im.Name, err)
	}
	if err := s.writeTable(im.Name, n, t); err != nil {
		s.log().Warn("image store: digests computed but not saved", "image", im.Name, "version", n, "err", err)
	} else {
		s.log().Info("image store: digests computed again", "image", im.Name, "version", n, "why", why)
	}
	return t, nil
}

// deltaTable computes the table of delta v, open as dev: its parent's
// table with every digest block its delta wrote computed again.
func (s *Store) deltaTable(ctx context.Context, im Image, v Version, dev block.Device) (*digest.Table, error) {
	ver, ok := dev.(*version)
	if !ok {
		return nil, fmt.Errorf("version %d is not a delta", v.Number)
	}
	parent, err := s.table(ctx, im, v.Parent)
	if err != nil {
		return nil, err
	}
	if err := parent.Update(ctx, dev, changedBlocks(ver.Overlay, im.Size), nil); err != nil {
		return nil, err
	}
	return parent, nil
}

// changedBlocks returns the digest blocks, in ascending order, that hold
// a block o has written.
func changedBlocks(o *writecache.Overlay, size int64) []int64 {
	const per = digest.BlockSize / writecache.BlockSize
	small := (size + writecache.BlockSize - 1) / writecache.BlockSize
	var out []int64
	for i := range digest.Blocks(size, digest.BlockSize) {
		for b := i * per; b < min((i+1)*per, small); b++ {
			if o.Written(b) {
				out = append(out, i)
				break
			}
		}
	}
	return out
}

// readTable reads version n's table file; when it is missing or does not
// hold a table of the image, it returns nil and why.
func (s *Store) readTable(im Image, n int) (*digest.Table, string) {
	b, err := os.ReadFile(s.path(im.Name, digestFile(n)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, "no table"
	}
	if err != nil {
		return nil, err.Error()
	}
	t := new(digest.Table)
	switch err := t.UnmarshalBinary(b); {
	case err != nil:
		return nil, err.Error()
	case t.BlockSize != digest.BlockSize:
		return nil, fmt.Sprintf("a table of %d-byte blocks, not %d", t.BlockSize, digest.BlockSize)
	case t.Size != im.Size:
		return nil, fmt.Sprintf("a table of %d bytes for an image of %d", t.Size, im.Size)
	}
	return t, ""
}

// writeTable saves t as version n's table, atomically (atomicfile): a
// crash leaves the old file or the new one, never a part.
func (s *Store) writeTable(name string, n int, t *digest.Table) error {
	b, err := t.MarshalBinary()
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(s.path(name, digestFile(n)), b, 0o600); err != nil {
		return fmt.Errorf("save digests of version %d: %w", n, err)
	}
	return nil
}

func clone(t *digest.Table) *digest.Table {
	c := *t
	c.Sums = append([]digest.Sum(nil), t.Sums...)
	return &c
}

// DigestStats summarises a version's table of digests.
type DigestStats struct {
	Blocks   int64 // digest blocks
	Distinct int64 // distinct digests among them
	Zero     int64 // blocks of zeros
	// Changed is how many blocks differ from the parent's (a delta's),
	// or -1 (a base).
	Changed int64
}

// InspectDigests summarises version n's table of digests, computing it
// (and a delta's parent's) as Digests does when missing. It fails with
// ErrState for a maintenance version, as Digests.
func (s *Store) InspectDigests(ctx context.Context, name string, n int) (DigestStats, error) {
	t, err := s.Digests(ctx, name, n)
	if err != nil {
		return DigestStats{}, err
	}
	st := DigestStats{Blocks: int64(len(t.Sums)), Changed: -1}
	seen := make(map[digest.Sum]struct{}, len(t.Sums))
	for i, sum := range t.Sums {
		seen[sum] = struct{}{}
		if digest.IsZero(sum, t.Len(int64(i))) {
			st.Zero++
		}
	}
	st.Distinct = int64(len(seen))
	im, err := s.load(name)
	if err != nil {
		return st, err
	}
	if v, _ := im.Version(n); v.Kind == "delta" {
		p, err := s.Digests(ctx, name, v.Parent)
		if err != nil {
			return st, err
		}
		st.Changed = 0
		for i := range t.Sums {
			if t.Sums[i] != p.Sums[i] {
				st.Changed++
			}
		}
	}
	return st, nil
}
