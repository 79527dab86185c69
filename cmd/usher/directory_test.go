package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/dirserver"
	"github.com/usher-vdi/usher/internal/dirserver/dirservertest"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/siteyaml"
)

// TestDirectoryTest runs usher directory test against a real slapd named
// by the site's directory settings: what the command shows of a user of
// nested groups, of a disabled one, of a wrong password, and of a site
// without a directory. The password never shows.
func TestDirectoryTest(t *testing.T) {
	d := dirservertest.Start(t, dirserver.Options{Users: 100})
	data := t.TempDir()
	dirTest := func(stdin string, args ...string) (int, string, string) {
		t.Helper()
		return run(t, stdin, append(append([]string{"directory", "test"}, args...), "--data", data)...)
	}

	// A demo site without a directory first.
	cfg := demo.Site()
	file := filepath.Join(t.TempDir(), "site.yaml")
	apply := func() {
		t.Helper()
		var b bytes.Buffer
		if err := siteyaml.EncodeWith(&b, cfg, siteyaml.EncodeOptions{WithSecrets: true}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, b.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, out, stderr := run(t, "", "apply", "-f", file, "--data", data); code != 0 {
			t.Fatalf("apply: exit %d: %s%s", code, out, stderr)
		}
	}
	apply()
	if code, _, stderr := dirTest("", "user0001"); code != 1 || !strings.Contains(stderr, "directory is not enabled") {
		t.Fatalf("without a directory: exit %d: %s", code, stderr)
	}

	// The directory, and a site group named as one of its groups, which
	// the user reaches through two levels of nesting.
	cfg.Directory = site.Directory{Enabled: true, Servers: []string{d.Servers[0].LDAPS}, CABundle: string(d.CAPEM),
		BindDN: d.BindDN, BindPassword: d.BindPassword, UserBaseDNs: []string{dirserver.BaseDN}, UserAttribute: "uid",
		NetBIOSDomain: dirserver.Domain, UPNSuffix: dirserver.UPNSuffix}
	cfg.Groups = append(cfg.Groups, site.Group{Name: dirserver.AllStaff})
	cfg.Entitlements = append(cfg.Entitlements, site.Entitlement{Name: "all-staff-office", DeliveryGroup: demo.OfficeApps,
		Resources: []string{demo.OfficeDesktop}, Groups: []string{dirserver.AllStaff}},
		site.Entitlement{Name: "all-staff-apps", DeliveryGroup: demo.OfficeApps, Groups: []string{dirserver.AllStaff}})
	apply()

	code, out, stderr := dirTest(d.UserPassword+"\n", dirserver.Domain+`\user0001`, "--password-stdin")
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, stderr)
	}
	for _, want := range []string{"user:         user0001\n", "entry:        uid=user0001,", "account:      enabled\n", "password:     right\n",
		"  " + dirserver.AllStaff + " (cn=" + dirserver.AllStaff + ",", "site groups (1): " + dirserver.AllStaff + "\n", "  " + demo.OfficeDesktop + " (desktop "} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out+stderr, d.UserPassword) || strings.Contains(out+stderr, d.BindPassword) {
		t.Fatal("a password is printed")
	}
	t.Logf("usher directory test:\n%s", out)
	if !strings.Contains(out, "may use (") || strings.Contains(out, "may use (0)") {
		t.Fatalf("the user may use nothing:\n%s", out)
	}

	// Without the password: the entry, not checked.
	if code, out, stderr := dirTest("", "user0002@"+dirserver.UPNSuffix); code != 0 || !strings.Contains(out, "password:     not checked") {
		t.Fatalf("lookup: exit %d: %s%s", code, out, stderr)
	}
	// A disabled account is shown as such.
	if code, out, stderr := dirTest("", dirserver.Disabled); code != 0 || !strings.Contains(out, "account:      disabled") {
		t.Fatalf("disabled: exit %d: %s%s", code, out, stderr)
	}
	// A wrong password, and an injection attempt: refused, nobody shown.
	for _, name := range []string{"user0001", "*", "user0*"} {
		code, out, stderr := dirTest("not the password\n", name, "--password-stdin")
		if code != 1 || !strings.Contains(stderr, "wrong user name or password") || strings.Contains(out, "entry:") {
			t.Fatalf("%q with a wrong password: exit %d: %s%s", name, code, out, stderr)
		}
	}
}
