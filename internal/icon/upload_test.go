package icon_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/icon"
)

func encode(t testing.TB, img image.Image, format string) []byte {
	t.Helper()
	var b bytes.Buffer
	var err error
	switch format {
	case "png":
		err = png.Encode(&b, img)
	case "jpeg":
		err = jpeg.Encode(&b, img, nil)
	case "gif":
		err = gif.Encode(&b, img, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func picture(w, h int) image.Image {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.SetNRGBA(x, y, color.NRGBA{uint8(x), uint8(y), 0x80, 0xFF})
		}
	}
	return img
}

// decodeURI returns the PNG of an icon's data URI, decoded.
func decodeURI(t *testing.T, uri string) ([]byte, image.Image) {
	t.Helper()
	raw, ok := strings.CutPrefix(uri, icon.DataURIPrefix)
	if !ok {
		t.Fatalf("not a PNG data URI: %.40s", uri)
	}
	b, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the icon is not a PNG: %v", err)
	}
	return b, img
}

func TestImport(t *testing.T) {
	small := encode(t, picture(48, 48), "png")
	for _, tc := range []struct {
		name string
		file []byte
		w, h int
		same bool // kept byte for byte
	}{
		{"small PNG", small, 48, 48, true},
		{"large PNG", encode(t, picture(300, 150), "png"), 128, 64, false},
		{"JPEG", encode(t, picture(200, 400), "jpeg"), 64, 128, false},
		{"GIF", encode(t, picture(32, 32), "gif"), 32, 32, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uri, err := icon.Import(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			b, img := decodeURI(t, uri)
			if got := img.Bounds().Size(); got != image.Pt(tc.w, tc.h) {
				t.Fatalf("size %v, want %dx%d", got, tc.w, tc.h)
			}
			if tc.same != bytes.Equal(b, tc.file) {
				t.Fatalf("kept byte for byte: %v, want %v", !tc.same, tc.same)
			}
			if err := icon.CheckDataURI(uri); err != nil {
				t.Fatalf("an imported icon fails the check: %v", err)
			}
		})
	}
}

func TestImportRefuses(t *testing.T) {
	good := encode(t, picture(48, 48), "png")
	wide := encode(t, image.NewGray(image.Rect(0, 0, 5000, 1)), "png")
	for _, tc := range []struct {
		name string
		file []byte
		want error
		says string
	}{
		{"text", []byte("<svg onload=alert(1)>"), icon.ErrNotImage, ""},
		{"empty", nil, icon.ErrNotImage, ""},
		{"damaged PNG", append(append([]byte{}, good[:60]...), bytes.Repeat([]byte{0xAA}, 200)...), icon.ErrNotImage, ""},
		{"truncated JPEG", encode(t, picture(64, 64), "jpeg")[:300], icon.ErrNotImage, ""},
		{"too many pixels", wide, icon.ErrTooLarge, "5000×1 pixels"},
		{"too many bytes", append(append([]byte{}, good...), make([]byte, icon.MaxUploadBytes)...), icon.ErrTooLarge, "the limit is 1024 KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uri, err := icon.Import(tc.file)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Import: %q, %v; want %v", uri, err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("error %q does not say %q", err, tc.says)
			}
		})
	}
}

func TestCheckDataURI(t *testing.T) {
	uri := func(b []byte) string { return icon.DataURIPrefix + base64.StdEncoding.EncodeToString(b) }
	for _, tc := range []struct {
		name, uri, says string
	}{
		{"good", uri(encode(t, picture(16, 16), "png")), ""},
		{"upper-case prefix", "DATA:IMAGE/PNG;BASE64," + base64.StdEncoding.EncodeToString(encode(t, picture(16, 16), "png")), ""},
		{"SVG", "data:image/svg+xml;base64,PHN2Zz4=", "must begin"},
		{"not base64", icon.DataURIPrefix + "!!", "not base64"},
		{"JPEG in a PNG URI", uri(encode(t, picture(16, 16), "jpeg")), "not a PNG"},
		{"too many pixels", uri(encode(t, image.NewGray(image.Rect(0, 0, 300, 2)), "png")), "300×2 pixels"},
		{"too many bytes", icon.DataURIPrefix + strings.Repeat("A", 4*icon.MaxBytes/3+16), "the limit is 128 KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := icon.CheckDataURI(tc.uri)
			switch {
			case tc.says == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
				t.Fatalf("error %v, want one saying %q", err, tc.says)
			}
		})
	}
}

// FuzzImport feeds Import arbitrary files: it never panics, and what it
// accepts is an icon that CheckDataURI accepts and that decodes.
func FuzzImport(f *testing.F) {
	f.Add(encode(f, picture(8, 8), "png"))
	f.Add(encode(f, picture(8, 8), "jpeg"))
	f.Add(encode(f, picture(8, 8), "gif"))
	f.Add([]byte("GIF89a"))
	f.Fuzz(func(t *testing.T, file []byte) {
		uri, err := icon.Import(file)
		if err != nil {
			if !errors.Is(err, icon.ErrNotImage) && !errors.Is(err, icon.ErrTooLarge) {
				t.Fatalf("an error of neither kind: %v", err)
			}
			return
		}
		if err := icon.CheckDataURI(uri); err != nil {
			t.Fatalf("Import accepted what CheckDataURI refuses: %v", err)
		}
		decodeURI(t, uri)
	})
}
