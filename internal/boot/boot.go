package boot

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/usher-vdi/usher/internal/site"
)

// Errors a refusal wraps, for callers that branch on the cause.
var (
	// ErrUnknownMAC: no target of the site has the MAC.
	ErrUnknownMAC = errors.New("unknown MAC")
	// ErrBadMAC: what the request gave is not a MAC address.
	ErrBadMAC = errors.New("not a MAC address")
	// ErrNoImage: the target's image is not in the image store.
	ErrNoImage = errors.New("image not in the image store")
	// ErrNoVersion: the version the target boots is not there (a pinned
	// version that does not exist, or an image without a production
	// version).
	ErrNoVersion = errors.New("version not in the image store")
	// ErrStale: a kernel or initramfs request names a version the
	// target's binding does not boot (any more).
	ErrStale = errors.New("version not bound to the target")
	// ErrNoAgent: the target's write cache is on the device (ram,
	// ram-overflow) and the boot server has no agent (a statically
	// linked usher) to run it there.
	ErrNoAgent = errors.New("no device-side write cache agent")
)

// Refusal is a boot the boot server refuses: Reason is one sentence that
// the target's console shows (its iPXE script echoes it) and the log
// records; Err is one of the sentinel errors above.
type Refusal struct {
	Err    error
	Reason string
}

func (r *Refusal) Error() string { return r.Reason }
func (r *Refusal) Unwrap() error { return r.Err }

func refuse(err error, format string, args ...any) *Refusal {
	return &Refusal{Err: err, Reason: fmt.Sprintf(format, args...)}
}

// ParseMAC reads a MAC address from the wire (a query parameter, a path
// segment): a 48-bit address in any form net.ParseMAC reads, returned in
// the site's lower-case colon form. It fails with a Refusal wrapping
// ErrBadMAC, which does not repeat the input.
func ParseMAC(s string) (string, error) {
	if len(s) > 64 {
		return "", refuse(ErrBadMAC, "the request's MAC address is not a MAC address")
	}
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		return "", refuse(ErrBadMAC, "the request's MAC address is not a MAC address")
	}
	return hw.String(), nil
}

// PathMAC is how a MAC appears in the boot server's paths: hyphenated
// (52-54-00-12-34-56), so that no colon makes a relative URI look like
// one with a scheme.
func PathMAC(mac string) string { return strings.ReplaceAll(mac, ":", "-") }

// Version is what a binding needs to know of one version of an image.
type Version struct {
	Number int
	// Maintenance versions boot in private mode: the target's writes
	// change the version itself.
	Maintenance bool
}

// Image is what a binding needs to know of an image of the store: its
// versions and which is in production (-1 for none).
type Image struct {
	Name       string
	Production int
	Versions   []Version
}

func (im Image) version(n int) (Version, bool) {
	for _, v := range im.Versions {
		if v.Number == n {
			return v, true
		}
	}
	return Version{}, false
}

// Binding is a target's binding resolved at one moment: the version it
// boots and how.
type Binding struct {
	Target site.Target
	// Version is the version booted: the pinned one, or the production
	// version at the moment of Resolve.
	Version int
	// Private is set for a maintenance version: the target's writes go
	// to the version (one writer at a time), not to a write cache.
	Private bool
}

// Export is the NBD export the target's root disk is: IMAGE@N, the
// version resolved, even for a target that follows production, so that
// the kernel served and the root disk it mounts are the same version
// whatever is promoted in between.
func (b Binding) Export() string { return b.Target.Image + "@" + strconv.Itoa(b.Version) }

// Resolve resolves t's binding against the image store: im is the
// target's image, found false when the store has none of that name. It
// returns a Refusal naming the image or version that is missing.
func Resolve(t site.Target, im Image, found bool) (Binding, error) {
	if !found {
		return Binding{}, refuse(ErrNoImage, "target %s: image %q is not in the image store", t.Name, t.Image)
	}
	n := im.Production
	if t.Version != nil {
		n = *t.Version
	} else if n < 0 {
		return Binding{}, refuse(ErrNoVersion, "target %s: image %q has no production version", t.Name, t.Image)
	}
	v, ok := im.version(n)
	if !ok {
		return Binding{}, refuse(ErrNoVersion, "target %s: image %q has no version %d", t.Name, t.Image, n)
	}
	return Binding{Target: t, Version: n, Private: v.Maintenance}, nil
}

// DeviceCache reports whether the binding keeps the target's writes on
// the device (its RAM, and a local disk past it): a ram or ram-overflow
// target in standard mode. Its initramfs then runs usher target (the
// agent, boot/initramfs) in front of the stream, and its root disk is
// attached through it. A private-mode boot writes to the version, never
// to a write cache.
func (b Binding) DeviceCache() bool {
	return !b.Private && (b.Target.Cache == site.CacheRAM || b.Target.Cache == site.CacheRAMOverflow)
}

// CheckAgent checks that the boot server can boot the binding: a
// device-side cache needs an agent, and noAgent says why there is none
// ("" when there is one). It returns a Refusal wrapping ErrNoAgent.
func CheckAgent(b Binding, noAgent string) error {
	if b.DeviceCache() && noAgent != "" {
		return refuse(ErrNoAgent, "target %s: cache %s keeps its writes on the device, which needs the boot agent of usher serve (--boot-agent, a statically linked usher): %s",
			b.Target.Name, b.Target.Cache, noAgent)
	}
	return nil
}

// CheckVersion checks that a request for version n's kernel or
// initramfs is one the binding b (resolved now) boots: the boot server
// serves nothing else. A target that follows production and asks for
// the version that was production when it fetched its script is
// refused once another has been promoted: it boots again.
func CheckVersion(b Binding, n int) error {
	if n != b.Version {
		return refuse(ErrStale, "target %s boots version %d of image %q now, not version %d: boot again", b.Target.Name, b.Version, b.Target.Image, n)
	}
	return nil
}

// Step is a file of a boot, as the boot server's paths name it.
type Step = site.BootStep
