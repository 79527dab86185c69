package api

import (
	"net/http"
	"reflect"

	"github.com/usher-vdi/usher/internal/site"
)

// DirectorySettings is the site's directory (LDAP or Active Directory) as
// the admin API shows it: never the bind password, only whether one is
// set.
type DirectorySettings struct {
	site.Directory
	BindPasswordSet bool `json:"bind_password_set"`
}

// DirectoryRequest replaces the site's directory settings. The bind
// password is write-only: without one (absent or empty) the current one
// is kept, unless the request changes where it goes (servers added,
// allow_plain, ca_bundle, bind_dn): that is refused at field
// bind_password (site.KeepBindPassword). bind_password_set, as a GET
// shows it, may be sent back and is ignored.
type DirectoryRequest struct {
	site.Directory
	BindPassword    string `json:"bind_password,omitempty"`
	BindPasswordSet bool   `json:"bind_password_set,omitempty"`
}

func (s *Server) registerDirectory() {
	s.route(Route{Method: "GET", Pattern: adminPrefix + "/directory", OperationID: "getDirectory", Tag: "site",
		Summary:  "The site's directory (LDAP, Active Directory) settings, without the bind password",
		Response: reflect.TypeFor[DirectorySettings]()}, s.getDirectory)
	s.route(Route{Method: "PUT", Pattern: adminPrefix + "/directory", OperationID: "putDirectory", Tag: "site",
		Summary: "Replace the site's directory settings; without a bind password the current one is kept, unless the servers, allow_plain, ca_bundle or bind_dn change (refused at bind_password)",
		Request: reflect.TypeFor[DirectoryRequest](), Response: reflect.TypeFor[DirectorySettings]()}, s.putDirectory)
}

func presentDirectory(d site.Directory) DirectorySettings {
	out := DirectorySettings{Directory: d, BindPasswordSet: d.BindPassword != ""}
	out.Directory.BindPassword = ""
	return out
}

func (s *Server) getDirectory(r *http.Request) (any, error) {
	var d site.Directory
	err := s.cfg.Store.View(r.Context(), func(tx site.Tx) (err error) {
		d, err = tx.Directory(r.Context())
		return err
	})
	if err != nil {
		return nil, err
	}
	return presentDirectory(d), nil
}

func (s *Server) putDirectory(r *http.Request) (any, error) {
	var req DirectoryRequest
	if err := decodeJSON(r, &req); err != nil {
		return nil, err
	}
	d := req.Directory
	d.BindPassword = req.BindPassword // empty: site.KeepBindPassword decides, through the plan
	if err := s.mutate(r.Context(), func(c *site.Config) error { c.Directory = d; return nil }, nil); err != nil {
		return nil, aboutObject(err, site.KindDirectory, "")
	}
	return s.getDirectory(r)
}
