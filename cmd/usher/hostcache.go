package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/hostcache"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/block/writecache"
	"github.com/usher-vdi/usher/internal/bytesize"
)

// Layer names of the host cache's meter.
const (
	layerHostUpstream = "hostcache_upstream"
	layerHostWrites   = "hostcache_writes"
)

// vmFlag is --vm NAME=IMAGE, repeated.
type vmFlag map[string]string

func (v vmFlag) String() string { return "" }

func (v vmFlag) Set(s string) error {
	name, image, ok := strings.Cut(s, "=")
	switch {
	case !ok || name == "" || image == "":
		return fmt.Errorf("%q is not NAME=IMAGE", s)
	case v[name] != "":
		return fmt.Errorf("VM %q named twice", name)
	}
	v[name] = image
	return nil
}

// hostcacheCmd runs a host's cache: every VM of the host reads its image
// through one persistent read cache on local disk, and writes to an
// overlay of its own.
func (m *Main) hostcacheCmd(ctx context.Context, args []string) error {
	fs := m.flagSet("hostcache", "--upstream nbd://HOST:PORT --dir DIR --vm NAME=IMAGE [--vm ...] [flags]\n\n"+
		"A host's read cache (IntelliCache): every VM of the host is an export of this\n"+
		"daemon, named as the VM, serving its image from --upstream through one cache of\n"+
		"blocks in --dir, kept across restarts; each VM's writes go to an overlay file of its\n"+
		"own under --dir, discarded when the VM connects again (a new boot).")
	var lf logFlags
	lf.register(fs)
	upstream := fs.String("upstream", "", "the stream: nbd://HOST[:PORT] or nbd+unix:///?socket=PATH; each image is its export (required)")
	dir := fs.String("dir", "", "the cache directory on local disk (required); a second daemon on it is refused")
	size := fs.String("size", "10GiB", "bytes of blocks the cache keeps")
	blockSize := fs.String("block-size", "64KiB", "the unit fetched from upstream and kept")
	vms := vmFlag{}
	fs.Var(vms, "vm", "NAME=IMAGE: export NAME serves IMAGE (IMAGE or IMAGE@VERSION, the upstream's export name); repeat for each VM")
	listen := fs.String("listen", "unix:/run/usher/hostcache.sock", "local NBD endpoint: unix:/path or 127.0.0.1:port")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus /metrics on this address")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	switch {
	case *upstream == "":
		return usageError{"--upstream is required"}
	case *dir == "":
		return usageError{"--dir is required"}
	case len(vms) == 0:
		return usageError{"--vm NAME=IMAGE is required, once per VM"}
	}
	u, err := url.Parse(*upstream)
	if err != nil || (u.Scheme != "nbd" && u.Scheme != "nbd+unix") || strings.Trim(u.Path, "/") != "" {
		return usageError{fmt.Sprintf("--upstream %q: want nbd://HOST[:PORT] or nbd+unix:///?socket=PATH, without an export: each --vm names its image", *upstream)}
	}
	capacity, err := bytesize.Parse(*size)
	if err != nil {
		return usageError{"--size: " + err.Error()}
	}
	bs, err := bytesize.Parse(*blockSize)
	if err != nil {
		return usageError{"--block-size: " + err.Error()}
	}
	log, err := lf.logger(m.Stderr)
	if err != nil {
		return err
	}
	cache, err := hostcache.Open(filepath.Join(*dir, "blocks"), hostcache.Options{Size: capacity, BlockSize: int(bs), Logger: log})
	if err != nil {
		return fmt.Errorf("--dir: %w", err)
	}
	defer cache.Close()
	writes := filepath.Join(*dir, "writes")
	if err := os.MkdirAll(writes, 0o700); err != nil {
		return fmt.Errorf("--dir: %w", err)
	}
	var reg meter.Registry
	hx := &hostExports{log: log, upstream: u, vms: vms, cache: cache, writes: writes,
		images: map[string]*hostImage{}, busy: map[string]bool{}, upLayer: reg.Layer(layerHostUpstream), wLayer: reg.Layer(layerHostWrites)}
	defer hx.close()
	// Each image is reached, and named for the cache, before serving:
	// a wrong image name fails now, not at a VM's boot.
	for _, image := range slices.Compact(slices.Sorted(maps.Values(vms))) {
		if _, err := hx.image(ctx, image); err != nil {
			return err
		}
	}
	st := cache.Stats()
	log.Info("host cache ready", "dir", *dir, "blocks", st.Slots, "block_size", cache.BlockSize(), "recovered", st.Recovered, "vms", len(vms))
	return m.serveNBD(ctx, log, *listen, *metricsListen, &nbd.Server{Exports: hx, Logger: log}, &reg)
}

