package api_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/storetest"
)

func directoryBody(d site.Directory, password string) map[string]any {
	raw, _ := json.Marshal(d)
	var m map[string]any
	json.Unmarshal(raw, &m)
	if password != "" {
		m["bind_password"] = password
	}
	return m
}

func (f *fixture) directory() api.DirectorySettings {
	f.t.Helper()
	r := f.do("GET", "/api/v1/admin/directory", nil)
	f.want(r, http.StatusOK, "")
	if strings.Contains(string(r.body), "bind-secret") || strings.Contains(string(r.body), `"bind_password"`) {
		f.t.Fatalf("GET shows the bind password: %s", r.body)
	}
	var out api.DirectorySettings
	if err := json.Unmarshal(r.body, &out); err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) storedDirectory() site.Directory {
	f.t.Helper()
	var d site.Directory
	if err := f.store.View(f.t.Context(), func(tx site.Tx) (err error) {
		d, err = tx.Directory(f.t.Context())
		return err
	}); err != nil {
		f.t.Fatal(err)
	}
	return d
}

func TestDirectorySettings(t *testing.T) {
	f := newFixture(t)
	if got := f.directory(); !got.Directory.IsZero() || got.BindPasswordSet {
		t.Fatalf("a new site's directory: %+v", got)
	}
	want := storetest.TestDirectory(t)
	v := f.configVersion()

	t.Run("PutSetsThePasswordWriteOnly", func(t *testing.T) {
		r := f.do("PUT", "/api/v1/admin/directory", directoryBody(want, want.BindPassword))
		f.want(r, http.StatusOK, "")
		if strings.Contains(string(r.body), want.BindPassword) {
			t.Fatalf("PUT answers with the bind password: %s", r.body)
		}
		got := f.directory()
		if !got.BindPasswordSet {
			t.Error("bind_password_set is false after a PUT with a password")
		}
		noPw := want
		noPw.BindPassword = ""
		if !got.Directory.Equal(noPw) {
			t.Errorf("GET = %v, want %v", got.Directory, noPw)
		}
		if s := f.storedDirectory(); s.BindPassword != want.BindPassword {
			t.Error("the site does not hold the bind password")
		}
		if got := f.configVersion(); got != v+1 {
			t.Errorf("config version %d, want %d", got, v+1)
		}
		// The broker serves the new configuration.
		if d := f.broker.Snapshot().Config().Directory; !d.Equal(want) {
			t.Errorf("the broker serves directory %v", d)
		}
	})

	t.Run("PutWithoutPasswordKeepsIt", func(t *testing.T) {
		// What a GET shows, bind_password_set included, goes back as it is.
		got := f.directory()
		got.UPNSuffix = "corp.example.com"
		f.want(f.do("PUT", "/api/v1/admin/directory", got), http.StatusOK, "")
		if s := f.storedDirectory(); s.BindPassword != want.BindPassword || s.UPNSuffix != "corp.example.com" {
			t.Errorf("after a PUT without a password: UPN suffix %q, password kept %t", s.UPNSuffix, s.BindPassword == want.BindPassword)
		}
	})

	t.Run("HistoryRecordsThatThePasswordChangedNotWhat", func(t *testing.T) {
		d := f.storedDirectory()
		f.want(f.do("PUT", "/api/v1/admin/directory", directoryBody(d, "rotated-pw")), http.StatusOK, "")
		r := f.do("GET", "/api/v1/admin/changes?kind=directory", nil)
		f.want(r, http.StatusOK, "")
		if strings.Contains(string(r.body), "rotated-pw") || strings.Contains(string(r.body), want.BindPassword) {
			t.Fatalf("the history shows a password: %s", r.body)
		}
		var page api.ListResponse[site.ChangeRecord]
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Items) != 3 || !slices.Equal(page.Items[0].Fields, []string{"bind_password"}) || page.Items[0].Actor != "admin:admin" {
			t.Errorf("directory history = %+v", page.Items)
		}
	})

	t.Run("FieldErrors", func(t *testing.T) {
		for _, tc := range []struct {
			name, field string
			edit        func(m map[string]any)
		}{
			{"Scheme", "servers.0", func(m map[string]any) { m["servers"] = []string{"http://dc1.example.com"} }},
			{"PlainSpelling", "servers.0", func(m map[string]any) { m["servers"] = []string{"ldap+plain://dc1.example.com"} }},
			{"CA", "ca_bundle", func(m map[string]any) {
				m["ca_bundle"] = "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n"
			}},
			{"Domain", "netbios_domain", func(m map[string]any) { m["netbios_domain"] = "A|B" }},
			{"Attribute", "user_attribute", func(m map[string]any) { m["user_attribute"] = "mail" }},
			{"BindDN", "bind_dn", func(m map[string]any) { m["bind_dn"] = "usher" }},
			{"NoServers", "servers", func(m map[string]any) { delete(m, "servers") }},
			{"UnknownField", "start_tls", func(m map[string]any) { m["start_tls"] = false }},
			{"WrongType", "pool_size", func(m map[string]any) { m["pool_size"] = "eight" }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := f.configVersion()
				m := directoryBody(want, "")
				tc.edit(m)
				r := f.do("PUT", "/api/v1/admin/directory", m)
				f.want(r, http.StatusBadRequest, site.EInvalid)
				if got := r.errorField(); got != tc.field {
					t.Errorf("field = %q, want %q (%s)", got, tc.field, r.errorMessage())
				}
				if got := f.configVersion(); got != before {
					t.Errorf("a refused PUT moved the version to %d", got)
				}
			})
		}
	})

	t.Run("AdminsOnly", func(t *testing.T) {
		f.want(f.do("GET", "/api/v1/admin/directory", nil, "none"), http.StatusUnauthorized, "")
	})

	t.Run("SiteAndSettingsDoNotShowIt", func(t *testing.T) {
		for _, p := range []string{"/api/v1/admin/site", "/api/v1/admin/settings"} {
			r := f.do("GET", p, nil)
			f.want(r, http.StatusOK, "")
			if strings.Contains(string(r.body), "rotated-pw") || strings.Contains(string(r.body), want.BindPassword) {
				t.Errorf("%s shows the bind password: %s", p, r.body)
			}
		}
	})
}
