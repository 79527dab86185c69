// Package boothttp is the boot server's HTTP transport: the fixed chain
// script, each target's iPXE script, and the kernel and initramfs of
// the image version its binding resolves to, read out of the version's
// filesystem (boot/ext4boot) and kept in a bounded cache; for a target
// whose write cache is on the device (ram, ram-overflow), that
// initramfs followed by the boot agent's overlay (boot/initramfs), or a
// refusal when there is no agent. It records the answers to known
// targets in the site's boot log and counts every request.
//
// The boot listener is unauthenticated by nature (firmware holds no
// credentials): it serves only what a known target's binding names, a
// refusal otherwise, and reads nothing of a request but its method,
// path and one query parameter.
//
// What a firmware needs, and what a stranger learns. A target's
// firmware has nothing but its MAC: whoever sends a known MAC gets that
// target's script, kernel and initramfs, and with them the export it
// boots, exactly as the target would. That cannot be hidden from
// someone who knows the MAC (the boot network is the boundary, which is
// why the boot listener is on loopback unless allowed). What the boot
// server hides is everything else a prober could learn from a MAC it
// is not served:
//
//   - An unknown MAC, and a known target whose step is refused (its
//     image or version missing, a version no longer bound, no boot
//     agent) or fails, get one and the same answer: 404 and a refusal
//     script that names nothing (not the MAC, the target, its image nor
//     why). Why goes to the server's log and, for a known target, to
//     its boot log, which admins read; the target's console only says
//     to look there. This is the trade-off: an operator at a refused
//     target's console no longer reads the reason there.
//   - A source that has asked for more MACs it is not served than a
//     booting machine would (MissBurst, then one per MissEvery) gets
//     that same answer for every MAC, known ones included, until its
//     budget refills: enumerating MACs, or probing for the one that
//     boots, costs MissEvery per guess. Machines behind one address
//     (NAT) share that budget.
//
// The boot log keeps real boots' records however much a source asks:
// identical requests of one source (same target, step, version and
// outcome) within RecordWindow are one record (the repeats are counted
// in the log line of the next window), except that a boot that went
// through whole (script, kernel, initrd) ends the window, so that a
// reboot is recorded again; and a source writes at most
// RecordBurst records at once, then one per RecordEvery; another
// source's boot is recorded as usual. Both are kept for a bounded
// number of sources (Sources, least recently seen forgotten first), so
// memory is bounded whatever the number of sources.
//
// boothttp imports boot, boot/ext4boot, boot/initramfs, block,
// block/image and site;
// internal/server assembles it.
package boothttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/image"
	"github.com/usher-vdi/usher/internal/boot"
	"github.com/usher-vdi/usher/internal/boot/ext4boot"
	"github.com/usher-vdi/usher/internal/boot/initramfs"
	"github.com/usher-vdi/usher/internal/site"
)

// Steps and outcomes of the requests counted (Config.Count).
const (
	StepChain  = "chain"
	StepScript = "script"
	StepKernel = "kernel"
	StepInitrd = "initrd"
	StepOther  = "other"

	OutcomeServed     = "served"
	OutcomeBadRequest = "bad_request"
	OutcomeUnknownMAC = "unknown_mac"
	OutcomeRefused    = "refused" // a known target whose image or version is missing, or stale
	OutcomeError      = "error"
	OutcomeThrottled  = "throttled" // a source over its budget of MACs it is not served
)

// DefaultCacheBytes bounds the kernels and initramfs kept in memory.
const DefaultCacheBytes = 512 << 20

// Images is what the boot server needs of the image store.
type Images interface {
	// Image describes an image; found is false when the store has none
	// of that name.
	Image(ctx context.Context, name string) (im boot.Image, found bool, err error)
	// Open opens version n of an image read-only.
	Open(ctx context.Context, name string, n int) (block.Device, error)
}

// Config configures a Handler.
type Config struct {
	// Targets returns the site's targets and the configuration version
	// they are of (a broker's snapshot): the Handler indexes them by MAC
	// once per version.
	Targets func() (version int64, targets []site.Target)
	Images  Images
	// Store holds the boot log; nil records nothing.
	Store site.Store
	// Script shapes the scripts; its NoAgent says why Overlay is nil.
	Script boot.ScriptOptions
	// Overlay, when set, returns the initramfs overlay that runs a
	// device-side write cache (boot/initramfs), appended to the
	// initramfs of ram and ram-overflow targets; it is called at each
	// such boot, and keeps what it built. Nil: those targets are refused
	// (Script.NoAgent says why).
	Overlay func() ([]byte, error)
	Logger  *slog.Logger
	// Count, when set, counts each request by step and outcome.
	Count func(step, outcome string)
	// CacheBytes bounds the file cache (DefaultCacheBytes when 0).
	CacheBytes int64
	// RecordWindow is how long identical requests of one source are one
	// boot record (DefaultRecordWindow when 0).
	RecordWindow time.Duration
	// RecordBurst and RecordEvery bound the boot records of one source:
	// RecordBurst at once, then one per RecordEvery (defaults when 0).
	RecordBurst int
	RecordEvery time.Duration
	// MissBurst and MissEvery bound the lookups of one source for MACs
	// it is not served (unknown, or refused): past them every MAC gets
	// the same refusal (defaults when 0).
	MissBurst int
	MissEvery time.Duration
	// Sources bounds the sources these limits remember
	// (DefaultSources when 0).
	Sources int
	// Now is the clock of the limits (time.Now when nil).
	Now func() time.Time
}

