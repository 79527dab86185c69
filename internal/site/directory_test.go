package site_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// MustCAPEM returns the PEM text of a new self-signed CA certificate.
func MustCAPEM(tb testing.TB) string {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

const testBindPassword = "s3cret-Bind-Pw!"

func fullDirectory(tb testing.TB) site.Directory {
	return site.Directory{
		Enabled: true, Servers: []string{"ldaps://dc1.example.com", "ldap://dc2.example.com:389"},
		CABundle: MustCAPEM(tb), BindDN: "CN=usher,OU=Service Accounts,DC=example,DC=com", BindPassword: testBindPassword,
		UserBaseDNs: []string{"OU=People,DC=example,DC=com"}, GroupBaseDNs: []string{"OU=Groups,DC=example,DC=com"},
		UserAttribute: site.AttrSAMAccountName, NetBIOSDomain: "EXAMPLE", UPNSuffix: "example.com",
		DialTimeoutSeconds: 3, TimeoutSeconds: 5, PoolSize: 8, GroupCacheTTLSeconds: 300, MaxNestingDepth: 10,
	}
}

func TestDirectoryValidate(t *testing.T) {
	ca := MustCAPEM(t)
	ok := []struct {
		name string
		edit func(*site.Directory)
	}{
		{"Full", func(*site.Directory) {}},
		{"Zero", func(d *site.Directory) { *d = site.Directory{} }},
		{"DisabledAndIncomplete", func(d *site.Directory) { d.Enabled, d.Servers, d.BindDN, d.UserBaseDNs = false, nil, "", nil }},
		{"NoPasswordKeepsTheCurrent", func(d *site.Directory) { d.BindPassword = "" }},
		{"PlainAllowed", func(d *site.Directory) { d.AllowPlain = true }},
		{"TwoCAs", func(d *site.Directory) { d.CABundle = ca + "\n" + MustCAPEM(t) }},
		{"UPNAttribute", func(d *site.Directory) { d.UserAttribute = site.AttrUserPrincipalName }},
		{"UIDAttribute", func(d *site.Directory) { d.UserAttribute = site.AttrUID }},
		{"DefaultAttribute", func(d *site.Directory) { d.UserAttribute = "" }},
		{"OpenLDAPDNs", func(d *site.Directory) {
			d.BindDN, d.UserBaseDNs = "cn=admin,dc=example,dc=org", []string{"ou=people,dc=example,dc=org", `cn=Smith\, John+uid=js,dc=x`}
		}},
		{"OIDAttribute", func(d *site.Directory) { d.BindDN = "2.5.4.3=usher,dc=example" }},
		{"FifteenCharacterDomain", func(d *site.Directory) { d.NetBIOSDomain = "ABCDEFGHIJKLMNO" }},
		{"IPv6Server", func(d *site.Directory) { d.Servers = []string{"ldaps://[2001:db8::1]:636"} }},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			d := fullDirectory(t)
			tc.edit(&d)
			if err := d.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
		})
	}

	bad := []struct {
		name, field string
		edit        func(*site.Directory)
	}{
		{"EnabledWithoutServers", "servers", func(d *site.Directory) { d.Servers = nil }},
		{"EnabledWithoutBindDN", "bind_dn", func(d *site.Directory) { d.BindDN = "" }},
		{"EnabledWithoutBaseDN", "user_base_dns", func(d *site.Directory) { d.UserBaseDNs = nil }},
		{"HTTPServer", "servers.1", func(d *site.Directory) { d.Servers[1] = "http://dc2.example.com" }},
		{"PlainSchemeSpelling", "servers.0", func(d *site.Directory) { d.Servers[0] = "ldap+plain://dc1.example.com" }},
		{"NoScheme", "servers.0", func(d *site.Directory) { d.Servers[0] = "dc1.example.com" }},
		{"ServerWithPath", "servers.0", func(d *site.Directory) { d.Servers[0] = "ldaps://dc1.example.com/dc=example" }},
		{"ServerWithUser", "servers.0", func(d *site.Directory) { d.Servers[0] = "ldaps://admin:" + testBindPassword + "@dc1.example.com" }},
		{"ServerWithBadPort", "servers.0", func(d *site.Directory) { d.Servers[0] = "ldaps://dc1.example.com:99999" }},
		{"ServerTwice", "servers.1", func(d *site.Directory) { d.Servers[1] = d.Servers[0] }},
		{"CANotPEM", "ca_bundle", func(d *site.Directory) { d.CABundle = "not a certificate" }},
		{"CAGarbageAfter", "ca_bundle", func(d *site.Directory) { d.CABundle += "trailing junk" }},
		{"CAPrivateKey", "ca_bundle", func(d *site.Directory) {
			d.CABundle = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}}))
		}},
		{"CABadDER", "ca_bundle", func(d *site.Directory) {
			d.CABundle = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2, 3}}))
		}},
		{"BindDNNotADN", "bind_dn", func(d *site.Directory) { d.BindDN = "usher" }},
		{"BindDNEmptyValue", "bind_dn", func(d *site.Directory) { d.BindDN = "cn=,dc=example" }},
		{"BaseDNNotADN", "group_base_dns.0", func(d *site.Directory) { d.GroupBaseDNs = []string{"dc=example,,dc=com"} }},
		{"BaseDNLoneBackslash", "user_base_dns.0", func(d *site.Directory) { d.UserBaseDNs = []string{`dc=example\`} }},
		{"PasswordWithNUL", "bind_password", func(d *site.Directory) { d.BindPassword = "a\x00b" }},
		{"Attribute", "user_attribute", func(d *site.Directory) { d.UserAttribute = "mail" }},
		{"DomainTooLong", "netbios_domain", func(d *site.Directory) { d.NetBIOSDomain = "ABCDEFGHIJKLMNOP" }},
		{"DomainBackslash", "netbios_domain", func(d *site.Directory) { d.NetBIOSDomain = `EX\AMPLE` }},
		{"DomainStar", "netbios_domain", func(d *site.Directory) { d.NetBIOSDomain = "EX*" }},
		{"DomainQuote", "netbios_domain", func(d *site.Directory) { d.NetBIOSDomain = `EX"` }},
		{"DomainSpace", "netbios_domain", func(d *site.Directory) { d.NetBIOSDomain = "EX AMPLE" }},
		{"UPNSuffixAt", "upn_suffix", func(d *site.Directory) { d.UPNSuffix = "@example.com" }},
		{"UPNSuffixEmptyLabel", "upn_suffix", func(d *site.Directory) { d.UPNSuffix = "example..com" }},
		{"NegativeTimeout", "timeout_seconds", func(d *site.Directory) { d.TimeoutSeconds = -1 }},
		{"HugeDialTimeout", "dial_timeout_seconds", func(d *site.Directory) { d.DialTimeoutSeconds = 3600 }},
		{"HugePool", "pool_size", func(d *site.Directory) { d.PoolSize = 100000 }},
		{"NegativeTTL", "group_cache_ttl_seconds", func(d *site.Directory) { d.GroupCacheTTLSeconds = -5 }},
		{"DeepNesting", "max_nesting_depth", func(d *site.Directory) { d.MaxNestingDepth = 1000 }},
		{"DisabledButMalformed", "servers.0", func(d *site.Directory) { d.Enabled, d.Servers = false, []string{"ftp://x"} }},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			d := fullDirectory(t)
			d.Servers = slices.Clone(d.Servers)
			tc.edit(&d)
			err := d.Validate()
			var e *site.Error
			if !errors.As(err, &e) {
				t.Fatalf("Validate = %v, want a *site.Error", err)
			}
			if e.Code != site.EInvalid || e.Field != tc.field || e.Kind != site.KindDirectory {
				t.Errorf("Validate = %q (code %s, field %q, kind %q); want invalid, field %q, kind directory", e.Message, e.Code, e.Field, e.Kind, tc.field)
			}
			if strings.Contains(e.Message, testBindPassword) || (d.BindPassword != "" && strings.Contains(e.Message, d.BindPassword)) {
				t.Errorf("the error shows the bind password: %s", e.Message)
			}
		})
	}
}

