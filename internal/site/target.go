package site

import (
	"net"
	"strconv"
	"strings"

	"github.com/usher-vdi/usher/internal/bytesize"
)

// KindTarget is the kind of a boot target.
const KindTarget Kind = "target"

// CacheMode is where a target's writes go while it runs from its image,
// as PVS's write cache types.
type CacheMode string

const (
	// CacheServerDisk: the target's writes go to a write cache on the
	// stream's disk (usher stream --write-cache), discarded at its next
	// boot.
	CacheServerDisk CacheMode = "server-disk"
	// CacheRAM: the target keeps its writes in its own RAM, within its
	// RAM budget (usher target --cache ram).
	CacheRAM CacheMode = "ram"
	// CacheRAMOverflow: the target keeps its writes in RAM and, past its
	// budget, in a file on its local disk (usher target --cache
	// ram-overflow). The default.
	CacheRAMOverflow CacheMode = "ram-overflow"
)

// DefaultCacheMode is the cache mode of a target that names none.
const DefaultCacheMode = CacheRAMOverflow

// DefaultTargetRAM is the RAM budget of a target in a RAM mode that
// names none, as usher target's --ram default.
const DefaultTargetRAM = "512MiB"

// Target is a machine that boots over the network from an image of the
// image store, known to the site by its network card's MAC address (a
// PVS target device). Its binding says what it boots: an image, a
// version of it, and where its writes go.
type Target struct {
	Name string `json:"name" yaml:"name"`
	// MAC is the address of the network card it boots from, in the
	// lower-case colon form Normalize gives it (52:54:00:12:34:56). It
	// is unique in the site.
	MAC string `json:"mac" yaml:"mac"`
	// Image is the name of an image in the image store. A site accepts
	// a name that the store lacks (the store is not the site DB's, and
	// may be filled later): the boot server refuses such a boot, naming
	// the image.
	Image string `json:"image" yaml:"image"`
	// Version pins one version of the image; nil boots the image's
	// production version at each boot. A pinned maintenance version is
	// booted in private mode: the target's writes change the version
	// (for updates), one writer at a time.
	Version *int `json:"version,omitempty" yaml:"version,omitempty"`
	// Cache is the write-cache mode (DefaultCacheMode when empty).
	Cache CacheMode `json:"cache,omitempty" yaml:"cache"`
	// RAM is the RAM budget of the ram and ram-overflow modes, a size
	// such as "256MiB" (DefaultTargetRAM when empty).
	RAM         string `json:"ram,omitempty" yaml:"ram,omitempty"`
	Description string `json:"description,omitempty" yaml:"description,omitempty"`
}

// NormalizeMAC returns a 48-bit MAC address in lower-case colon form
// (52:54:00:12:34:56), from any form net.ParseMAC reads (colons,
// hyphens, or dotted groups of four hex digits). It fails with an
// EInvalid error at field "mac" for anything else, EUI-64 and
// InfiniBand addresses included: network boot firmware names 48-bit
// addresses.
func NormalizeMAC(s string) (string, error) {
	hw, err := net.ParseMAC(strings.TrimSpace(s))
	if err != nil || len(hw) != 6 {
		return "", Errorf(EInvalid, "mac %q is not a 48-bit MAC address such as 52:54:00:12:34:56", truncate(s, 40)).At("mac")
	}
	return hw.String(), nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// normalize puts the target in canonical form: its MAC in lower-case
// colon form (a MAC that does not parse is left for Validate to refuse)
// and its cache mode filled in.
func (t *Target) normalize() {
	if m, err := NormalizeMAC(t.MAC); err == nil {
		t.MAC = m
	}
	if t.Cache == "" {
		t.Cache = DefaultCacheMode
	}
}

// VersionString renders the binding's version: "production" or "N".
func (t Target) VersionString() string {
	if t.Version == nil {
		return "production"
	}
	return strconv.Itoa(*t.Version)
}

// RAMBytes is the target's RAM budget in bytes.
func (t Target) RAMBytes() int64 {
	s := t.RAM
	if s == "" {
		s = DefaultTargetRAM
	}
	n, err := bytesize.Parse(s)
	if err != nil {
		return 0 // Validate refuses it
	}
	return n
}

// MaxImageNameLen bounds a target's image name, as the image store does.
const MaxImageNameLen = 128

// Validate checks the target's own fields. Its MAC must be in the form
// Normalize gives (the site's collections store it so).
func (t Target) Validate() error {
	if err := ValidateName(KindTarget, t.Name); err != nil {
		return err
	}
	m, err := NormalizeMAC(t.MAC)
	if err != nil {
		return invalid(KindTarget, t.Name, "%s", ErrorMessage(err)).At("mac")
	}
	if m != t.MAC {
		return invalid(KindTarget, t.Name, "mac %q is not in the form %q", t.MAC, m).At("mac")
	}
	if err := ValidateImageName(t.Image); err != nil {
		return invalid(KindTarget, t.Name, "%s", ErrorMessage(err)).At("image")
	}
	if t.Version != nil && (*t.Version < 0 || *t.Version > 1_000_000) {
		return invalid(KindTarget, t.Name, "version %d is outside 0..1000000", *t.Version).At("version")
	}
	switch t.Cache {
	case CacheServerDisk, CacheRAM, CacheRAMOverflow:
	default:
		return invalid(KindTarget, t.Name, "cache %q is not one of %s, %s, %s", t.Cache, CacheServerDisk, CacheRAM, CacheRAMOverflow).At("cache")
	}
	if t.RAM != "" {
		n, err := bytesize.Parse(t.RAM)
		if err != nil {
			return invalid(KindTarget, t.Name, "ram: %v", err).At("ram")
		}
		if n < 1<<20 {
			return invalid(KindTarget, t.Name, "ram %q is below 1MiB", t.RAM).At("ram")
		}
		if t.Cache == CacheServerDisk {
			return invalid(KindTarget, t.Name, "ram is set but cache %s keeps no writes in the target's RAM", CacheServerDisk).At("ram")
		}
	}
	return validateTexts(KindTarget, t.Name, "description", t.Description)
}

// ValidateImageName checks the name of an image of the image store: 1 to
// MaxImageNameLen ASCII letters, digits and ". _ -", starting with a
// letter or a digit (the image store's own rule).
func ValidateImageName(name string) error {
	if name == "" {
		return Errorf(EInvalid, "image is empty").At("image")
	}
	if len(name) > MaxImageNameLen {
		return Errorf(EInvalid, "image %.40q... is longer than %d characters", name, MaxImageNameLen).At("image")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return Errorf(EInvalid, "image %q: an image name holds ASCII letters, digits and . _ - and starts with a letter or a digit", name).At("image")
		}
	}
	return nil
}

func targetName(t *Target) string { return t.Name }

func equalTarget(a, b *Target) bool {
	return a.Name == b.Name && a.MAC == b.MAC && a.Image == b.Image && equalVersion(a.Version, b.Version) &&
		a.Cache == b.Cache && a.RAM == b.RAM && a.Description == b.Description
}

func equalVersion(a, b *int) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
