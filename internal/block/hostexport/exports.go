package hostexport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/digest"
	"github.com/usher-vdi/usher/internal/block/hostcache"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/block/writecache"
)

// Layer names of the meter.
const (
	LayerUpstream = "hostcache_upstream" // reads of upstream, every VM's
	LayerWrites   = "hostcache_writes"   // VM writes, to local overlays or upstream
)

// WarmPrefix starts the export that warms an image: warm/IMAGE.
const WarmPrefix = "warm/"

// Where VM writes go.
const (
	WritesLocal    = "local"
	WritesUpstream = "upstream"
)

// DialFunc connects to an export of the upstream stream.
type DialFunc func(ctx context.Context, export string) (*nbd.Client, error)

// Config configures Exports.
type Config struct {
	Dial  DialFunc
	Cache *hostcache.Cache
	// VMs maps each VM's name to its image's upstream export.
	VMs map[string]string
	// Writes is WritesLocal (default) or WritesUpstream; WritesDir holds
	// the local overlays.
	Writes    string
	WritesDir string
	// Resolve is how long a resolution of an image's version is reused
	// by the next VMs that boot it (default 2 s): a boot storm dials
	// upstream once, not once per VM.
	Resolve  time.Duration
	Upstream hostcache.UpstreamOptions
	// RecordDir, when set, receives VM.trace at each boot of a VM: the
	// reads of its image in the first RecordFor (default 2 minutes), for
	// `usher hostcache warm --trace`.
	RecordDir string
	RecordFor time.Duration
	// StateDir, when set, keeps what the host last knew of each image's
	// version (its name, size, digests), so that a host started while
	// upstream is unreachable still serves what its cache holds.
	StateDir string
	Meters   *meter.Registry // nil: not metered
	Logger   *slog.Logger
}

// Exports is the nbd.Exporter of a host's VMs. It is safe for
// concurrent use.
type Exports struct {
	cfg     Config
	log     *slog.Logger
	upLayer *meter.Counters
	wLayer  *meter.Counters

	mu     sync.Mutex
	images map[string]*image // by upstream export
	vms    map[string]*vm
	closed bool

	seq atomic.Int64 // boots with local writes, naming their overlays
}

var _ nbd.Exporter = (*Exports)(nil)

// image is an upstream export some VMs boot, and its current version.
type image struct {
	export   string
	cur      *version
	resolved time.Time
	mu       sync.Mutex // serialises resolutions
}

// version is one version of an image as the host reads it: a shared
// connection, and how its blocks are keyed. It is closed when neither
// its image nor a VM holds it.
type version struct {
	export string // pinned: IMAGE@N when the stream names the version
	desc   string
	up     *hostcache.Upstream
	dev    block.Device // up, metered
	table  *digest.Table
	ident  string // position keys, without a table
	refs   int    // the image's, and each VM boot's; guarded by Exports.mu
}

// device returns a new cache Device over the version.
func (v *version) device(c *hostcache.Cache) *hostcache.Device {
	if v.table != nil {
		if d, err := c.WrapDigests(v.dev, v.table); err == nil {
			return d
		}
	}
	return c.Wrap(v.dev, v.ident)
}

// vm is a VM's state across its boots.
type vm struct {
	name, image string
	busy        bool
	idle        chan struct{}     // closed when busy is cleared
	cur         *hostcache.Device // this boot's
	past        hostcache.DeviceStats
	boots       int64
}

