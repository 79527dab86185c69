package imageexport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/digest"
	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/block/ramcache"
	"github.com/usher-vdi/usher/internal/block/writecache"
)

// Layer names the meter counts under.
const (
	LayerImage     = "image"           // reads of the store's files
	LayerRAMCache  = "ramcache"        // reads served through the RAM cache
	LayerWriteDisk = "writecache_disk" // server-disk write caches
	LayerPrivate   = "private"         // private-mode writes into a version
)

// Images serves a store's images over NBD. An export is named IMAGE
// (its production version) or IMAGE@N (see Name).
//
// Standard mode (any version out of maintenance): the version is shared,
// read-only, through the RAM cache; when WriteCacheDir is set each
// connection gets its own sparse overlay there (the server-disk write
// cache), removed when the connection ends, so a target's writes vanish
// at its next boot and no target sees another's. Without WriteCacheDir
// the export is read-only and advertises CAN_MULTI_CONN (targets use a
// device-side cache, `usher target`).
//
// Private mode (a maintenance version): one connection at a time writes
// into the version's delta; a second gets ErrExportBusy. Only an
// authenticated client (nbd.Peer.Authenticated: a verified TLS client
// certificate) may open it, unless AllowAnonymousWrites; others get
// nbd.ErrUnauthenticated.
//
// Tables of digests: the export digest.ExportName(X) ("IMAGE@N/digests"
// or "IMAGE/digests") serves the table of the version X names
// (image.Store.Digests) in its wire form (digest.Table.MarshalBinary),
// read-only and CAN_MULTI_CONN, to whoever may open X. IMAGE/digests is
// the production version's at the time it is opened; its description,
// "IMAGE version N digests" (DigestsDescription), names the version, as
// X's "IMAGE version N (STATE)" does. A maintenance version has no
// table: its export is refused with nbd.ErrUnknownExport. Tables are
// read from the store once per version and kept in memory (32 bytes per
// 64 KiB of image) until Close. They are not listed (List): they are
// data about a disk, not disks, and a client that lists exports to
// boot or inspect them should not find them there; a cache derives the
// name from the export it reads.
type Images struct {
	Store         *image.Store
	Cache         *ramcache.Cache // nil: no RAM cache
	WriteCacheDir string
	// WriteCacheMax bounds one connection's server-disk write cache and
	// WriteCacheQuota every connection's together (0 and nil: no
	// bound); a write past either gets ENOSPC.
	WriteCacheMax   int64
	WriteCacheQuota *writecache.Quota
	// AllowAnonymousWrites lets any client open a maintenance version.
	AllowAnonymousWrites bool
	// RequireAuth refuses every export, and the list of them, to a
	// client that is not authenticated.
	RequireAuth bool
	Meters      *meter.Registry // nil: not metered
	Logger      *slog.Logger

	mu     sync.Mutex
	shared map[string]block.Device // "image@n" -> cached read-only chain
	tables map[string]block.Device // "image@n" -> its table of digests, in memory
	seq    atomic.Int64
}

var _ nbd.Exporter = (*Images)(nil)

func (e *Images) counters(layer string) *meter.Counters {
	if e.Meters == nil {
		return new(meter.Counters)
	}
	return e.Meters.Layer(layer)
}

// Name is the export name of version n of an image: IMAGE@N.
func Name(img string, n int) string { return fmt.Sprintf("%s@%d", img, n) }

// ParseName splits an export name into its image and version; a name
// without "@" (IMAGE) has no version, and means the image's production
// version. It fails when the version is not a number as Name writes it
// (decimal digits, no sign, no leading zero), so that an export has one
// name: a name it accepts is Name(img, n).
func ParseName(name string) (img string, n int, hasVersion bool, err error) {
	img, ver, hasVersion := strings.Cut(name, "@")
	if hasVersion {
		if n, err = strconv.Atoi(ver); err != nil || strconv.Itoa(n) != ver || n < 0 {
			return img, 0, true, fmt.Errorf("version %q", ver)
		}
	}
	return img, n, hasVersion, nil
}

// resolve parses an export name into an image and version.
func (e *Images) resolve(ctx context.Context, name string) (image.Image, image.Version, error) {
	imgName, n, hasVer, verErr := ParseName(name)
	im, err := e.Store.Get(ctx, imgName)
	if err == nil {
		err = verErr
	}
	if err != nil {
		return image.Image{}, image.Version{}, fmt.Errorf("%w: %v", nbd.ErrUnknownExport, err)
	}
	if !hasVer {
		n = im.Production()
	}
	v, ok := im.Version(n)
	if !ok {
		return image.Image{}, image.Version{}, fmt.Errorf("%w: %q has no version %d", nbd.ErrUnknownExport, imgName, n)
	}
	return im, v, nil
}

func (e *Images) info(name string, im image.Image, v image.Version) nbd.ExportInfo {
	info := nbd.ExportInfo{Name: name, Size: im.Size, Description: fmt.Sprintf("%s version %d (%s)", im.Name, v.Number, v.State)}
	switch {
	case v.State == image.Maintenance:
	case e.WriteCacheDir == "":
		info.ReadOnly, info.MultiConn = true, true
	}
	return info
}

