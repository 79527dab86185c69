package web_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/web"
)

func get(t *testing.T, h http.Handler, path string) (*http.Response, []byte) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
	resp := w.Result()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestPortalPages(t *testing.T) {
	h := web.Portal()
	for path, want := range map[string]string{
		"/":                   `src="/portal/portal.js"`,
		"/console":            `src="/portal/console.js"`,
		"/portal/portal.js":   "session_cookie: true",
		"/portal/console.js":  "/api/v1/admin/tokens",
		"/portal/portal.css":  ".resources",
		"/portal/icons/x.png": "\x89PNG",
	} {
		resp, body := get(t, h, path)
		if resp.StatusCode != 200 || !bytes.Contains(body, []byte(want)) {
			t.Errorf("GET %s: %d, want 200 with %q", path, resp.StatusCode, want)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", path)
		}
	}
	// Nothing the pages load comes from elsewhere.
	for _, path := range []string{"/", "/console", "/portal/portal.js", "/portal/console.js", "/portal/portal.css"} {
		_, body := get(t, h, path)
		for _, bad := range []string{"http://", "https://", "//cdn", "@import", "<script>"} {
			if bytes.Contains(body, []byte(bad)) {
				t.Errorf("%s holds %q", path, bad)
			}
		}
	}
}

func TestPortalRefuses(t *testing.T) {
	h := web.Portal()
	for _, path := range []string{
		"/portal/index.html", "/portal/console.html", "/portal/icons/../portal.js", "/portal/icons/.png",
		"/portal/icons/" + strings.Repeat("a", 80) + ".png", "/portal/icons/a%20b.png", "/portal/icons/x.svg", "/portal/nothing.js",
	} {
		if resp, _ := get(t, h, path); resp.StatusCode != 404 && resp.StatusCode != 301 {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
}

// TestIndexLinksTheConsole: /site points administrators to the console,
// which has shipped, and no longer promises it for a later release.
func TestIndexLinksTheConsole(t *testing.T) {
	h := web.Index(func() *broker.Snapshot { return broker.NewSnapshot(1, &site.Config{}) })
	resp, body := get(t, h, "/site")
	if resp.StatusCode != 200 {
		t.Fatalf("GET /site: %d", resp.StatusCode)
	}
	if !bytes.Contains(body, []byte(`<a href="/console">/console</a>`)) || bytes.Contains(body, []byte("later release")) {
		t.Errorf("GET /site does not link the console, or promises it later:\n%s", body)
	}
}
