package nfuse

import (
	"encoding/base64"
	"encoding/binary"
	"sync"

	"github.com/usher-vdi/usher/internal/icon"
)

// Icons (package icon draws them). NFuse clients get PNGs for
// DesiredIconData format="png" and a Windows icon file (an ICO holding the
// PNG, as Windows Vista and later read) for the Icon element and
// format="raw".

// iconSizes are the sizes usher draws, in pixels; other sizes get the
// nearest one not smaller, or the largest.
var iconSizes = [...]int{16, 32, 48, 128, 256}

// defaultIconSize is the size of the Icon element and of DesiredIconData
// without a size.
const defaultIconSize = 32

// iconSize returns the size to draw for a requested one.
func iconSize(n int) int {
	if n <= 0 {
		return defaultIconSize
	}
	for _, s := range iconSizes {
		if n <= s {
			return s
		}
	}
	return iconSizes[len(iconSizes)-1]
}

type iconKey struct {
	icon string
	size int
	ico  bool
}

// icons caches icons as base64 text, ready to write into an answer.
type icons struct {
	mu    sync.Mutex
	cache map[iconKey]string
}

// maxCachedIcons bounds the cache; icons come from the site configuration,
// so it is reached only by a site with thousands of builtin icon names.
const maxCachedIcons = 4096

// base64 returns the icon as base64: a PNG, or an ICO when ico is set.
func (c *icons) base64(icon string, size int, ico bool) string {
	k := iconKey{icon, iconSize(size), ico}
	c.mu.Lock()
	s, ok := c.cache[k]
	c.mu.Unlock()
	if ok {
		return s
	}
	s = renderIcon(icon, k.size, ico)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cache == nil || len(c.cache) >= maxCachedIcons {
		c.cache = map[iconKey]string{}
	}
	c.cache[k] = s
	return s
}

// renderIcon returns an icon as base64: a PNG, or an ICO when ico is set.
func renderIcon(name string, size int, ico bool) string {
	img := icon.PNG(name, size)
	if ico {
		img = icoOf(img, size)
	}
	return base64.StdEncoding.EncodeToString(img)
}

// icoOf wraps a PNG in a one-image ICO file.
func icoOf(pngData []byte, size int) []byte {
	dim := byte(size)
	if size >= 256 {
		dim = 0 // 0 means 256 in an ICO directory entry
	}
	b := make([]byte, 22, 22+len(pngData))
	binary.LittleEndian.PutUint16(b[2:], 1) // type: icon
	binary.LittleEndian.PutUint16(b[4:], 1) // one image
	b[6], b[7] = dim, dim
	binary.LittleEndian.PutUint16(b[10:], 1)  // colour planes
	binary.LittleEndian.PutUint16(b[12:], 32) // bits per pixel
	binary.LittleEndian.PutUint32(b[14:], uint32(len(pngData)))
	binary.LittleEndian.PutUint32(b[18:], 22)
	return append(b, pngData...)
}