// authorize refuses an unauthenticated client when every export needs
// authentication, or when write says it is opening a private version.
func (e *Images) authorize(ctx context.Context, write bool) error {
	if nbd.PeerFrom(ctx).Authenticated() {
		return nil
	}
	if e.RequireAuth || write && !e.AllowAnonymousWrites {
		return nbd.ErrUnauthenticated
	}
	return nil
}

// Info implements nbd.Exporter.
func (e *Images) Info(ctx context.Context, name string) (nbd.ExportInfo, error) {
	if err := e.authorize(ctx, false); err != nil {
		return nbd.ExportInfo{}, err
	}
	if export, ok := digest.ParseExportName(name); ok {
		_, _, info, err := e.resolveDigests(ctx, name, export)
		return info, err
	}
	im, v, err := e.resolve(ctx, name)
	if err != nil {
		return nbd.ExportInfo{}, err
	}
	return e.info(name, im, v), nil
}

// List implements nbd.Exporter: each image and each of its versions (not
// their tables of digests).
func (e *Images) List(ctx context.Context) ([]nbd.ExportInfo, error) {
	if err := e.authorize(ctx, false); err != nil {
		return nil, err
	}
	ims, err := e.Store.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []nbd.ExportInfo
	for _, im := range ims {
		if p := im.Production(); p >= 0 {
			v, _ := im.Version(p)
			out = append(out, e.info(im.Name, im, v))
		}
		for _, v := range im.Versions {
			out = append(out, e.info(Name(im.Name, v.Number), im, v))
		}
	}
	return out, nil
}

// Open implements nbd.Exporter.
func (e *Images) Open(ctx context.Context, name, remote string) (block.Device, nbd.ExportInfo, error) {
	if err := e.authorize(ctx, false); err != nil {
		return nil, nbd.ExportInfo{}, err
	}
	if export, ok := digest.ParseExportName(name); ok {
		return e.openDigests(ctx, name, export)
	}
	im, v, err := e.resolve(ctx, name)
	if err != nil {
		return nil, nbd.ExportInfo{}, err
	}
	info := e.info(name, im, v)
	key := Name(im.Name, v.Number)
	if v.State == image.Maintenance {
		if err := e.authorize(ctx, true); err != nil {
			return nil, info, fmt.Errorf("%w: %s is a maintenance version", err, key)
		}
		detach, err := e.Store.AttachWriter(im.Name, v.Number)
		if err != nil {
			return nil, info, fmt.Errorf("%w: %s has a writer", nbd.ErrExportBusy, key)
		}
		d, err := e.Store.OpenVersion(ctx, im.Name, v.Number, true)
		if err != nil {
			detach()
			return nil, info, err
		}
		return &private{Device: meter.Wrap(d, e.counters(LayerPrivate)), release: detach}, info, nil
	}
	shared, err := e.sharedVersion(ctx, im, v.Number, key)
	if err != nil {
		return nil, info, err
	}
	if e.WriteCacheDir == "" {
		return block.NopCloser(shared), info, nil
	}
	path := filepath.Join(e.WriteCacheDir, fmt.Sprintf("%s.%d.%d.wc", key, os.Getpid(), e.seq.Add(1)))
	o, err := writecache.OpenOverlayWith(shared, path, writecache.OverlayOptions{Max: e.WriteCacheMax, Quota: e.WriteCacheQuota})
	if err != nil {
		return nil, info, err
	}
	if e.Logger != nil {
		e.Logger.Debug("server-disk write cache", "export", name, "remote", remote, "path", path)
	}
	return meter.Wrap(o, e.counters(LayerWriteDisk)), info, nil
}

// sharedVersion returns the read-only, cached chain of a version,
// opening it once for every connection.
func (e *Images) sharedVersion(ctx context.Context, im image.Image, n int, key string) (block.Device, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d := e.shared[key]; d != nil {
		return d, nil
	}
	d, err := e.Store.OpenVersion(ctx, im.Name, n, false)
	if err != nil {
		return nil, err
	}
	d = meter.Wrap(d, e.counters(LayerImage))
	if e.Cache != nil {
		d = meter.Wrap(e.Cache.Wrap(d), e.counters(LayerRAMCache))
	}
	if e.shared == nil {
		e.shared = make(map[string]block.Device)
	}
	e.shared[key] = d
	return d, nil
}

// Close closes the shared versions and drops the tables of digests.
// Connections must be closed first.
func (e *Images) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for k, d := range e.shared {
		errs = append(errs, d.Close())
		delete(e.shared, k)
	}
	clear(e.tables)
	return errors.Join(errs...)
}

// private is a maintenance version with its one writer: closing it
// flushes the version and lets the writer go. It is a block.Wrapper, so
// the version keeps its inline writes and extents.
type private struct {
	block.Device
	release func()
}

var _ block.Wrapper = (*private)(nil)

func (p *private) Unwrap() block.Device { return p.Device }

func (p *private) Close() error {
	err := p.Device.Flush(context.Background())
	if cerr := p.Device.Close(); err == nil {
		err = cerr
	}
	p.release()
	return err
}