func TestConfigValidateChecksTheDirectory(t *testing.T) {
	c := &site.Config{Settings: site.DefaultSettings(), Directory: site.Directory{Enabled: true}}
	if got := site.ErrorField(c.Validate(), site.KindDirectory, ""); got != "servers" {
		t.Errorf("field of the error = %q, want servers", got)
	}
}

// TestDirectoryEqualSeesEveryField: a change of any one field makes two
// directories unequal.
func TestDirectoryEqualSeesEveryField(t *testing.T) {
	base := fullDirectory(t)
	v := reflect.ValueOf(&base).Elem()
	for i := range v.NumField() {
		d := base
		f := reflect.ValueOf(&d).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.Int:
			f.SetInt(f.Int() + 1)
		case reflect.Slice:
			f.Set(reflect.ValueOf(append(slices.Clone(f.Interface().([]string)), "x")))
		default:
			t.Fatalf("field %s: kind %s", v.Type().Field(i).Name, f.Kind())
		}
		if base.Equal(d) {
			t.Errorf("Equal misses a change of %s", v.Type().Field(i).Name)
		}
	}
}

// TestDirectoryNeverShowsThePassword: JSON, fmt's verbs and slog leave
// the bind password out.
func TestDirectoryNeverShowsThePassword(t *testing.T) {
	d := fullDirectory(t)
	c := site.Config{Settings: site.DefaultSettings(), Directory: d}
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("directory", "directory", d)
	for what, out := range map[string]string{
		"json": string(js), "%v": fmt.Sprintf("%v", d), "%+v": fmt.Sprintf("%+v", d), "%#v": fmt.Sprintf("%#v", d),
		"%+v of the config": fmt.Sprintf("%+v", c), "slog": logged.String(),
	} {
		if strings.Contains(out, testBindPassword) {
			t.Errorf("%s shows the bind password: %s", what, out)
		}
	}
	if !strings.Contains(logged.String(), `"bind_password_set":true`) {
		t.Errorf("slog does not say that a bind password is set: %s", logged.String())
	}
}

