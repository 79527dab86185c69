package site_test

import (
	"testing"

	"github.com/usher-vdi/usher/internal/site"
)

// TestKeepBindPassword: a desired directory without a bind password keeps
// the current one only while it sends it where the current one does.
func TestKeepBindPassword(t *testing.T) {
	current := site.Directory{Enabled: true, Servers: []string{"ldaps://dc1.example.com", "ldaps://dc2.example.com"},
		BindDN: "CN=svc,DC=example,DC=com", BindPassword: "current-pw", UserBaseDNs: []string{"DC=example,DC=com"}}
	for _, tc := range []struct {
		name    string
		edit    func(*site.Directory)
		refused bool
		want    string // the password of the directory returned
	}{
		{"Unchanged", func(d *site.Directory) {}, false, "current-pw"},
		{"OtherField", func(d *site.Directory) { d.UPNSuffix = "example.com"; d.Enabled = false }, false, "current-pw"},
		{"ServerDropped", func(d *site.Directory) { d.Servers = d.Servers[1:] }, false, "current-pw"},
		{"ServersReordered", func(d *site.Directory) { d.Servers = []string{d.Servers[1], d.Servers[0]} }, false, "current-pw"},
		{"NoServers", func(d *site.Directory) { d.Servers = nil; d.Enabled = false }, false, "current-pw"},
		{"ServerAdded", func(d *site.Directory) { d.Servers = append(d.Servers[:1:1], "ldaps://evil.example.net") }, true, ""},
		{"ServerReplaced", func(d *site.Directory) { d.Servers = []string{"ldap://evil.example.net"} }, true, ""},
		{"SameHostOtherPort", func(d *site.Directory) { d.Servers = []string{"ldaps://dc1.example.com:6360"} }, true, ""},
		{"BindDN", func(d *site.Directory) { d.BindDN = "CN=other,DC=example,DC=com" }, true, ""},
		{"AllowPlain", func(d *site.Directory) { d.AllowPlain = true }, true, ""},
		{"CABundle", func(d *site.Directory) { d.CABundle = "-----BEGIN CERTIFICATE-----\n" }, true, ""},
		{"NewPassword", func(d *site.Directory) { d.Servers = []string{"ldaps://new.example.com"}; d.BindPassword = "new-pw" }, false, "new-pw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			desired := current
			desired.Servers = append([]string(nil), current.Servers...)
			desired.BindPassword = ""
			tc.edit(&desired)
			got, err := site.KeepBindPassword(current, desired)
			if tc.refused {
				if site.ErrorCode(err) != site.EInvalid || site.ErrorField(err, site.KindDirectory, "") != "bind_password" {
					t.Errorf("err = %v, want EInvalid at bind_password", err)
				}
			} else if err != nil {
				t.Errorf("err = %v", err)
			}
			if got.BindPassword != tc.want {
				t.Errorf("password kept %t, want %t", got.BindPassword != "", tc.want != "")
			}
		})
	}
	t.Run("NothingToKeep", func(t *testing.T) {
		c := current
		c.BindPassword = ""
		d := c
		d.Servers = []string{"ldaps://new.example.com"}
		if got, err := site.KeepBindPassword(c, d); err != nil || got.BindPassword != "" {
			t.Errorf("got %v, %v", got, err)
		}
	})
	t.Run("DiffCarriesTheRefusal", func(t *testing.T) {
		cur, want := &site.Config{Directory: current}, &site.Config{Directory: current}
		want.Directory.BindPassword = ""
		want.Directory.Servers = []string{"ldap://evil.example.net"}
		p := site.Diff(cur, want)
		if site.ErrorField(p.Err(), site.KindDirectory, "") != "bind_password" {
			t.Errorf("plan error = %v", p.Err())
		}
		if p.Directory == nil || p.String() == "" || !containsPath(*p.Directory, "bind_password") {
			t.Errorf("the plan does not show the password as dropped: %s", p)
		}
	})
}

func containsPath(fc site.FieldChanges, path string) bool {
	for _, f := range fc {
		if f.Path == path {
			return true
		}
	}
	return false
}