// Handler serves the boot server's paths.
type Handler struct {
	cfg   Config
	mux   *http.ServeMux
	cache *fileCache

	coalesce *coalescer
	records  *limiter // boot records per source
	misses   *limiter // lookups of MACs not served, per source

	mu      sync.Mutex
	version int64
	byMAC   map[string]site.Target
}

func orDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Targets == nil || cfg.Images == nil {
		return nil, errors.New("boothttp: Targets and Images are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Overlay == nil && cfg.Script.NoAgent == "" {
		cfg.Script.NoAgent = "this boot server has none"
	}
	if cfg.Count == nil {
		cfg.Count = func(string, string) {}
	}
	if cfg.CacheBytes == 0 {
		cfg.CacheBytes = DefaultCacheBytes
	}
	orDefault(&cfg.RecordWindow, DefaultRecordWindow)
	orDefault(&cfg.RecordBurst, DefaultRecordBurst)
	orDefault(&cfg.RecordEvery, DefaultRecordEvery)
	orDefault(&cfg.MissBurst, DefaultMissBurst)
	orDefault(&cfg.MissEvery, DefaultMissEvery)
	orDefault(&cfg.Sources, DefaultSources)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux(), cache: newFileCache(cfg.CacheBytes), version: -1,
		coalesce: newCoalescer(cfg.RecordWindow, cfg.Sources),
		records:  newLimiter(cfg.RecordBurst, cfg.RecordEvery, cfg.Sources),
		misses:   newLimiter(cfg.MissBurst, cfg.MissEvery, cfg.Sources)}
	h.mux.HandleFunc("GET "+boot.ChainPath, h.chain)
	h.mux.HandleFunc("GET "+boot.ScriptPath, h.script)
	h.mux.HandleFunc("GET "+boot.FilesPrefix, h.file)
	return h, nil
}

// ServeHTTP serves GET and HEAD of the boot paths; anything else is a
// 404 or a 405.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.cfg.Count(StepOther, OutcomeBadRequest)
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if _, pattern := h.mux.Handler(r); pattern == "" {
		h.cfg.Count(StepOther, OutcomeBadRequest)
		http.NotFound(w, r)
		return
	}
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) chain(w http.ResponseWriter, r *http.Request) {
	h.cfg.Count(StepChain, OutcomeServed)
	writeScript(w, http.StatusOK, boot.ChainScript())
}

// target returns the site's target of a MAC.
func (h *Handler) target(mac string) (site.Target, bool) {
	v, targets := h.cfg.Targets()
	h.mu.Lock()
	defer h.mu.Unlock()
	if v != h.version || h.byMAC == nil {
		h.byMAC = make(map[string]site.Target, len(targets))
		for _, t := range targets {
			h.byMAC[t.MAC] = t
		}
		h.version = v
	}
	t, ok := h.byMAC[mac]
	return t, ok
}

// resolve resolves the binding of the target of mac, step being what
// the request asks for. On a refusal it answers, logs and counts it,
// and returns false.
func (h *Handler) resolve(w http.ResponseWriter, r *http.Request, mac string, step site.BootStep) (boot.Binding, bool) {
	if h.misses.empty(source(r), h.cfg.Now()) {
		h.cfg.Logger.Debug("boot refused: the source asked for too many MACs it is not served", "mac", mac, "remote", r.RemoteAddr, "step", step)
		h.cfg.Count(string(step), OutcomeThrottled)
		notServed(w)
		return boot.Binding{}, false
	}
	t, ok := h.target(mac)
	if !ok {
		h.misses.allow(source(r), h.cfg.Now())
		h.cfg.Logger.Warn("boot refused: unknown MAC; an admin binds a target to it with the admin API or usher apply",
			"mac", mac, "remote", r.RemoteAddr, "step", step)
		h.cfg.Count(string(step), OutcomeUnknownMAC)
		notServed(w)
		return boot.Binding{}, false
	}
	im, found, err := h.cfg.Images.Image(r.Context(), t.Image)
	if err != nil {
		h.fail(w, r, t, step, err)
		return boot.Binding{}, false
	}
	b, err := boot.Resolve(t, im, found)
	if err != nil {
		h.refuse(w, r, t, step, -1, err)
		return boot.Binding{}, false
	}
	return b, true
}

