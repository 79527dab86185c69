package icon

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/draw"
	_ "image/gif"  // uploads may be GIF
	_ "image/jpeg" // or JPEG
	"image/png"
	"strings"

	xdraw "golang.org/x/image/draw"
)

// Limits on the icons that resources carry as data URIs.
const (
	// MaxSide is the largest width or height of a stored icon, in pixels.
	MaxSide = 256
	// MaxBytes is the largest stored icon, as PNG bytes.
	MaxBytes = 128 << 10
	// ImportSide is the side an uploaded image larger than it is scaled
	// down to (keeping its aspect).
	ImportSide = 128
	// MaxUploadBytes is the largest image file Import takes.
	MaxUploadBytes = 1 << 20
	// maxUploadSide bounds an upload's width and height, read from its
	// header before it is decoded, so that a small file cannot make the
	// server allocate a huge bitmap.
	maxUploadSide = 4096
)

// DataURIPrefix begins every icon given as a data URI.
const DataURIPrefix = "data:image/png;base64,"

// Errors of Import.
var (
	// ErrNotImage is a file that is not a PNG, JPEG or GIF image, or
	// one too damaged to decode.
	ErrNotImage = errors.New("not a PNG, JPEG or GIF image")
	// ErrTooLarge is a file over MaxUploadBytes, or an image over its
	// limits in pixels.
	ErrTooLarge = errors.New("too large")
)

// Import turns an uploaded image file (PNG, JPEG or GIF) into a
// resource's icon: a data URI of a PNG, scaled down to ImportSide pixels
// a side when larger. A PNG within the limits is kept byte for byte.
// Errors wrap ErrNotImage or ErrTooLarge, with what was wrong.
func Import(file []byte) (string, error) {
	if len(file) > MaxUploadBytes {
		return "", fmt.Errorf("%w: the file is %d KiB, the limit is %d KiB", ErrTooLarge, (len(file)+1023)>>10, MaxUploadBytes>>10)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(file))
	if err != nil {
		return "", ErrNotImage
	}
	if cfg.Width < 1 || cfg.Height < 1 {
		return "", fmt.Errorf("%w: it is empty (%d×%d pixels)", ErrNotImage, cfg.Width, cfg.Height)
	}
	if cfg.Width > maxUploadSide || cfg.Height > maxUploadSide {
		return "", fmt.Errorf("%w: %d×%d pixels, the limit is %d a side", ErrTooLarge, cfg.Width, cfg.Height, maxUploadSide)
	}
	if format == "png" && cfg.Width <= ImportSide && cfg.Height <= ImportSide && len(file) <= MaxBytes {
		// Decoded whole, so that a PNG whose header is fine but whose
		// data is not is refused now rather than shown broken later.
		if _, err := png.Decode(bytes.NewReader(file)); err != nil {
			return "", ErrNotImage
		}
		return DataURIPrefix + base64.StdEncoding.EncodeToString(file), nil
	}
	img, _, err := image.Decode(bytes.NewReader(file))
	if err != nil {
		return "", ErrNotImage
	}
	if b := img.Bounds(); b.Dx() > ImportSide || b.Dy() > ImportSide {
		img = scale(img, ImportSide)
	}
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(&buf, img); err != nil {
		return "", fmt.Errorf("encode icon: %w", err)
	}
	if buf.Len() > MaxBytes {
		return "", fmt.Errorf("%w: %d KiB as PNG, the limit is %d KiB", ErrTooLarge, (buf.Len()+1023)>>10, MaxBytes>>10)
	}
	return DataURIPrefix + base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// scale draws img to fit in side×side pixels, keeping its aspect.
func scale(img image.Image, side int) image.Image {
	b := img.Bounds()
	w, h := side, side
	if b.Dx() > b.Dy() {
		h = max(1, b.Dy()*side/b.Dx())
	} else {
		w = max(1, b.Dx()*side/b.Dy())
	}
	dst := image.NewNRGBA(image.Rect(0, 0, w, h))
	xdraw.CatmullRom.Scale(dst, dst.Bounds(), img, b, draw.Src, nil)
	return dst
}

// CheckDataURI checks an icon given as a data URI: a base64 PNG of at
// most MaxBytes whose header gives at most MaxSide pixels a side. It
// reads the header only: Import decodes uploads whole. Its errors are
// sentences about the icon, to be shown as they are.
func CheckDataURI(uri string) error {
	if len(uri) < len(DataURIPrefix) || !strings.EqualFold(uri[:len(DataURIPrefix)], DataURIPrefix) {
		return errors.New("an icon's data URI must begin " + DataURIPrefix)
	}
	data := uri[len(DataURIPrefix):]
	if n := base64.StdEncoding.DecodedLen(len(data)); n > MaxBytes+3 {
		return fmt.Errorf("the icon is %d KiB, the limit is %d KiB", (n+1023)>>10, MaxBytes>>10)
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return errors.New("the icon's data is not base64")
	}
	if len(b) > MaxBytes {
		return fmt.Errorf("the icon is %d KiB, the limit is %d KiB", (len(b)+1023)>>10, MaxBytes>>10)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return errors.New("the icon's data is not a PNG image")
	}
	if cfg.Width < 1 || cfg.Height < 1 || cfg.Width > MaxSide || cfg.Height > MaxSide {
		return fmt.Errorf("the icon is %d×%d pixels, the limit is %d a side", cfg.Width, cfg.Height, MaxSide)
	}
	return nil
}