// New returns the Exports of cfg.
func New(cfg Config) (*Exports, error) {
	if cfg.Writes == "" {
		cfg.Writes = WritesLocal
	}
	switch {
	case cfg.Writes != WritesLocal && cfg.Writes != WritesUpstream:
		return nil, fmt.Errorf("hostexport: writes %q is not %s or %s", cfg.Writes, WritesLocal, WritesUpstream)
	case cfg.Writes == WritesLocal && cfg.WritesDir == "":
		return nil, errors.New("hostexport: local writes need a directory")
	case len(cfg.VMs) == 0:
		return nil, errors.New("hostexport: no VMs")
	}
	if cfg.Resolve <= 0 {
		cfg.Resolve = 2 * time.Second
	}
	if cfg.RecordFor <= 0 {
		cfg.RecordFor = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Upstream.Logger == nil {
		cfg.Upstream.Logger = cfg.Logger
	}
	e := &Exports{cfg: cfg, log: cfg.Logger, images: map[string]*image{}, vms: map[string]*vm{},
		upLayer: new(meter.Counters), wLayer: new(meter.Counters)}
	if cfg.Meters != nil {
		e.upLayer, e.wLayer = cfg.Meters.Layer(LayerUpstream), cfg.Meters.Layer(LayerWrites)
	}
	for name, img := range cfg.VMs {
		if name == "" || strings.ContainsAny(name, "/\x00") || img == "" {
			return nil, fmt.Errorf("hostexport: VM %q (image %q): a VM's name is not empty and has no '/'", name, img)
		}
		e.vms[name] = &vm{name: name, image: img}
		if e.images[img] == nil {
			e.images[img] = &image{export: img}
		}
	}
	if cfg.Writes == WritesLocal {
		removeOverlays(cfg.WritesDir, e.vms)
	}
	return e, nil
}

// Prepare reaches every image once, so that a wrong image name or an
// unreachable upstream fails at start rather than at a VM's boot.
func (e *Exports) Prepare(ctx context.Context) error {
	for _, name := range slices.Sorted(maps.Keys(e.images)) {
		v, err := e.resolve(ctx, e.images[name], true)
		if err != nil {
			return err
		}
		e.release(v)
	}
	return nil
}

// resolve returns image's current version, resolving it again when the
// last resolution is older than cfg.Resolve (or force). The caller
// holds a reference to the version and must release it. When upstream
// cannot be reached, the version already known is returned: the VM
// boots from what the cache holds.
func (e *Exports) resolve(ctx context.Context, im *image, force bool) (*version, error) {
	im.mu.Lock()
	defer im.mu.Unlock()
	e.mu.Lock()
	if cur := im.cur; cur != nil && !force && time.Since(im.resolved) < e.cfg.Resolve {
		cur.refs++
		e.mu.Unlock()
		return cur, nil
	}
	e.mu.Unlock()
	c, err := e.cfg.Dial(ctx, im.export)
	if err != nil {
		e.mu.Lock()
		if cur := im.cur; cur != nil {
			e.log.Warn("host cache: upstream unreachable at a boot; serving the version known", "image", im.export, "version", cur.desc, "err", err)
			cur.refs++
			e.mu.Unlock()
			return cur, nil
		}
		e.mu.Unlock()
		v, lerr := e.load(im, err)
		if lerr != nil {
			return nil, fmt.Errorf("upstream %s: %w", im.export, err)
		}
		e.log.Warn("host cache: upstream unreachable; serving the version saved when it was last reached, from the cache alone until it is back",
			"image", im.export, "version", v.desc, "err", err)
		e.mu.Lock()
		defer e.mu.Unlock()
		// Resolved long ago: the next boot tries upstream again.
		im.cur = v
		v.refs += 2
		return v, nil
	}
	pinned, numbered := pin(im.export, c.Description())
	e.mu.Lock()
	if cur := im.cur; cur != nil && cur.export == pinned && cur.desc == versionOf(c.Description()) && cur.up.Size() == c.Size() {
		cur.refs++
		im.resolved = time.Now()
		e.mu.Unlock()
		c.Close()
		return cur, nil
	}
	e.mu.Unlock()
	v, err := e.open(ctx, im, c, pinned, numbered)
	if err != nil {
		return nil, err
	}
	e.save(im, v)
	e.mu.Lock()
	defer e.mu.Unlock()
	old := im.cur
	im.cur, im.resolved = v, time.Now()
	v.refs += 2 // the image's and the caller's
	if old != nil {
		e.log.Info("host cache: image has a new version; VMs boot it from now on", "image", im.export, "old", old.desc, "new", v.desc)
		e.unref(old)
	}
	return v, nil
}

// pin returns the export that names the version c is connected to: the
// stream describes an export "NAME version N (STATE)", and NAME@N stays
// that version when NAME moves on.
func pin(export, desc string) (string, bool) {
	f := strings.Fields(desc)
	if len(f) >= 3 && f[1] == "version" {
		if _, err := strconv.Atoi(f[2]); err == nil {
			name, _, _ := strings.Cut(export, "@")
			if name == f[0] {
				return name + "@" + f[2], true
			}
		}
	}
	return export, false
}

// versionOf is a description without its state, which changes when a
// version is promoted.
func versionOf(desc string) string {
	if i := strings.LastIndex(desc, " ("); i >= 0 {
		return desc[:i]
	}
	return desc
}

// open makes the version c is connected to: its digests when the stream
// serves them, else its identity for position keys.
func (e *Exports) open(ctx context.Context, im *image, c *nbd.Client, pinned string, numbered bool) (*version, error) {
	v := &version{export: pinned, desc: versionOf(c.Description())}
	if numbered {
		t, err := e.digests(ctx, pinned, c.Size())
		switch {
		case err != nil:
			e.log.Info("host cache: no digests for this version; its blocks are keyed by position", "image", im.export, "version", v.desc, "err", err)
		case t.BlockSize != e.cfg.Cache.BlockSize():
			e.log.Warn("host cache: the stream's digests are of another block size; keyed by position", "image", im.export,
				"digest_block_size", t.BlockSize, "cache_block_size", e.cfg.Cache.BlockSize())
		default:
			v.table = t
		}
	}
	// Dialled again, the export must serve this version: its identity
	// when its blocks are keyed by position, else (the digests name
	// the blocks) the version the stream describes.
	fp := Version
	if v.table == nil {
		fp = Identity
	}
	want, err := fp(ctx, pinned, c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("upstream %s: %w", pinned, err)
	}
	if v.table == nil {
		v.ident = want
	}
	opt := e.cfg.Upstream
	opt.Name = pinned
	v.up = hostcache.NewUpstream(c, Redial(pinned, want, fp, func(ctx context.Context) (*nbd.Client, error) {
		return e.cfg.Dial(ctx, pinned)
	}), opt)
	v.dev = meter.Wrap(v.up, e.upLayer)
	e.log.Info("host cache: image reached", "image", im.export, "version", v.desc, "export", pinned, "size", c.Size(),
		"keyed_by", map[bool]string{true: "content", false: "position"}[v.table != nil])
	return v, nil
}

// digests reads the table of export from the stream.
func (e *Exports) digests(ctx context.Context, export string, size int64) (*digest.Table, error) {
	c, err := e.cfg.Dial(ctx, digest.ExportName(export))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if c.Size() < digest.HeaderSize || c.Size() > 1<<33 {
		return nil, fmt.Errorf("a digest table of %d bytes", c.Size())
	}
	b := make([]byte, c.Size())
	if err := c.ReadAt(ctx, b, 0); err != nil {
		return nil, err
	}
	var t digest.Table
	if err := t.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	if t.Size != size {
		return nil, fmt.Errorf("digests of %d bytes for an image of %d", t.Size, size)
	}
	return &t, nil
}

// release drops a reference to v.
func (e *Exports) release(v *version) {
	e.mu.Lock()
	e.unref(v)
	e.mu.Unlock()
}

// unref drops a reference, closing v with the last; the caller holds mu.
func (e *Exports) unref(v *version) {
	v.refs--
	if v.refs == 0 {
		go v.up.Close()
	}
}

// Info implements nbd.Exporter.
func (e *Exports) Info(ctx context.Context, name string) (nbd.ExportInfo, error) {
	if img, ok := strings.CutPrefix(name, WarmPrefix); ok {
		im := e.images[img]
		if im == nil {
			return nbd.ExportInfo{}, fmt.Errorf("%w %q: no VM of this host boots image %q", nbd.ErrUnknownExport, name, img)
		}
		v, err := e.resolve(ctx, im, false)
		if err != nil {
			return nbd.ExportInfo{}, err
		}
		defer e.release(v)
		return nbd.ExportInfo{Name: name, Description: "warm " + v.desc, Size: v.up.Size(), ReadOnly: true, MultiConn: true}, nil
	}
	m := e.vms[name]
	if m == nil {
		return nbd.ExportInfo{}, fmt.Errorf("%w %q", nbd.ErrUnknownExport, name)
	}
	v, err := e.resolve(ctx, e.images[m.image], false)
	if err != nil {
		return nbd.ExportInfo{}, err
	}
	defer e.release(v)
	return nbd.ExportInfo{Name: name, Description: "VM " + name + ", " + v.desc, Size: v.up.Size()}, nil
}

// List implements nbd.Exporter: the VMs.
func (e *Exports) List(ctx context.Context) ([]nbd.ExportInfo, error) {
	var out []nbd.ExportInfo
	for _, name := range slices.Sorted(maps.Keys(e.vms)) {
		info, err := e.Info(ctx, name)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// Open implements nbd.Exporter: a VM's connection is a new boot of its
// image's current version.
func (e *Exports) Open(ctx context.Context, name, _ string) (block.Device, nbd.ExportInfo, error) {
	if _, ok := strings.CutPrefix(name, WarmPrefix); ok {
		info, err := e.Info(ctx, name)
		if err != nil {
			return nil, info, err
		}
		v, err := e.resolve(ctx, e.images[strings.TrimPrefix(name, WarmPrefix)], false)
		if err != nil {
			return nil, info, err
		}
		return &warmDevice{Device: v.device(e.cfg.Cache), release: func() { e.release(v) }}, info, nil
	}
	m := e.vms[name]
	if m == nil {
		return nil, nbd.ExportInfo{}, fmt.Errorf("%w %q", nbd.ErrUnknownExport, name)
	}
	if err := e.take(ctx, m); err != nil {
		return nil, nbd.ExportInfo{}, err
	}
	d, info, err := e.boot(ctx, m)
	if err != nil {
		e.mu.Lock()
		e.free(m)
		e.mu.Unlock()
		return nil, info, err
	}
	return d, info, nil
}

// reconnectGrace is how long a VM's new connection waits for its last
// one to be torn down: a VM that reboots may connect again before the
// server has noticed that its last connection ended.
const reconnectGrace = 2 * time.Second

// take marks VM m connected, waiting up to reconnectGrace for a
// connection it has to end.
func (e *Exports) take(ctx context.Context, m *vm) error {
	timer := time.NewTimer(reconnectGrace)
	defer timer.Stop()
	for {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return fmt.Errorf("%w: the host cache is closing", nbd.ErrExportBusy)
		}
		if !m.busy {
			m.busy, m.idle = true, make(chan struct{})
			e.mu.Unlock()
			return nil
		}
		idle := m.idle
		e.mu.Unlock()
		select {
		case <-idle:
		case <-timer.C:
			return fmt.Errorf("%w: VM %q is connected already", nbd.ErrExportBusy, m.name)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// free marks VM m disconnected; e.mu is held.
func (e *Exports) free(m *vm) {
	m.busy = false
	close(m.idle)
}

// boot opens a VM's device for a new boot.
func (e *Exports) boot(ctx context.Context, m *vm) (block.Device, nbd.ExportInfo, error) {
	v, err := e.resolve(ctx, e.images[m.image], false)
	if err != nil {
		return nil, nbd.ExportInfo{}, err
	}
	info := nbd.ExportInfo{Name: m.name, Description: "VM " + m.name + ", " + v.desc, Size: v.up.Size()}
	cd := v.device(e.cfg.Cache)
	var img block.Device = cd
	var own []io.Closer
	if e.cfg.RecordDir != "" {
		tr, err := newTracer(cd, filepath.Join(e.cfg.RecordDir, m.name+".trace"), e.cfg.RecordFor)
		if err != nil {
			e.release(v)
			return nil, info, err
		}
		img = tr
		own = append(own, tr)
	}
	var top block.Device
	switch e.cfg.Writes {
	case WritesUpstream:
		c, err := e.cfg.Dial(ctx, v.export)
		if err == nil && c.ReadOnly() {
			c.Close()
			err = errors.New("the stream serves it read-only: run usher stream with --write-cache to keep VM writes upstream")
		}
		if err != nil {
			for _, c := range own {
				c.Close()
			}
			e.release(v)
			return nil, info, fmt.Errorf("VM %s: its upstream connection for writes: %w", m.name, err)
		}
		top = newWriteThrough(img, c)
		own = append(own, c)
	default:
		o, err := e.overlay(m, img)
		if err != nil {
			for _, c := range own {
				c.Close()
			}
			e.release(v)
			return nil, info, fmt.Errorf("VM %s: overlay: %w", m.name, err)
		}
		top = o
	}
	e.mu.Lock()
	m.cur = cd
	m.boots++
	e.mu.Unlock()
	e.log.Debug("host cache: VM boots", "vm", m.name, "version", v.desc, "writes", e.cfg.Writes)
	return &vmDevice{Device: meter.Wrap(top, e.wLayer), close: func() error {
		var errs []error
		for _, c := range own {
			errs = append(errs, c.Close())
		}
		e.mu.Lock()
		e.free(m)
		st := cd.Stats()
		m.past = add(m.past, st)
		m.cur = nil
		e.unref(v)
		e.mu.Unlock()
		return errors.Join(errs...)
	}}, info, nil
}

// overlay opens a new, empty overlay for a boot of VM m over img, in a
// file of this boot alone: VM.N.overlay, N counting the host's boots,
// created exclusively. A file named by the VM alone would be the same
// for every boot, so that a boot whose teardown runs late (or twice)
// and the next boot's setup meet on it: the old boot's Close removes
// the name the new one opened, and the new one's truncating open can
// land on the file that the old boot's last writes still go to.
func (e *Exports) overlay(m *vm, img block.Device) (*writecache.Overlay, error) {
	path := filepath.Join(e.cfg.WritesDir, fmt.Sprintf("%s.%d.overlay", m.name, e.seq.Add(1)))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	f.Close()
	o, err := writecache.OpenOverlayWith(img, path, writecache.OverlayOptions{})
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	return o, nil
}

// removeOverlays removes the overlays a host stopped without closing
// them left behind (their boots are over: a VM's writes are discarded at
// its next boot), and the VM.overlay of earlier releases.
func removeOverlays(dir string, vms map[string]*vm) {
	for name := range vms {
		os.Remove(filepath.Join(dir, name+".overlay"))
		old, _ := filepath.Glob(filepath.Join(dir, globEscape(name)+".*.overlay"))
		for _, p := range old {
			os.Remove(p)
		}
	}
}

// globEscape quotes the glob metacharacters of a VM's name.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Close closes every version; connections must be closed first.
func (e *Exports) Close() error {
	e.mu.Lock()
	e.closed = true
	var ups []*hostcache.Upstream
	for _, im := range e.images {
		if im.cur != nil {
			ups = append(ups, im.cur.up)
			im.cur = nil
		}
	}
	e.mu.Unlock()
	var errs []error
	for _, u := range ups {
		errs = append(errs, u.Close())
	}
	return errors.Join(errs...)
}

// vmDevice is a VM's boot: closing it ends the boot.
type vmDevice struct {
	block.Device
	close func() error
	once  sync.Once
}

func (v *vmDevice) Unwrap() block.Device { return v.Device }

// Close ends the boot once: the device (the overlay, whose file goes)
// first, then the boot's own closers, then the VM is free for its next
// boot. A second Close does nothing: closing the device again would
// remove a file by then perhaps another boot's.
func (v *vmDevice) Close() error {
	var err error
	v.once.Do(func() {
		err = v.Device.Close()
		if cerr := v.close(); err == nil {
			err = cerr
		}
	})
	return err
}

// warmDevice is a warm connection's read-only view of an image.
type warmDevice struct {
	*hostcache.Device
	release func()
	once    sync.Once
}

func (w *warmDevice) Close() error {
	w.once.Do(w.release)
	return nil
}

func add(a, b hostcache.DeviceStats) hostcache.DeviceStats {
	return hostcache.DeviceStats{Hits: a.Hits + b.Hits, Misses: a.Misses + b.Misses, Fetches: a.Fetches + b.Fetches,
		FetchedBytes: a.FetchedBytes + b.FetchedBytes, Zero: a.Zero + b.Zero, Mismatches: a.Mismatches + b.Mismatches}
}
