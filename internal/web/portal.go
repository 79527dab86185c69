package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/icon"
)

// The portal is a page and its script and style, embedded; the script is a
// client of the user API (/api/v1: login with a session cookie, resources,
// launch, sessions), so that the portal has no path of its own into the
// broker. Its session view shows a desktop in the page with noVNC, whose
// ES modules are vendored verbatim under portal/novnc by
// scripts/vendor-novnc and held to novnc.sha256 by a test.
//
//go:embed portal
var portalFS embed.FS

// PortalConfig configures the portal.
type PortalConfig struct {
	// DisplayOrigins are the origins, besides the portal's own, at which
	// the portal's pages may open a session's display (the WebSocket of a
	// launch answer's display_url): in direct mode, where the browser
	// opens the agent's wss://host:port/display itself, the agents'
	// origins. Each is "wss://HOST" or "wss://HOST:PORT", HOST a name, an
	// IP address (IPv6 in brackets) or "*." and a domain (any name under
	// it), PORT a number or "*"; "ws://" only for a site served over
	// plain HTTP. Empty when every display goes through usher's own
	// gateway, at a same-origin path, which the portal allows anyway.
	DisplayOrigins []string
}

// displayOrigin is what PortalConfig.DisplayOrigins accepts: a CSP host
// source of scheme ws or wss, nothing but a host and a port, so that no
// value can add a directive to the policy.
var displayOrigin = regexp.MustCompile(`^wss?://(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(:([0-9]{1,5}|\*))?$|^wss?://\[[0-9A-Fa-f:.]+\](:([0-9]{1,5}|\*))?$`)

// Validate reports the first origin of DisplayOrigins that is not one.
func (c PortalConfig) Validate() error {
	for _, o := range c.DisplayOrigins {
		if !displayOrigin.MatchString(o) {
			return fmt.Errorf("display origin %q: want wss://HOST or wss://HOST:PORT (HOST may start with *.), nothing after it", o)
		}
	}
	return nil
}

// The Content-Security-Policy of the portal's answers lets its pages load
// only the site's own script (noVNC's ES modules included: none of them
// needs eval), style and images (and icons given as data: URIs), be
// framed by no one, and send forms and requests only to the site, and
// open WebSockets only to the site and the configured display origins.
const (
	cspBefore = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'"
	cspAfter  = "; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

// requestHost is a Host header that can go into the policy as it is: a
// name or an address (IPv6 in brackets), and a port.
var requestHost = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$`)

// contentSecurityPolicy is the policy of an answer to r. connect-src
// names the page's own WebSocket origins besides 'self': CSP Level 3
// lets 'self' match ws: and wss: to the page's host and port, but
// browsers that predate it (WebKit's among them) do not, and would refuse
// the display's same-origin WebSocket. They come from r's Host, which is
// what the browser asked for, so the origin of the page it loads; a Host
// that is not a plain host and port adds nothing ('self' alone then). A
// page served over TLS gets only wss:; over plain HTTP (which is also
// what a TLS-terminating proxy in front of usher looks like) ws: too. The
// scheme sources "ws: wss:" would do as much with no Host, but let a page
// open a WebSocket to any host, which connect-src is there to prevent.
func (p *portal) contentSecurityPolicy(r *http.Request) string {
	var b strings.Builder
	b.WriteString(cspBefore)
	if host := r.Host; requestHost.MatchString(host) {
		if r.TLS == nil {
			b.WriteString(" ws://" + host)
		}
		b.WriteString(" wss://" + host)
	}
	for _, o := range p.cfg.DisplayOrigins {
		b.WriteString(" " + o)
	}
	b.WriteString(cspAfter)
	return b.String()
}

// secure sets the headers every portal answer to r carries.
func (p *portal) secure(h http.Header, r *http.Request) {
	h.Set("Content-Security-Policy", p.contentSecurityPolicy(r))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
}

// assetTypes are the Content-Types of the portal's assets, set here rather
// than from the system's MIME table, which may lack them or map .js to
// text/plain; a module script of another type (nosniff) does not run.
var assetTypes = map[string]string{
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".html": "text/html; charset=utf-8",
	".png":  "image/png",
}

type portal struct {
	cfg    PortalConfig
	page   []byte // index.html
	con    []byte // console.html
	assets http.Handler
	etags  map[string]string // asset path (under /portal/) to its ETag
	icons  *iconCache
	start  time.Time
}

// Portal returns the handler of the user portal and the console: the
// portal's page at "/", the console's at "/console", and their assets and
// icons under "/portal/" (noVNC's modules under "/portal/novnc/"). Mount
// it on "GET /{$}", "GET /console" and "GET /portal/". It returns an
// error when cfg is not valid.
func Portal(cfg PortalConfig) (http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sub, err := fs.Sub(portalFS, "portal")
	if err != nil {
		panic("web: " + err.Error()) // the embedded tree is fixed at build time
	}
	p := &portal{cfg: cfg, assets: http.StripPrefix("/portal/", http.FileServerFS(sub)), etags: map[string]string{},
		icons: &iconCache{png: map[string][]byte{}}, start: time.Now()}
	if p.page, err = fs.ReadFile(sub, "index.html"); err != nil {
		panic("web: " + err.Error())
	}
	if p.con, err = fs.ReadFile(sub, "console.html"); err != nil {
		panic("web: " + err.Error())
	}
	// Embedded files have no modification time: an ETag of their content
	// lets a browser revalidate them (Cache-Control: no-cache) without
	// fetching them again.
	err = fs.WalkDir(sub, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		p.etags[name] = `"` + hex.EncodeToString(sum[:16]) + `"`
		return nil
	})
	if err != nil {
		panic("web: " + err.Error())
	}
	return p, nil
}

func (p *portal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.secure(w.Header(), r)
	switch {
	case r.URL.Path == "/":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, "index.html", p.start, bytes.NewReader(p.page))
	case r.URL.Path == "/console":
		// The page is the same for everyone; what it shows comes
		// from the admin API, which only admins can read.
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, "console.html", p.start, bytes.NewReader(p.con))
	case strings.HasPrefix(r.URL.Path, "/portal/icons/"):
		p.icons.serve(w, r, strings.TrimPrefix(r.URL.Path, "/portal/icons/"))
	case r.URL.Path == "/portal/index.html" || r.URL.Path == "/portal/console.html":
		http.NotFound(w, r)
	default:
		name := strings.TrimPrefix(r.URL.Path, "/portal/")
		if etag, ok := p.etags[name]; ok {
			w.Header().Set("ETag", etag)
			if t, ok := assetTypes[path.Ext(name)]; ok {
				w.Header().Set("Content-Type", t)
			}
		}
		w.Header().Set("Cache-Control", "no-cache")
		p.assets.ServeHTTP(w, r)
	}
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