func TestDiffDirectory(t *testing.T) {
	current := &site.Config{Settings: site.DefaultSettings(), Directory: fullDirectory(t)}
	current.Normalize()
	t.Run("NoPasswordKeepsTheCurrent", func(t *testing.T) {
		desired := *current
		desired.Directory.BindPassword = ""
		if p := site.Diff(current, &desired); !p.Empty() {
			t.Fatalf("plan = %s, want empty", p)
		}
	})
	t.Run("FieldsAndPasswordChange", func(t *testing.T) {
		desired := *current
		desired.Directory.BindPassword = "another"
		desired.Directory.NetBIOSDomain = "OTHER"
		p := site.Diff(current, &desired)
		if p.Directory == nil {
			t.Fatalf("plan = %s, want a directory change", p)
		}
		var paths []string
		for _, f := range *p.Directory {
			paths = append(paths, f.Path)
			if strings.Contains(f.Old+f.New, "another") || strings.Contains(f.Old+f.New, testBindPassword) {
				t.Errorf("field %s shows a password: %s -> %s", f.Path, f.Old, f.New)
			}
		}
		if want := []string{"netbios_domain", "bind_password"}; !slices.Equal(paths, want) {
			t.Errorf("changed fields %q, want %q", paths, want)
		}
		recs := site.PlanRecords(p, "admin:root")
		if len(recs) != 1 || recs[0].Kind != site.KindDirectory || recs[0].Op != site.OpUpdate || recs[0].Name != "" ||
			!slices.Equal(recs[0].Fields, []string{"netbios_domain", "bind_password"}) {
			t.Errorf("records = %+v", recs)
		}
		if s := p.String(); !strings.Contains(s, "~ directory") || strings.Contains(s, "another") || strings.Contains(s, testBindPassword) {
			t.Errorf("plan text:\n%s", s)
		}
	})
}