// hostImage is an image the host cache reads from upstream.
type hostImage struct {
	client *nbd.Client
	dev    block.Device // through the cache
}

// hostExports serves each VM its image through the cache and an overlay
// of its own.
type hostExports struct {
	log      *slog.Logger
	upstream *url.URL
	vms      map[string]string
	cache    *hostcache.Cache
	writes   string
	upLayer  *meter.Counters
	wLayer   *meter.Counters

	mu     sync.Mutex
	images map[string]*hostImage
	busy   map[string]bool
}

// image returns image's device through the cache, reaching upstream
// the first time.
func (h *hostExports) image(ctx context.Context, image string) (*hostImage, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if im := h.images[image]; im != nil {
		return im, nil
	}
	u := *h.upstream
	u.Path = "/" + image
	uri := u.String()
	var d nbd.Dialer
	client, err := d.DialURI(ctx, uri)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", image, err)
	}
	// The cache's blocks are named by what the image is, not only what
	// it is called: its version and a fingerprint of its content.
	ident, err := upstreamIdentity(ctx, uri, client)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("upstream %s: %w", image, err)
	}
	base := meter.Wrap(block.ReadOnly(client), h.upLayer)
	im := &hostImage{client: client, dev: h.cache.Wrap(base, ident)}
	h.images[image] = im
	h.log.Info("image reached", "image", image, "size", client.Size(), "identity", ident)
	return im, nil
}

// Info implements nbd.Exporter.
func (h *hostExports) Info(ctx context.Context, name string) (nbd.ExportInfo, error) {
	image, ok := h.vms[name]
	if !ok {
		return nbd.ExportInfo{}, fmt.Errorf("%w %q", nbd.ErrUnknownExport, name)
	}
	im, err := h.image(ctx, image)
	if err != nil {
		return nbd.ExportInfo{}, err
	}
	return nbd.ExportInfo{Name: name, Description: "VM " + name + ", image " + image, Size: im.dev.Size()}, nil
}

// Open implements nbd.Exporter: a VM's connection is a new boot, with an
// empty overlay; one connection per VM at a time.
func (h *hostExports) Open(ctx context.Context, name, _ string) (block.Device, nbd.ExportInfo, error) {
	info, err := h.Info(ctx, name)
	if err != nil {
		return nil, info, err
	}
	im, _ := h.image(ctx, h.vms[name])
	h.mu.Lock()
	if h.busy[name] {
		h.mu.Unlock()
		return nil, info, fmt.Errorf("%w: VM %q is connected already", nbd.ErrExportBusy, name)
	}
	h.busy[name] = true
	h.mu.Unlock()
	o, err := writecache.OpenOverlayWith(im.dev, filepath.Join(h.writes, name+".overlay"), writecache.OverlayOptions{})
	if err != nil {
		h.release(name)
		return nil, info, fmt.Errorf("VM %s: overlay: %w", name, err)
	}
	return &vmDevice{Device: meter.Wrap(o, h.wLayer), release: func() { h.release(name) }}, info, nil
}

func (h *hostExports) release(name string) {
	h.mu.Lock()
	delete(h.busy, name)
	h.mu.Unlock()
}

// List implements nbd.Exporter.
func (h *hostExports) List(ctx context.Context) ([]nbd.ExportInfo, error) {
	var out []nbd.ExportInfo
	for _, name := range slices.Sorted(maps.Keys(h.vms)) {
		info, err := h.Info(ctx, name)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

func (h *hostExports) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, im := range h.images {
		im.client.Close()
	}
}

// vmDevice is a VM's overlay, which releases the VM when its connection
// ends.
type vmDevice struct {
	block.Device
	release func()
}

func (v *vmDevice) Unwrap() block.Device { return v.Device }

func (v *vmDevice) Close() error {
	err := v.Device.Close()
	v.release()
	return err
}
