package imageexport

import (
	"context"
	"errors"
	"fmt"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/digest"
	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/block/nbd"
)

// DigestsDescription is the description of the export of the table of
// version n of image img: "IMAGE version N digests". The version's own
// export is described "IMAGE version N (STATE)", so a client can tell
// which version a table is of, whichever name it opened.
func DigestsDescription(img string, n int) string {
	return fmt.Sprintf("%s version %d digests", img, n)
}

// resolveDigests resolves the export of a table, named
// digest.ExportName(export): the version export names, out of
// maintenance.
func (e *Images) resolveDigests(ctx context.Context, name, export string) (image.Image, image.Version, nbd.ExportInfo, error) {
	im, v, err := e.resolve(ctx, export)
	if err != nil {
		return im, v, nbd.ExportInfo{}, err
	}
	if v.State == image.Maintenance {
		err := fmt.Errorf("%w: %s is in maintenance: it has no digests until it is promoted", nbd.ErrUnknownExport, Name(im.Name, v.Number))
		if e.Logger != nil {
			e.Logger.Debug("digests export refused", "export", name, "err", err)
		}
		return im, v, nbd.ExportInfo{}, err
	}
	size := digest.HeaderSize + 32*digest.Blocks(im.Size, digest.BlockSize)
	info := nbd.ExportInfo{Name: name, Size: size, Description: DigestsDescription(im.Name, v.Number), ReadOnly: true, MultiConn: true}
	return im, v, info, nil
}

// openDigests opens the export of a table: its bytes in memory, read
// once from the store for every connection.
func (e *Images) openDigests(ctx context.Context, name, export string) (block.Device, nbd.ExportInfo, error) {
	im, v, info, err := e.resolveDigests(ctx, name, export)
	if err != nil {
		return nil, info, err
	}
	key := Name(im.Name, v.Number)
	e.mu.Lock()
	d := e.tables[key]
	e.mu.Unlock()
	if d == nil {
		t, err := e.Store.Digests(ctx, im.Name, v.Number)
		if errors.Is(err, image.ErrState) || errors.Is(err, image.ErrNotFound) {
			return nil, info, fmt.Errorf("%w: %v", nbd.ErrUnknownExport, err)
		}
		if err != nil {
			return nil, info, fmt.Errorf("digests of %s: %w", key, err)
		}
		b, _ := t.MarshalBinary()
		if int64(len(b)) != info.Size {
			return nil, info, fmt.Errorf("digests of %s: a table of %d bytes, want %d", key, len(b), info.Size)
		}
		m := block.NewMemory(int64(len(b)))
		if err := m.WriteAt(ctx, b, 0, 0); err != nil {
			return nil, info, err
		}
		m.SetReadOnly(true)
		e.mu.Lock()
		if e.tables == nil {
			e.tables = make(map[string]block.Device)
		}
		if d = e.tables[key]; d == nil {
			d = m
			e.tables[key] = d
		}
		e.mu.Unlock()
	}
	return block.NopCloser(d), info, nil
}
