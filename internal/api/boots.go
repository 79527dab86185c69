package api

import (
	"net/http"
	"reflect"

	"github.com/usher-vdi/usher/internal/site"
)

// registerBoots adds the boot log: which target booted what, when.
func (s *Server) registerBoots() {
	s.route(Route{Method: "GET", Pattern: adminPrefix + "/boots", OperationID: "listBoots", Tag: "targets",
		Summary: "The boot log, newest first, a page at a time: one record per step (script, kernel, initrd) that the boot " +
			"server answered to a known target, with the image, the version served, the cache mode, the client's address and the time; " +
			"a refused step (a missing image or version) says why. The last 300 records of each target are kept, none older than 90 days.",
		Response: reflect.TypeFor[site.BootRecord](), List: true,
		Query: []QueryParam{
			{Name: "target", Description: "Only the boots of this target."},
			{Name: "mac", Description: "Only the boots of this MAC address (any form net.ParseMAC reads)."},
			{Name: "limit", Description: "Most items to return (default 100, at most 1000).", Integer: true},
			{Name: "after", Description: "Return records older than this one: the next value of the previous page."},
		}}, s.listBoots)
}

func (s *Server) listBoots(r *http.Request) (any, error) {
	opts, err := pageOptions(r)
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	f := site.BootFilter{Target: q.Get("target")}
	if m := q.Get("mac"); m != "" {
		if f.MAC, err = site.NormalizeMAC(m); err != nil {
			return nil, err
		}
	}
	var out ListResponse[site.BootRecord]
	err = s.cfg.Store.View(r.Context(), func(tx site.Tx) error {
		p, err := tx.Boots().List(r.Context(), f, opts)
		out = ListResponse[site.BootRecord]{Items: p.Items, Total: p.Total, Next: p.Next}
		return err
	})
	if out.Items == nil {
		out.Items = []site.BootRecord{}
	}
	return out, err
}
