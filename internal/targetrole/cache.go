package targetrole

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/meter"
	"github.com/usher-vdi/usher/internal/block/writecache"
	"github.com/usher-vdi/usher/internal/nbdserve"
)

// Write-cache modes (CacheConfig.Mode).
const (
	ModeRAM         = "ram"          // writes in RAM; past the budget, ENOSPC
	ModeRAMOverflow = "ram-overflow" // writes in RAM, overflowing to a file or local disk
	ModeDisk        = "disk"         // writes in a cache file (an overlay), kept with Persist
)

// Layer names of the device-side stack, in its meter.Registry.
const (
	LayerUpstream   = "upstream"
	LayerCacheRAM   = "writecache_ram"
	LayerOverflow   = "overflow"
	LayerDeviceDisk = "writecache_device_disk"
)

// DefaultRAM is CacheConfig.RAM's default.
const DefaultRAM = 512 << 20

// ErrStale is the error of NewCache with Persist and Strict when the
// cache file was written over another upstream.
var ErrStale = writecache.ErrStale

// CacheConfig configures a target's write cache.
type CacheConfig struct {
	Mode string // ModeRAM, ModeRAMOverflow or ModeDisk (required)
	// RAM is the budget of the RAM modes (default DefaultRAM).
	RAM int64
	// Path is the overflow file (ModeRAMOverflow: a file, removed when
	// the cache closes, or a block device, kept and overwritten, its
	// whole size the capacity) or the cache file (ModeDisk); its
	// missing directory is made 0700. Required for both.
	Path string
	// PathSize is the overflow file's capacity (default: the upstream's
	// size).
	PathSize int64
	// Persist (ModeDisk) keeps the cache file across runs while the
	// upstream's Identity is the same, else discards it (Cache.Discarded
	// says why) or, with Strict, fails with ErrStale.
	Persist, Strict bool
	Identity        string
	Logger          *slog.Logger // nil: the layers' default
}

func (c CacheConfig) check() error {
	switch c.Mode {
	case ModeRAM:
	case ModeRAMOverflow, ModeDisk:
		if c.Path == "" {
			return fmt.Errorf("target: cache %s needs a Path", c.Mode)
		}
	default:
		return fmt.Errorf("target: cache %q is not ram, ram-overflow or disk", c.Mode)
	}
	if c.RAM < 0 || c.PathSize < 0 {
		return errors.New("target: a negative cache size")
	}
	if c.Persist && c.Mode != ModeDisk {
		return errors.New("target: Persist needs the disk cache")
	}
	return nil
}

// Cache is a target's write cache over its upstream: the Device the
// target serves.
type Cache struct {
	block.Device
	// RAM is the RAM cache of the RAM modes; Overlay the cache file of
	// ModeDisk.
	RAM     *writecache.RAM
	Overlay *writecache.Overlay
	// Disk counts the operations that reach the overflow or cache file
	// (nil in ModeRAM).
	Disk *meter.Counters
	// Discarded says why a persistent cache file was discarded ("":
	// kept, or not persistent).
	Discarded string
	remove    string // the overflow file to remove at Close
}

// NewCache builds the write cache cfg says over upstream, as usher
// target does: upstream is read only under it (the target never writes
// to the stream; its block status passes through), and each layer is
// metered in meters (LayerUpstream, then LayerCacheRAM and
// LayerOverflow, or LayerDeviceDisk). Closing the Cache closes its
// layers, not upstream. Errors of the cache file are
// nbdserve.FieldErrors of "Cache.Path" (of "Cache.Persist" with
// ErrStale).
func NewCache(upstream block.Device, cfg CacheConfig, meters *meter.Registry) (*Cache, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.RAM == 0 {
		cfg.RAM = DefaultRAM
	}
	if meters == nil {
		meters = new(meter.Registry)
	}
	base := block.Device(meter.Wrap(block.ReadOnly(block.NopCloser(upstream)), meters.Layer(LayerUpstream)))
	if cfg.Mode != ModeRAM {
		// The cache holds the device's writes: only its owner reads it.
		if err := os.MkdirAll(filepath.Dir(cfg.Path), 0o700); err != nil {
			return nil, nbdserve.Field("Cache.Path", err)
		}
	}
	c := &Cache{}
	switch cfg.Mode {
	case ModeRAM:
		c.RAM = writecache.NewRAM(base, writecache.RAMOptions{Budget: cfg.RAM, Logger: cfg.Logger})
		c.Device = meter.Wrap(c.RAM, meters.Layer(LayerCacheRAM))
	case ModeRAMOverflow:
		capacity := upstream.Size()
		if cfg.PathSize > 0 {
			capacity = cfg.PathSize
		}
		// A block device is the device's local disk: kept, whole.
		fi, err := os.Stat(cfg.Path)
		device := err == nil && fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0
		of, err := block.CreateFile(cfg.Path, capacity)
		if err != nil {
			return nil, nbdserve.Field("Cache.Path", err)
		}
		if !device {
			c.remove = cfg.Path
		}
		c.Disk = meters.Layer(LayerOverflow)
		c.RAM = writecache.NewRAM(base, writecache.RAMOptions{Budget: cfg.RAM, Logger: cfg.Logger, Overflow: meter.Wrap(of, c.Disk)})
		c.Device = meter.Wrap(c.RAM, meters.Layer(LayerCacheRAM))
	case ModeDisk:
		opts := writecache.OverlayOptions{Persist: cfg.Persist, Strict: cfg.Strict}
		if opts.Persist {
			opts.Identity = cfg.Identity
		}
		o, err := writecache.OpenOverlayWith(base, cfg.Path, opts)
		if errors.Is(err, writecache.ErrStale) {
			return nil, nbdserve.Field("Cache.Persist", err)
		}
		if err != nil {
			return nil, nbdserve.Field("Cache.Path", err)
		}
		c.Overlay, c.Disk, c.Discarded = o, &o.Disk, o.Discarded
		c.Device = meter.Wrap(o, meters.Layer(LayerDeviceDisk))
	}
	return c, nil
}

var _ block.Wrapper = (*Cache)(nil)

// Unwrap returns the top layer: a Cache only adds a close hook, so the
// layers' optional interfaces (block status, inline reads) stay
// reachable through block.As.
func (c *Cache) Unwrap() block.Device { return c.Device }

// Close closes the cache's layers and removes its overflow file.
func (c *Cache) Close() error {
	err := c.Device.Close()
	if c.remove != "" {
		os.Remove(c.remove)
	}
	return err
}
