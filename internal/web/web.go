package web

import (
	"html/template"
	"net/http"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
)

var indexTemplate = template.Must(template.New("index").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Name}} · usher</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:46rem;margin:3rem auto;padding:0 1rem;color:#222}
code{background:#f3f3f3;padding:0 .3em}table{border-collapse:collapse}td{padding:.2em 1em .2em 0}</style></head>
<body><h1>{{.Name}}</h1>
<p>An <strong>usher</strong> site (domain <code>{{.Domain}}</code>, configuration version {{.Version}}).</p>
<table>{{range .Counts}}<tr><td>{{.Kind}}</td><td>{{.N}}</td></tr>{{end}}</table>
<h2>Endpoints</h2>
<ul>
<li><a href="/api/openapi.json">/api/openapi.json</a>: the REST API, described</li>
<li><code>/api/v1/admin/</code>: the admin API, for scripts and tools (an admin account over HTTP basic, or a bearer token from <code>POST /api/v1/admin/tokens</code>)</li>
<li><a href="/healthz">/healthz</a> and <a href="/readyz">/readyz</a></li>
</ul>
<p>The user portal is at <a href="/">/</a>; the site's administrators manage it in the console at <a href="/console">/console</a>.</p>
</body></html>`))

// Index returns the handler of the site's index page, which describes the
// site (name, domain, configuration version, object counts) from the
// snapshot that snapshot returns.
func Index(snapshot func() *broker.Snapshot) http.Handler {
	type count struct {
		Kind string
		N    int
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		snap := snapshot()
		data := struct {
			Name, Domain string
			Version      int64
			Counts       []count
		}{Name: snap.Settings.Name, Domain: snap.Settings.Domain, Version: snap.Version}
		n := snap.Counts()
		for _, k := range []site.Kind{site.KindZone, site.KindCatalog, site.KindMachine, site.KindDeliveryGroup,
			site.KindApplication, site.KindDesktop, site.KindUser, site.KindGroup, site.KindEntitlement, site.KindTarget} {
			data.Counts = append(data.Counts, count{string(k) + "s", n[k]})
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		indexTemplate.Execute(w, data)
	})
}