func (h *Handler) script(w http.ResponseWriter, r *http.Request) {
	mac, err := boot.ParseMAC(r.URL.Query().Get("mac"))
	if err != nil {
		h.badRequest(w, r, StepScript, err)
		return
	}
	b, ok := h.resolve(w, r, mac, site.BootScript)
	if !ok {
		return
	}
	if err := boot.CheckAgent(b, h.cfg.Script.NoAgent); err != nil {
		h.refuse(w, r, b.Target, site.BootScript, b.Version, err)
		return
	}
	h.record(r, b, site.BootScript, "")
	h.cfg.Logger.Info("boot script", "target", b.Target.Name, "mac", mac, "image", b.Target.Image, "version", b.Version,
		"private", b.Private, "cache", b.Target.Cache, "remote", r.RemoteAddr)
	h.cfg.Count(StepScript, OutcomeServed)
	writeScript(w, http.StatusOK, boot.Script(b, h.cfg.Script))
}

func (h *Handler) file(w http.ResponseWriter, r *http.Request) {
	req, err := boot.ParseFilePath(r.URL.Path)
	if err != nil {
		h.badRequest(w, r, StepOther, err)
		return
	}
	b, ok := h.resolve(w, r, req.MAC, req.Step)
	if !ok {
		return
	}
	if err := boot.CheckVersion(b, req.Version); err != nil {
		h.refuse(w, r, b.Target, req.Step, req.Version, err)
		return
	}
	if err := boot.CheckAgent(b, h.cfg.Script.NoAgent); err != nil {
		h.refuse(w, r, b.Target, req.Step, b.Version, err)
		return
	}
	files, err := h.files(r.Context(), b)
	if err != nil {
		if errors.Is(err, ext4boot.ErrNotFound) {
			h.refuse(w, r, b.Target, req.Step, b.Version, &boot.Refusal{Err: err,
				Reason: fmt.Sprintf("target %s: version %d of image %q: %v", b.Target.Name, b.Version, b.Target.Image, err)})
			return
		}
		h.fail(w, r, b.Target, req.Step, err)
		return
	}
	parts, name := [][]byte{files.kernel}, files.names.Kernel
	if req.Step == site.BootInitrd {
		parts, name = [][]byte{files.initrd}, files.names.Initrd
		if b.DeviceCache() {
			overlay, err := h.cfg.Overlay()
			if err != nil {
				h.fail(w, r, b.Target, req.Step, fmt.Errorf("the device cache's initramfs overlay: %w", err))
				return
			}
			// The kernel unpacks one archive after another; an
			// uncompressed one starts at a multiple of 4 bytes.
			parts = append(parts, make([]byte, initramfs.Pad(len(files.initrd))), overlay)
			name += " + usher's overlay"
		}
	}
	data := newParts(parts...)
	if r.Header.Get("Range") == "" || r.Header.Get("Range") == "bytes=0-" {
		h.record(r, b, req.Step, "")
	}
	h.cfg.Count(string(req.Step), OutcomeServed)
	h.cfg.Logger.Debug("boot file", "target", b.Target.Name, "step", req.Step, "file", name, "bytes", data.Size(), "remote", r.RemoteAddr)
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, string(req.Step), time.Time{}, data)
}

// files returns the kernel and initramfs of the binding's version, from
// the cache or the version's filesystem. A maintenance version's are
// read again at each boot: its writer may change them.
func (h *Handler) files(ctx context.Context, b boot.Binding) (*bootFiles, error) {
	load := func() (*bootFiles, error) { return h.load(ctx, b.Target.Image, b.Version) }
	if b.Private {
		return load()
	}
	return h.cache.get(b.Export(), load)
}

func (h *Handler) load(ctx context.Context, name string, n int) (*bootFiles, error) {
	start := time.Now()
	dev, err := h.cfg.Images.Open(ctx, name, n)
	if err != nil {
		return nil, fmt.Errorf("open version %d of image %q: %w", n, name, err)
	}
	defer dev.Close()
	fs, err := ext4boot.Open(ctx, dev)
	if err != nil {
		return nil, err
	}
	defer fs.Close()
	names, err := fs.Find()
	if err != nil {
		return nil, err
	}
	f := &bootFiles{names: names}
	if f.kernel, err = fs.ReadFile(names.Kernel); err != nil {
		return nil, fmt.Errorf("read %s: %w", names.Kernel, err)
	}
	if f.initrd, err = fs.ReadFile(names.Initrd); err != nil {
		return nil, fmt.Errorf("read %s: %w", names.Initrd, err)
	}
	h.cfg.Logger.Info("boot files read", "image", name, "version", n, "kernel", names.Kernel, "initrd", names.Initrd,
		"partition", names.Partition, "bytes", len(f.kernel)+len(f.initrd), "took", time.Since(start).Round(time.Millisecond))
	return f, nil
}

