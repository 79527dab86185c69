package nfuse

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"image"
	"image/color"
	"image/png"
	"strings"
	"sync"
)

// Icons. usher's resources name a builtin icon ("builtin:NAME") or carry
// a PNG ("data:image/png;base64,..."). NFuse clients get PNGs for
// DesiredIconData format="png" and a Windows icon file (an ICO holding the
// PNG, as Windows Vista and later read) for the Icon element and
// format="raw". Builtin icons are drawn, deterministically from their
// name, as a mirrored 5x5 pattern in a colour of the name's hash.

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
func renderIcon(icon string, size int, ico bool) string {
	img := iconPNG(icon, size)
	if ico {
		img = icoOf(img, size)
	}
	return base64.StdEncoding.EncodeToString(img)
}

// iconPNG returns the PNG of a resource's icon: the PNG of a data URI as
// it is, or a drawn builtin icon (any other value draws the name as given).
func iconPNG(icon string, size int) []byte {
	const dataPNG = "data:image/png;base64,"
	if rest, ok := cutPrefixFold(icon, dataPNG); ok {
		if b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest)); err == nil && bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			return b
		}
	}
	name, _ := strings.CutPrefix(icon, "builtin:")
	return drawIcon(name, size)
}

// drawIcon draws a builtin icon: a 5x5 pattern, mirrored left to right,
// from the name's hash, in a colour of the hash, on a light tile.
func drawIcon(name string, size int) []byte {
	h := sha256.Sum256([]byte("usher icon\x00" + name))
	fg := color.NRGBA{R: 40 + h[0]%160, G: 40 + h[1]%160, B: 40 + h[2]%160, A: 0xFF}
	bg := color.NRGBA{R: 0xF4, G: 0xF4, B: 0xF4, A: 0xFF}
	img := image.NewNRGBA(image.Rect(0, 0, size, size))
	margin := size / 8
	cell := (size - 2*margin) / 5
	off := (size - 5*cell) / 2
	for y := range size {
		for x := range size {
			c := bg
			cx, cy := (x-off)/cell, (y-off)/cell
			if x >= off && y >= off && cx < 5 && cy < 5 {
				col := min(cx, 4-cx) // mirrored: columns 0..2
				if h[3+cy*3+col]&1 == 1 {
					c = fg
				}
			}
			img.SetNRGBA(x, y, c)
		}
	}
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(&buf, img); err != nil {
		panic("nfuse: encode icon: " + err.Error()) // cannot fail on a bytes.Buffer
	}
	return buf.Bytes()
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
