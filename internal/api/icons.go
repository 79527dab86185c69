package api

import (
	"errors"
	"io"
	"net/http"
	"reflect"
	"slices"

	"github.com/usher-vdi/usher/internal/icon"
	"github.com/usher-vdi/usher/internal/site"
)

// iconTypes are the media types of an icon upload.
var iconTypes = []string{"image/png", "image/jpeg", "image/gif"}

// registerIcons adds the icon upload of applications and desktops: the
// image file is the request body, stored as the resource's icon (a PNG
// data URI, scaled down when large: icon.Import).
func (s *Server) registerIcons() {
	for _, c := range []struct {
		path string
		kind site.Kind
		list func(*site.Config) *[]site.Resource
	}{
		{"applications", site.KindApplication, func(c *site.Config) *[]site.Resource { return &c.Applications }},
		{"desktops", site.KindDesktop, func(c *site.Config) *[]site.Resource { return &c.Desktops }},
	} {
		s.route(Route{Method: "PUT", Pattern: adminPrefix + "/" + c.path + "/{name}/icon", OperationID: "put" + singular(camel(c.path)) + "Icon",
			Tag: c.path, Summary: "Upload a " + string(c.kind) + "'s icon: a PNG, JPEG or GIF file of at most 1 MiB and 4096 pixels a side, " +
				"kept as a PNG of at most 128 pixels a side", RawBody: iconTypes, Response: reflect.TypeFor[site.Resource]()},
			func(r *http.Request) (any, error) {
				name := r.PathValue("name")
				file, err := io.ReadAll(io.LimitReader(r.Body, icon.MaxUploadBytes+1))
				if err != nil {
					return nil, err
				}
				if len(file) > icon.MaxUploadBytes {
					return nil, &http.MaxBytesError{Limit: icon.MaxUploadBytes}
				}
				uri, err := icon.Import(file)
				switch {
				case errors.Is(err, icon.ErrTooLarge):
					return nil, site.Errorf(site.EInvalid, "the image is %v", err).At("icon")
				case err != nil:
					return nil, site.Errorf(site.EInvalid, "the file is %v", err).At("icon")
				}
				var out site.Resource
				err = s.mutate(r.Context(), func(cfg *site.Config) error {
					list := c.list(cfg)
					i := slices.IndexFunc(*list, func(x site.Resource) bool { return x.Name == name })
					if i < 0 {
						return site.NotFound(c.kind, name)
					}
					res := (*list)[i]
					res.Icon = uri
					(*list)[i], out = res, res
					return nil
				}, nil)
				return out, aboutObject(err, c.kind, name)
			})
	}
}
