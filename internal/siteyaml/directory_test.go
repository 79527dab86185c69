package siteyaml_test

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/storetest"
	"github.com/usher-vdi/usher/internal/siteyaml"
)

func withDirectory(t *testing.T) *site.Config {
	c := demo.Site()
	c.Directory = storetest.TestDirectory(t)
	c.Normalize()
	return c
}

func TestDirectoryRoundTrips(t *testing.T) {
	want := withDirectory(t)
	t.Run("WithSecrets", func(t *testing.T) {
		got := MustRoundTrip(t, want, siteyaml.EncodeOptions{WithSecrets: true})
		if !reflect.DeepEqual(got, want) {
			t.Errorf("directory round trip: got %v, want %v", got.Directory, want.Directory)
		}
		if got.Directory.BindPassword != want.Directory.BindPassword {
			t.Error("the bind password did not round-trip with secrets")
		}
	})
	t.Run("WithoutSecrets", func(t *testing.T) {
		out := MustEncode(t, want, siteyaml.EncodeOptions{})
		if bytes.Contains(out, []byte(want.Directory.BindPassword)) || bytes.Contains(out, []byte("bind_password")) {
			t.Errorf("an export without secrets holds the bind password:\n%s", out)
		}
		got := MustRoundTrip(t, want, siteyaml.EncodeOptions{})
		wantNoPw := want.Directory
		wantNoPw.BindPassword = ""
		if !got.Directory.Equal(wantNoPw) {
			t.Errorf("directory = %v, want %v", got.Directory, wantNoPw)
		}
		if want.Directory.BindPassword == "" {
			t.Error("Encode wrote into its configuration")
		}
	})
	t.Run("ZeroIsLeftOut", func(t *testing.T) {
		if out := MustEncode(t, demo.Site(), siteyaml.EncodeOptions{}); bytes.Contains(out, []byte("\ndirectory:")) {
			t.Errorf("a site without a directory exports a directory section:\n%s", out)
		}
	})
}

const directoryYAML = `settings:
  name: Farm
  domain: CORP
directory:
  enabled: true
  servers:
    - ldaps://dc1.corp.example.com
    - ldap://dc2.corp.example.com:389
  bind_dn: CN=usher,OU=Service,DC=corp,DC=example,DC=com
  bind_password: from-the-file
  user_base_dns: ["OU=People,DC=corp,DC=example,DC=com"] # quoted: a flow list splits at commas
  user_attribute: sAMAccountName
  netbios_domain: CORP
  upn_suffix: corp.example.com
  timeout_seconds: 3
`

func TestDecodeDirectory(t *testing.T) {
	doc, err := siteyaml.Decode("site.yaml", strings.NewReader(directoryYAML))
	if err != nil {
		t.Fatal(err)
	}
	d := doc.Config.Directory
	want := site.Directory{Enabled: true, Servers: []string{"ldaps://dc1.corp.example.com", "ldap://dc2.corp.example.com:389"},
		BindDN: "CN=usher,OU=Service,DC=corp,DC=example,DC=com", BindPassword: "from-the-file",
		UserBaseDNs: []string{"OU=People,DC=corp,DC=example,DC=com"}, UserAttribute: site.AttrSAMAccountName,
		NetBIOSDomain: "CORP", UPNSuffix: "corp.example.com", TimeoutSeconds: 3}
	if !d.Equal(want) {
		t.Errorf("directory = %v, want %v", d, want)
	}
	if err := doc.Config.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestDecodeDirectoryRejects(t *testing.T) {
	for _, tt := range []struct{ name, yaml, msg string }{
		{"UnknownKey", "directory:\n  enabled: true\n  start_tls: false\n", `site.yaml:3: unknown field "start_tls"`},
		{"NotAMapping", "directory: [ldaps://x]\n", "site.yaml:1: "},
		{"PoolNotANumber", "directory:\n  pool_size: many\n", "site.yaml:2: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := siteyaml.Decode("site.yaml", strings.NewReader(tt.yaml))
			if err == nil || !strings.HasPrefix(err.Error(), tt.msg) {
				t.Errorf("Decode = %v, want an error starting %q", err, tt.msg)
			}
		})
	}
}

// TestDirectoryErrorsPointAtTheSection: a validation error about the
// directory is located at its key, and names the field.
func TestDirectoryErrorsPointAtTheSection(t *testing.T) {
	in := strings.Replace(directoryYAML, "netbios_domain: CORP", "netbios_domain: CORP\\EXTRA", 1)
	doc, err := siteyaml.Decode("site.yaml", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	err = doc.Annotate(doc.Config.Validate())
	if err == nil || !strings.HasPrefix(err.Error(), "site.yaml:4: directory: ") {
		t.Fatalf("error = %v, want one at line 4 about the directory", err)
	}
	if got := site.ErrorField(err, site.KindDirectory, ""); got != "netbios_domain" {
		t.Errorf("field = %q, want netbios_domain", got)
	}
}