func (h *Handler) badRequest(w http.ResponseWriter, r *http.Request, step string, err error) {
	h.cfg.Logger.Warn("boot refused: bad request", "path", truncate(r.URL.Path, 100), "remote", r.RemoteAddr, "reason", err)
	h.cfg.Count(step, OutcomeBadRequest)
	writeScript(w, http.StatusBadRequest, boot.RefusalScript(err.Error()))
}

// refuse answers a known target's refused step (version -1: none
// resolved, and the record names the pinned version, or 0), logs and
// records it.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, t site.Target, step site.BootStep, version int, err error) {
	h.cfg.Logger.Warn("boot refused", "target", t.Name, "mac", t.MAC, "step", step, "remote", r.RemoteAddr, "reason", err)
	h.cfg.Count(string(step), OutcomeRefused)
	if version < 0 {
		version = 0
		if t.Version != nil {
			version = *t.Version
		}
	}
	h.misses.allow(source(r), h.cfg.Now())
	h.record(r, boot.Binding{Target: t, Version: version}, step, err.Error())
	notServed(w)
}

// fail answers an internal failure: details in the log only.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, t site.Target, step site.BootStep, err error) {
	h.cfg.Logger.Error("boot failed", "target", t.Name, "mac", t.MAC, "step", step, "remote", r.RemoteAddr, "err", err)
	h.cfg.Count(string(step), OutcomeError)
	notServed(w)
}

// NotServed is what the boot server answers for every MAC it does not
// serve a step of, known or not (see the package doc): it names nothing.
const NotServed = "this machine does not boot from this boot server now; the boot server log says why"

// notServed answers a step not served, alike for every MAC.
func notServed(w http.ResponseWriter) {
	writeScript(w, http.StatusNotFound, boot.RefusalScript(NotServed))
}

// record writes a boot record; a failure (the site DB down) is logged,
// and the boot goes on.
func (h *Handler) record(r *http.Request, b boot.Binding, step site.BootStep, refusal string) {
	if h.cfg.Store == nil {
		return
	}
	rec := site.BootRecord{Target: b.Target.Name, MAC: b.Target.MAC, Image: b.Target.Image, Version: b.Version,
		Cache: b.Target.Cache, Step: step, Remote: truncate(r.RemoteAddr, 300), Error: truncate(refusal, 1000)}
	src, now := source(r), h.cfg.Now()
	key := recordKey{source: src, target: rec.Target, image: rec.Image, err: rec.Error, step: step, version: rec.Version}
	repeat, before := h.coalesce.repeat(key, now)
	if step == site.BootInitrd && rec.Error == "" {
		h.coalesce.ended(key, now)
	}
	if repeat {
		return
	}
	if before > 0 {
		h.cfg.Logger.Info("boot records coalesced: identical requests of one source within the window", "target", rec.Target,
			"step", step, "remote", src, "repeats", before, "window", h.cfg.RecordWindow)
	}
	if !h.records.allow(src, now) {
		h.cfg.Logger.Debug("boot not recorded: the source is over its budget of boot records", "target", rec.Target, "step", step, "remote", src)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	if err := h.cfg.Store.Update(ctx, func(tx site.Tx) error { return tx.Boots().Record(ctx, rec) }); err != nil {
		h.cfg.Logger.Warn("boot not recorded", "target", b.Target.Name, "step", step, "err", err)
	}
}

func writeScript(w http.ResponseWriter, status int, script string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	w.Write([]byte(script))
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// imageStore is Images over the image store.
type imageStore struct{ s *image.Store }

// ImageStore returns the Images of an image store.
func ImageStore(s *image.Store) Images { return imageStore{s} }

func (i imageStore) Image(ctx context.Context, name string) (boot.Image, bool, error) {
	im, err := i.s.Get(ctx, name)
	if errors.Is(err, image.ErrNotFound) {
		return boot.Image{}, false, nil
	}
	if err != nil {
		return boot.Image{}, false, err
	}
	out := boot.Image{Name: im.Name, Production: im.Production()}
	for _, v := range im.Versions {
		out.Versions = append(out.Versions, boot.Version{Number: v.Number, Maintenance: v.State == image.Maintenance})
	}
	return out, true, nil
}

func (i imageStore) Open(ctx context.Context, name string, n int) (block.Device, error) {
	return i.s.OpenVersion(ctx, name, n, false)
}
