package web

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/icon"
)

// The portal is a page and its script and style, embedded; the script is a
// client of the user API (/api/v1: login with a session cookie, resources,
// launch, sessions), so that the portal has no path of its own into the
// broker.
//
//go:embed portal
var portalFS embed.FS

// contentSecurityPolicy lets the portal's pages load only the site's own
// script, style and images (and icons given as data: URIs), be framed by
// no one, and send forms and requests only to the site.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// secure sets the headers every portal answer carries.
func secure(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
}

// Portal returns the handler of the user portal and the console: the
// portal's page at "/", the console's at "/console", and their assets and
// icons under "/portal/". Mount it on "GET /{$}", "GET /console" and
// "GET /portal/".
func Portal() http.Handler {
	sub, err := fs.Sub(portalFS, "portal")
	if err != nil {
		panic("web: " + err.Error()) // the embedded tree is fixed at build time
	}
	page, err := fs.ReadFile(sub, "index.html")
	if err != nil {
		panic("web: " + err.Error())
	}
	console, err := fs.ReadFile(sub, "console.html")
	if err != nil {
		panic("web: " + err.Error())
	}
	assets := http.StripPrefix("/portal/", http.FileServerFS(sub))
	icons := &iconCache{png: map[string][]byte{}}
	start := time.Now()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secure(w.Header())
		switch {
		case r.URL.Path == "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			http.ServeContent(w, r, "index.html", start, bytes.NewReader(page))
		case r.URL.Path == "/console":
			// The page is the same for everyone; what it shows comes
			// from the admin API, which only admins can read.
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			http.ServeContent(w, r, "console.html", start, bytes.NewReader(console))
		case strings.HasPrefix(r.URL.Path, "/portal/icons/"):
			icons.serve(w, r, strings.TrimPrefix(r.URL.Path, "/portal/icons/"))
		case r.URL.Path == "/portal/index.html" || r.URL.Path == "/portal/console.html":
			http.NotFound(w, r)
		default:
			w.Header().Set("Cache-Control", "no-cache")
			assets.ServeHTTP(w, r)
		}
	})
}

// builtinIcon is the name of a builtin icon as the portal asks for it.
var builtinIcon = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}\.png$`)

// maxIcons bounds the icons kept drawn: names come from requests.
const maxIcons = 256

// iconCache serves builtin icons drawn at 48 pixels, drawing each once.
type iconCache struct {
	mu  sync.Mutex
	png map[string][]byte
}

func (c *iconCache) serve(w http.ResponseWriter, r *http.Request, file string) {
	if !builtinIcon.MatchString(file) {
		http.NotFound(w, r)
		return
	}
	c.mu.Lock()
	b, ok := c.png[file]
	c.mu.Unlock()
	if !ok {
		b = icon.Draw(strings.TrimSuffix(file, ".png"), 48)
		c.mu.Lock()
		if len(c.png) >= maxIcons {
			clear(c.png)
		}
		c.png[file] = b
		c.mu.Unlock()
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Cache-Control", "public, max-age=86400")
	w.Write(b)
}
