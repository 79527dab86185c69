package image

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

// Exports serves a store's images over NBD. An export is named IMAGE
// (its newest production version) or IMAGE@N.
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
// into the version's delta; a second gets ErrExportBusy.
type Exports struct {
	Store         *Store
	Cache         *ramcache.Cache // nil: no RAM cache
	WriteCacheDir string
	Meters        *meter.Registry // nil: not metered
	Logger        *slog.Logger

	mu     sync.Mutex
	shared map[string]block.Device // "image@n" -> cached read-only chain
	seq    atomic.Int64
}

var _ nbd.Exporter = (*Exports)(nil)

func (e *Exports) counters(layer string) *meter.Counters {
	if e.Meters == nil {
		return new(meter.Counters)
	}
	return e.Meters.Layer(layer)
}

// resolve parses an export name into an image and version.
func (e *Exports) resolve(name string) (Image, Version, error) {
	imgName, ver, hasVer := strings.Cut(name, "@")
	im, err := e.Store.load(imgName)
	if err != nil {
		return Image{}, Version{}, fmt.Errorf("%w: %v", nbd.ErrUnknownExport, err)
	}
	n := im.Production()
	if hasVer {
		if n, err = strconv.Atoi(ver); err != nil {
			return Image{}, Version{}, fmt.Errorf("%w: version %q", nbd.ErrUnknownExport, ver)
		}
	}
	v, ok := im.Version(n)
	if !ok {
		return Image{}, Version{}, fmt.Errorf("%w: %q has no version %d", nbd.ErrUnknownExport, imgName, n)
	}
	return im, v, nil
}

func (e *Exports) info(name string, im Image, v Version) nbd.ExportInfo {
	info := nbd.ExportInfo{Name: name, Size: im.Size, Description: fmt.Sprintf("%s version %d (%s)", im.Name, v.Number, v.State)}
	switch {
	case v.State == Maintenance:
	case e.WriteCacheDir == "":
		info.ReadOnly, info.MultiConn = true, true
	}
	return info
}

// Info implements nbd.Exporter.
func (e *Exports) Info(_ context.Context, name string) (nbd.ExportInfo, error) {
	im, v, err := e.resolve(name)
	if err != nil {
		return nbd.ExportInfo{}, err
	}
	return e.info(name, im, v), nil
}

// List implements nbd.Exporter: each image and each of its versions.
func (e *Exports) List(ctx context.Context) ([]nbd.ExportInfo, error) {
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
			name := fmt.Sprintf("%s@%d", im.Name, v.Number)
			out = append(out, e.info(name, im, v))
		}
	}
	return out, nil
}

// Open implements nbd.Exporter.
func (e *Exports) Open(ctx context.Context, name, remote string) (block.Device, nbd.ExportInfo, error) {
	im, v, err := e.resolve(name)
	if err != nil {
		return nil, nbd.ExportInfo{}, err
	}
	info := e.info(name, im, v)
	key := fmt.Sprintf("%s@%d", im.Name, v.Number)
	if v.State == Maintenance {
		detach, err := e.Store.attachWriter(im.Name, v.Number)
		if err != nil {
			return nil, info, fmt.Errorf("%w: %s has a writer", nbd.ErrExportBusy, key)
		}
		d, err := e.Store.chain(im, v.Number, true)
		if err != nil {
			detach()
			return nil, info, err
		}
		return &private{Device: meter.Wrap(d, e.counters(LayerPrivate)), release: detach}, info, nil
	}
	shared, err := e.sharedVersion(im, v.Number, key)
	if err != nil {
		return nil, info, err
	}
	if e.WriteCacheDir == "" {
		return noClose{shared}, info, nil
	}
	path := filepath.Join(e.WriteCacheDir, fmt.Sprintf("%s.%d.%d.wc", key, os.Getpid(), e.seq.Add(1)))
	o, err := writecache.OpenOverlay(shared, path, false)
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
func (e *Exports) sharedVersion(im Image, n int, key string) (block.Device, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d := e.shared[key]; d != nil {
		return d, nil
	}
	d, err := e.Store.chain(im, n, false)
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

// Close closes the shared versions. Connections must be closed first.
func (e *Exports) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for k, d := range e.shared {
		errs = append(errs, d.Close())
		delete(e.shared, k)
	}
	return errors.Join(errs...)
}

type noClose struct{ block.Device }

func (noClose) Close() error { return nil }

func (n noClose) TryReadAt(p []byte, off int64) bool { return block.TryReadAt(n.Device, p, off) }

func (n noClose) TryWriteAt(p []byte, off int64) bool { return block.TryWriteAt(n.Device, p, off) }

func (n noClose) TrySlices(off, length int64, dst [][]byte) ([][]byte, bool) {
	return block.TrySlices(n.Device, off, length, dst)
}

func (n noClose) Extents(ctx context.Context, off, length int64, dst []block.Extent) ([]block.Extent, error) {
	return block.Extents(ctx, n.Device, off, length, dst)
}

// private is a maintenance version with its one writer.
type private struct {
	block.Device
	release func()
}

func (p *private) Close() error {
	err := p.Device.Flush(context.Background())
	if cerr := p.Device.Close(); err == nil {
		err = cerr
	}
	p.release()
	return err
}
