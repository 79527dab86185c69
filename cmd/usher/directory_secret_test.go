package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/dirserver/dirservertest"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/siteyaml"
)

// TestApplyBindPasswordStaysWithItsEndpoint replays the attack through
// usher apply: a site file exported without secrets, its directory
// pointed at a listener of the editor's own, is refused at bind_password
// (dry run too), located in the file; the site's directory still binds to
// the server the password was entered for, and the listener gets
// nothing. With the password in the file, the change is applied.
func TestApplyBindPasswordStaysWithItsEndpoint(t *testing.T) {
	const secret = "the-service-account-secret"
	legit, attacker := dirservertest.Record(t, secret), dirservertest.Record(t, secret)
	data := t.TempDir()
	file := filepath.Join(t.TempDir(), "site.yaml")
	apply := func(cfg *site.Config, secrets bool, args ...string) (int, string) {
		t.Helper()
		var b bytes.Buffer
		if err := siteyaml.EncodeWith(&b, cfg, siteyaml.EncodeOptions{WithSecrets: secrets}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, b.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, stderr := run(t, "", append([]string{"apply", "-f", file, "--data", data}, args...)...)
		return code, out + stderr
	}
	cfg := demo.Site()
	cfg.Directory = site.Directory{Enabled: true, Servers: []string{legit.URL()}, AllowPlain: true,
		BindDN: "CN=svc-usher,OU=Service,DC=usher,DC=test", BindPassword: secret,
		UserBaseDNs: []string{"OU=people,DC=usher,DC=test"}, UserAttribute: site.AttrUID, DialTimeoutSeconds: 1, TimeoutSeconds: 1}
	if code, out := apply(cfg, true); code != 0 {
		t.Fatalf("apply with the password: exit %d: %s", code, out)
	}

	moved := *cfg
	moved.Directory.Servers = []string{attacker.URL()}
	refused := regexp.MustCompile(`site\.yaml:\d+: directory: bind_password is required with a change of servers`)
	for _, args := range [][]string{{"--dry-run"}, nil} {
		if code, out := apply(&moved, false, args...); code == 0 || !refused.MatchString(out) || strings.Contains(out, secret) {
			t.Fatalf("apply %v moving the directory without the password: exit %d: %s", args, code, out)
		}
	}

	// The site still binds where the password was entered for.
	done := make(chan struct{})
	go func() { defer close(done); run(t, "", "directory", "test", "user0001", "--data", data) }()
	select {
	case <-legit.Seen():
	case <-time.After(time.Minute):
		got, n := legit.Received()
		t.Fatalf("no service bind reached the configured server (%d connections, %d bytes)", n, len(got))
	}
	if got, n := attacker.Received(); n != 0 || len(got) != 0 {
		t.Fatalf("the editor's listener got %d connections, %d bytes", n, len(got))
	}
	<-done

	moved.Directory.BindPassword = "a password for the new server"
	if code, out := apply(&moved, true); code != 0 {
		t.Fatalf("apply moving the directory with a password: exit %d: %s", code, out)
	}
}
