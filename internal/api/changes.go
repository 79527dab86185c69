package api

import (
	"net/http"
	"reflect"

	"github.com/usher-vdi/usher/internal/site"
)

// registerChanges adds the site's change history: who changed what, when.
func (s *Server) registerChanges() {
	s.route(Route{Method: "GET", Pattern: adminPrefix + "/changes", OperationID: "listChanges", Tag: "changes",
		Summary: "The change history, newest first, a page at a time: one record per object that a change through the admin API, " +
			"usher apply or usher admin created, updated or deleted, with who made it, when and under which configuration version",
		Response: reflect.TypeFor[site.ChangeRecord](), List: true,
		Query: []QueryParam{
			{Name: "kind", Description: "Only changes of this kind of object: zone, catalog, group, user, machine, delivery-group, " +
				"application, desktop, entitlement, target, settings, secret or admin."},
			{Name: "name", Description: "Only changes of objects of this name, exactly as written."},
			{Name: "actor", Description: "Only changes by this actor: admin:NAME, apply, cli or system."},
			{Name: "limit", Description: "Most items to return (default 100, at most 1000).", Integer: true},
			{Name: "after", Description: "Return records older than this one: the next value of the previous page."},
		}}, s.listChanges)
}

func (s *Server) listChanges(r *http.Request) (any, error) {
	opts, err := pageOptions(r)
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	f := site.ChangeFilter{Kind: site.Kind(q.Get("kind")), Name: q.Get("name"), Actor: q.Get("actor")}
	var out ListResponse[site.ChangeRecord]
	err = s.cfg.Store.View(r.Context(), func(tx site.Tx) error {
		p, err := tx.History().List(r.Context(), f, opts)
		out = ListResponse[site.ChangeRecord]{Items: p.Items, Total: p.Total, Next: p.Next}
		return err
	})
	if out.Items == nil {
		out.Items = []site.ChangeRecord{}
	}
	return out, err
}
