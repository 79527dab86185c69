package web_test

import (
	"bytes"
	"crypto/tls"
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

// mustPortal returns the portal's handler with cfg.
func mustPortal(tb testing.TB, cfg web.PortalConfig) http.Handler {
	tb.Helper()
	h, err := web.Portal(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

func TestPortalPages(t *testing.T) {
	h := mustPortal(t, web.PortalConfig{})
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
	for _, path := range []string{"/", "/console", "/portal/portal.js", "/portal/session.js", "/portal/console.js", "/portal/portal.css"} {
		_, body := get(t, h, path)
		for _, bad := range []string{"http://", "https://", "//cdn", "@import", "<script>"} {
			if bytes.Contains(body, []byte(bad)) {
				t.Errorf("%s holds %q", path, bad)
			}
		}
	}
}

func TestPortalRefuses(t *testing.T) {
	h := mustPortal(t, web.PortalConfig{})
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

// TestPortalServesNoVNC: noVNC's modules (and pako's, which they import)
// come from the site as JavaScript, under the portal's policy, and a
// browser that has them revalidates them without fetching them again.
func TestPortalServesNoVNC(t *testing.T) {
	h := mustPortal(t, web.PortalConfig{})
	for path, want := range map[string]string{
		"/portal/novnc/core/rfb.js":                     "export default class RFB",
		"/portal/novnc/core/input/keyboard.js":          "export default class Keyboard",
		"/portal/novnc/vendor/pako/lib/zlib/inflate.js": "inflate",
		"/portal/session.js":                            `from "./novnc/core/rfb.js"`,
	} {
		resp, body := get(t, h, path)
		if resp.StatusCode != 200 || !bytes.Contains(body, []byte(want)) {
			t.Errorf("GET %s: %d, want 200 with %q", path, resp.StatusCode, want)
			continue
		}
		if got := resp.Header.Get("Content-Type"); got != "text/javascript; charset=utf-8" {
			t.Errorf("GET %s: Content-Type %q, want text/javascript (a module script of another type does not run)", path, got)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self';") || strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", path)
		}
		etag := resp.Header.Get("ETag")
		if etag == "" {
			t.Errorf("GET %s: no ETag", path)
			continue
		}
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", path, nil)
		r.Header.Set("If-None-Match", etag)
		h.ServeHTTP(w, r)
		if w.Code != http.StatusNotModified {
			t.Errorf("GET %s with If-None-Match: %d, want 304", path, w.Code)
		}
	}
	resp, body := get(t, h, "/portal/novnc/LICENSE.txt")
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte("MPL")) {
		t.Errorf("GET /portal/novnc/LICENSE.txt: %d", resp.StatusCode)
	}
}

// TestPortalPolicyAllowsTheDisplay: the policy lets a page open the
// display's WebSocket at its own origin (ws: and wss:, which 'self' does
// not cover in every browser), and at the configured display origins
// (direct mode), and nowhere else; a Host that is not a host and a port
// adds nothing.
func TestPortalPolicyAllowsTheDisplay(t *testing.T) {
	const direct = "wss://*.desktops.example.com:8443"
	h := mustPortal(t, web.PortalConfig{DisplayOrigins: []string{direct, "wss://[2001:db8::7]:8443"}})
	for _, tc := range []struct {
		name, host string
		tls        bool
		connect    string // connect-src, whole
	}{
		{"plain HTTP", "usher.example.com:8080", false,
			"connect-src 'self' ws://usher.example.com:8080 wss://usher.example.com:8080 " + direct + " wss://[2001:db8::7]:8443"},
		{"TLS", "usher.example.com", true, "connect-src 'self' wss://usher.example.com " + direct + " wss://[2001:db8::7]:8443"},
		{"IPv6", "[::1]:8443", true, "connect-src 'self' wss://[::1]:8443 " + direct + " wss://[2001:db8::7]:8443"},
		{"a Host that would add a directive", "x.example.com; script-src *", false, "connect-src 'self' " + direct + " wss://[2001:db8::7]:8443"},
		{"a Host with a path", "x.example.com/a", false, "connect-src 'self' " + direct + " wss://[2001:db8::7]:8443"},
		{"no Host", "", false, "connect-src 'self' " + direct + " wss://[2001:db8::7]:8443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.Host = tc.host
			if !tc.tls {
				r.TLS = nil
			} else if r.TLS == nil {
				r.TLS = &tls.ConnectionState{}
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			csp := w.Header().Get("Content-Security-Policy")
			var connect string
			for d := range strings.SplitSeq(csp, ";") {
				if d = strings.TrimSpace(d); strings.HasPrefix(d, "connect-src ") {
					connect = d
				}
			}
			if connect != tc.connect {
				t.Errorf("Host %q: %q\nwant %q\n(policy %q)", tc.host, connect, tc.connect, csp)
			}
			for _, want := range []string{"default-src 'none'", "script-src 'self';", "frame-ancestors 'none'"} {
				if !strings.Contains(csp, want) {
					t.Errorf("the policy %q lacks %q", csp, want)
				}
			}
			if strings.Count(csp, "script-src") != 1 || strings.Contains(csp, "unsafe") {
				t.Errorf("the policy %q", csp)
			}
		})
	}
	// Without display origins, the page's own.
	r := httptest.NewRequest("GET", "/portal/session.js", nil)
	r.Host = "127.0.0.1:4000"
	w := httptest.NewRecorder()
	mustPortal(t, web.PortalConfig{}).ServeHTTP(w, r)
	if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self' ws://127.0.0.1:4000 wss://127.0.0.1:4000;") {
		t.Errorf("policy %q", csp)
	}
}

func TestPortalConfigValidate(t *testing.T) {
	for _, o := range []string{"wss://agent-01.example.com:8443", "wss://*.example.com:*", "wss://10.0.0.7", "ws://127.0.0.1:5901", "wss://[fd00::1]:8443"} {
		if err := (web.PortalConfig{DisplayOrigins: []string{o}}).Validate(); err != nil {
			t.Errorf("%q: %v", o, err)
		}
	}
	for _, o := range []string{"", "*", "wss:", "wss://", "https://a.example.com", "wss://a.example.com/display", "wss://a.example.com:8443;script-src *",
		"wss://a.example.com 'unsafe-eval'", "wss://user@a.example.com", "wss://a.*.example.com", "wss://a.example.com:123456", "'self'"} {
		if err := (web.PortalConfig{DisplayOrigins: []string{o}}).Validate(); err == nil {
			t.Errorf("%q: valid", o)
		}
		if _, err := web.Portal(web.PortalConfig{DisplayOrigins: []string{o}}); err == nil {
			t.Errorf("Portal with %q: no error", o)
		}
	}
}
