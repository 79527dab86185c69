package api

import (
	"errors"
	"io"
	"net/http"
	"reflect"

	"github.com/usher-vdi/usher/internal/icon"
	"github.com/usher-vdi/usher/internal/site"
)

// iconTypes are the media types of an icon upload.
var iconTypes = []string{"image/png", "image/jpeg", "image/gif"}

// registerIcons adds the icon upload of applications and desktops: the
// image file is the request body, stored as the resource's icon (a PNG
// data URI, scaled down when large: icon.Import).
func (s *Server) registerIcons(cs ...collection[site.Resource]) {
	for _, c := range cs {
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
				return c.change(s, r.Context(), name, func(list *[]site.Resource) error {
					i := c.index(*list, name)
					if i < 0 {
						return site.NotFound(c.kind, name)
					}
					(*list)[i].Icon = uri
					return nil
				})
			})
	}
}
