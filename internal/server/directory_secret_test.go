package server_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/dirserver/dirservertest"
	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/storetest"
)

// TestDirectoryBindPasswordStaysWithItsEndpoint replays the attack on a
// running site: an admin, who cannot read the bind password, points the
// directory at a listener of their own without giving the password, and
// waits for the broker to bind there with it. Every change of where the
// password goes (servers, allow_plain, ca_bundle, bind_dn) without the
// password is refused at bind_password, and the broker binds only to the
// server the password was entered for; with the password given, the
// change is accepted.
func TestDirectoryBindPasswordStaysWithItsEndpoint(t *testing.T) {
	t.Parallel()
	s, _ := openSite(t, func(c *server.Config) { c.SourceFree = -1 })
	c := client("127.0.0.1")
	admin := basicHeader("admin", demoPassword)
	const secret = "the-service-account-secret"
	legit, attacker := dirservertest.Record(t, secret), dirservertest.Record(t, secret)
	base := site.Directory{Enabled: true, Servers: []string{legit.URL()}, AllowPlain: true,
		BindDN: "CN=svc-usher,OU=Service,DC=usher,DC=test", UserBaseDNs: []string{"OU=people,DC=usher,DC=test"},
		UserAttribute: site.AttrUID, DialTimeoutSeconds: 1, TimeoutSeconds: 1}
	body := func(d site.Directory, password string) string {
		raw, _ := json.Marshal(api.DirectoryRequest{Directory: d, BindPassword: password})
		return string(raw)
	}
	const dirURL = "/api/v1/admin/directory"
	if a := put(t, c, s.URL()+dirURL, body(base, secret), admin); a.status != http.StatusOK {
		t.Fatalf("PUT with the password: %+v", a)
	}

	for _, tc := range []struct {
		name string
		edit func(*site.Directory)
	}{
		{"Servers", func(d *site.Directory) { d.Servers = []string{attacker.URL()} }},
		{"AnotherServer", func(d *site.Directory) { d.Servers = []string{legit.URL(), attacker.URL()} }},
		{"BindDN", func(d *site.Directory) { d.BindDN = "CN=someone-else,DC=usher,DC=test" }},
		{"AllowPlain", func(d *site.Directory) { d.AllowPlain = false }},
		{"CABundle", func(d *site.Directory) { d.CABundle = storetest.TestDirectory(t).CABundle }},
		{"ServersWhileDisabled", func(d *site.Directory) { d.Enabled = false; d.Servers = []string{attacker.URL()} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := base
			tc.edit(&d)
			a := put(t, c, s.URL()+dirURL, body(d, ""), admin)
			var e api.ErrorBody
			json.Unmarshal([]byte(a.body), &e)
			if a.status != http.StatusBadRequest || e.Error.Field != "bind_password" {
				t.Fatalf("PUT moving the password without it: %d, field %q (%s), want 400 at bind_password", a.status, e.Error.Field, a.body)
			}
		})
	}

	// What the directory holds is still what the password was entered
	// for: a directory logon binds to the legitimate server, with the
	// password in clear (allow_plain: what the admin's listener would
	// have seen), and the admin's listener got nothing.
	restLogon(t, c, s, "carol", "carols-password")
	select {
	case <-legit.Seen():
	case <-time.After(time.Minute):
		got, n := legit.Received()
		t.Fatalf("no service bind reached the configured server (%d connections, %d bytes)", n, len(got))
	}
	if got, n := attacker.Received(); n != 0 || len(got) != 0 {
		t.Fatalf("the admin's listener got %d connections, %d bytes", n, len(got))
	}

	t.Run("WithThePassword", func(t *testing.T) {
		d := base
		d.Servers = []string{attacker.URL()}
		if a := put(t, c, s.URL()+dirURL, body(d, "a password for the new server"), admin); a.status != http.StatusOK {
			t.Fatalf("PUT moving the directory with a password: %+v", a)
		}
		var got site.Directory
		if err := s.Store().View(t.Context(), func(tx site.Tx) (err error) { got, err = tx.Directory(t.Context()); return err }); err != nil {
			t.Fatal(err)
		}
		if got.Servers[0] != attacker.URL() || got.BindPassword != "a password for the new server" {
			t.Errorf("stored directory: servers %v, new password %t", got.Servers, got.BindPassword == "a password for the new server")
		}
	})

	t.Run("UnchangedEndpointKeepsThePassword", func(t *testing.T) {
		d := base
		if a := put(t, c, s.URL()+dirURL, body(d, secret), admin); a.status != http.StatusOK {
			t.Fatalf("PUT back: %+v", a)
		}
		d.UPNSuffix = "usher.test"
		if a := put(t, c, s.URL()+dirURL, body(d, ""), admin); a.status != http.StatusOK {
			t.Fatalf("PUT of another field without the password: %+v", a)
		}
	})
}
