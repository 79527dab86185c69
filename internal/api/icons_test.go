package api_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/site"
)

// upload PUTs file as a resource's icon, as the admin.
func (f *fixture) upload(path, contentType string, file []byte) response {
	f.t.Helper()
	req, err := http.NewRequest("PUT", f.srv.URL+path, bytes.NewReader(file))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	req.SetBasicAuth("admin", adminPassword)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, raw}
}

func pngOf(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 7)
	}
	img.SetNRGBA(0, 0, color.NRGBA{A: 0xFF})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestIconUpload(t *testing.T) {
	f := newFixture(t)
	var apps api.ListResponse[site.Resource]
	json.Unmarshal(f.do("GET", "/api/v1/admin/applications?limit=1", nil).body, &apps)
	if len(apps.Items) == 0 {
		t.Fatal("the demo site has no application")
	}
	app := apps.Items[0].Name
	path := "/api/v1/admin/applications/" + app + "/icon"
	file := pngOf(t, 40, 40)
	want := "data:image/png;base64," + base64.StdEncoding.EncodeToString(file)

	version := f.configVersion()
	for _, tc := range []struct {
		name, contentType string
		file              []byte
		status            int
		says, field       string
	}{
		{"text as a PNG", "image/png", []byte("<script>alert(1)</script>"), 400, "not a PNG, JPEG or GIF image", "icon"},
		{"damaged PNG", "image/png", file[:len(file)/2], 400, "not a PNG, JPEG or GIF image", "icon"},
		{"too many pixels", "image/png", pngOf(t, 5000, 1), 400, "5000×1 pixels", "icon"},
		{"too many bytes", "image/png", make([]byte, 70<<10), 413, "larger than", ""},
		{"not an image type", "text/plain", file, 415, "image/png, image/jpeg, image/gif", ""},
		{"no such application", "image/png", file, 404, "not found", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := path
			if tc.status == 404 {
				p = "/api/v1/admin/applications/nope/icon"
			}
			r := f.upload(p, tc.contentType, tc.file)
			if r.status != tc.status || !strings.Contains(r.errorMessage(), tc.says) || r.errorField() != tc.field {
				t.Fatalf("%d %s; want %d saying %q at field %q", r.status, r.body, tc.status, tc.says, tc.field)
			}
		})
	}
	if v := f.configVersion(); v != version {
		t.Fatalf("refused uploads moved the configuration version from %d to %d", version, v)
	}

	r := f.upload(path, "image/png", file)
	f.want(r, 200, "")
	var got site.Resource
	json.Unmarshal(r.body, &got)
	if got.Icon != want {
		t.Fatalf("the answer's icon is %.60q, want the PNG uploaded", got.Icon)
	}
	json.Unmarshal(f.do("GET", "/api/v1/admin/applications/"+app, nil).body, &got)
	if got.Icon != want {
		t.Fatalf("the stored icon is %.60q, want the PNG uploaded", got.Icon)
	}
	if recs := f.changes("kind=application&name=" + app).Items; len(recs) == 0 || recs[0].Actor != "admin:admin" {
		t.Fatalf("the upload is not in the change history as the admin's: %v", summaries(recs))
	}
	// Only admins upload.
	token, lr := f.login("user0001", userPassword)
	f.want(lr, 200, "")
	req, _ := http.NewRequest("PUT", f.srv.URL+path, bytes.NewReader(file))
	req.Header.Set("Content-Type", "image/png")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 && resp.StatusCode != 403 {
		t.Fatalf("a user's upload: %d, want 401 or 403", resp.StatusCode)
	}
}
