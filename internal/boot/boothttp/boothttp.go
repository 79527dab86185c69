// Package boothttp is the boot server's HTTP transport: the fixed chain
// script, each target's iPXE script, and the kernel and initramfs of
// the image version its binding resolves to, read out of the version's
// filesystem (boot/ext4boot) and kept in a bounded cache; for a target
// whose write cache is on the device (ram, ram-overflow), that
// initramfs followed by the boot agent's overlay (boot/initramfs), or a
// refusal when there is no agent. It records
// every answer to a known target in the site's boot log and counts
// every request.
//
// The boot listener is unauthenticated by nature (firmware holds no
// credentials): it serves only what a known target's binding names, a
// refusal otherwise, and reads nothing of a request but its method,
// path and one query parameter.
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
}

// Handler serves the boot server's paths.
type Handler struct {
	cfg   Config
	mux   *http.ServeMux
	cache *fileCache

	mu      sync.Mutex
	version int64
	byMAC   map[string]site.Target
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
	h := &Handler{cfg: cfg, mux: http.NewServeMux(), cache: newFileCache(cfg.CacheBytes), version: -1}
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
	t, ok := h.target(mac)
	if !ok {
		h.cfg.Logger.Warn("boot refused: unknown MAC", "mac", mac, "remote", r.RemoteAddr, "step", step)
		h.cfg.Count(string(step), OutcomeUnknownMAC)
		writeScript(w, http.StatusNotFound, boot.RefusalScript(fmt.Sprintf("no target of the site has MAC %s; an admin binds one with the admin API or usher apply", mac)))
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
	h.record(r, boot.Binding{Target: t, Version: version}, step, err.Error())
	writeScript(w, http.StatusNotFound, boot.RefusalScript(err.Error()))
}

// fail answers an internal failure: details in the log only.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, t site.Target, step site.BootStep, err error) {
	h.cfg.Logger.Error("boot failed", "target", t.Name, "mac", t.MAC, "step", step, "remote", r.RemoteAddr, "err", err)
	h.cfg.Count(string(step), OutcomeError)
	writeScript(w, http.StatusInternalServerError, boot.RefusalScript("the boot server failed; its log says why"))
}

// record writes a boot record; a failure (the site DB down) is logged,
// and the boot goes on.
func (h *Handler) record(r *http.Request, b boot.Binding, step site.BootStep, refusal string) {
	if h.cfg.Store == nil {
		return
	}
	rec := site.BootRecord{Target: b.Target.Name, MAC: b.Target.MAC, Image: b.Target.Image, Version: b.Version,
		Cache: b.Target.Cache, Step: step, Remote: truncate(r.RemoteAddr, 300), Error: truncate(refusal, 1000)}
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
