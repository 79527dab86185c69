// Package icon draws the icons of resources. A resource names a builtin
// icon ("builtin:NAME") or carries a PNG ("data:image/png;base64,...").
// Builtin icons are drawn, deterministically from their name, as a
// mirrored 5x5 pattern in a colour of the name's hash, so that every
// name has an icon of its own and no artwork ships with usher.
package icon

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"image"
	"image/color"
	"image/png"
	"strings"
)

// PNG returns the PNG of a resource's icon at size pixels: the PNG of a
// data URI as it is, or a drawn builtin icon (any other value draws the
// name as given).
func PNG(icon string, size int) []byte {
	const dataPNG = "data:image/png;base64,"
	if len(icon) >= len(dataPNG) && strings.EqualFold(icon[:len(dataPNG)], dataPNG) {
		if b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(icon[len(dataPNG):])); err == nil && bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			return b
		}
	}
	name, _ := strings.CutPrefix(icon, "builtin:")
	return Draw(name, size)
}

// Draw draws a builtin icon: a 5x5 pattern, mirrored left to right, from
// the name's hash, in a colour of the hash, on a light tile.
func Draw(name string, size int) []byte {
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
		panic("icon: encode: " + err.Error()) // cannot fail on a bytes.Buffer
	}
	return buf.Bytes()
}
