package hostexport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/usher-vdi/usher/internal/atomicfile"
	"github.com/usher-vdi/usher/internal/block/digest"
	"github.com/usher-vdi/usher/internal/block/hostcache"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/nbd"
)

// savedVersion is what the host knew of an image's version when it last
// reached upstream: enough to serve the cache when it starts while
// upstream is unreachable.
type savedVersion struct {
	Export   string `json:"export"` // as the VMs name it
	Pinned   string `json:"pinned"`
	Desc     string `json:"description"`
	Size     int64  `json:"size"`
	Identity string `json:"identity,omitempty"` // position keys
	Digests  bool   `json:"digests"`            // content keys: the table is beside
}

func (e *Exports) statePath(export, ext string) string {
	return filepath.Join(e.cfg.StateDir, url.PathEscape(export)+ext)
}

// save records v as image's version, atomically; a failure is logged: it
// costs only a start without upstream.
func (e *Exports) save(im *image, v *version) {
	if e.cfg.StateDir == "" {
		return
	}
	sv := savedVersion{Export: im.export, Pinned: v.export, Desc: v.desc, Size: v.up.Size(), Identity: v.ident, Digests: v.table != nil}
	err := func() error {
		if v.table != nil {
			b, _ := v.table.MarshalBinary()
			if err := atomicfile.WriteFile(e.statePath(im.export, ".digests"), b, 0o600); err != nil {
				return err
			}
		}
		b, err := json.MarshalIndent(sv, "", "  ")
		if err != nil {
			return err
		}
		return atomicfile.WriteFile(e.statePath(im.export, ".json"), b, 0o600)
	}()
	if err != nil {
		e.log.Warn("host cache: cannot save what it knows of an image version; a start without upstream will not serve it", "image", im.export, "err", err)
	}
}

// load returns image's saved version, not connected: its Upstream dials
// until upstream answers.
func (e *Exports) load(im *image, why error) (*version, error) {
	if e.cfg.StateDir == "" {
		return nil, errors.New("no saved version")
	}
	b, err := os.ReadFile(e.statePath(im.export, ".json"))
	if err != nil {
		return nil, err
	}
	var sv savedVersion
	if err := json.Unmarshal(b, &sv); err != nil || sv.Export != im.export || sv.Size <= 0 {
		return nil, fmt.Errorf("saved version of %s is damaged: %v", im.export, err)
	}
	v := &version{export: sv.Pinned, desc: sv.Desc, ident: sv.Identity}
	if sv.Digests {
		b, err := os.ReadFile(e.statePath(im.export, ".digests"))
		if err != nil {
			return nil, err
		}
		var t digest.Table
		if err := t.UnmarshalBinary(b); err != nil {
			return nil, err
		}
		if t.Size != sv.Size {
			return nil, fmt.Errorf("saved digests of %s do not match its size", im.export)
		}
		v.table = &t
	} else if sv.Identity == "" {
		return nil, fmt.Errorf("saved version of %s has neither digests nor identity", im.export)
	}
	opt := e.cfg.Upstream
	opt.Name = sv.Pinned
	// Reached at last, the export must serve the version saved.
	fp, want := Version, versionName(sv.Pinned, sv.Desc, sv.Size)
	if v.table == nil {
		fp, want = Identity, sv.Identity
	}
	v.up = hostcache.NewUpstreamDown(sv.Size, Redial(sv.Pinned, want, fp, func(ctx context.Context) (*nbd.Client, error) {
		return e.cfg.Dial(ctx, sv.Pinned)
	}), opt, why)
	v.dev = meter.Wrap(v.up, e.upLayer)
	return v, nil
}
