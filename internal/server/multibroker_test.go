package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/usher-vdi/usher/internal/pgtest"
	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// TestBrokersShareTheSiteSecrets: two servers on one PostgreSQL site DB
// (two brokers) sign and check tokens alike and hand VDAs one enrolment
// secret, whichever started first.
func TestBrokersShareTheSiteSecrets(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	open := func(demo bool) *server.Server {
		t.Helper()
		cfg := server.Config{DataDir: t.TempDir(), DB: dsn, Listen: "127.0.0.1:0", PasswordParams: sitetest.Cheap}
		if demo {
			cfg.Demo, cfg.DemoPassword = true, "pw-multi-1"
		}
		s, err := server.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a := open(true)
	b := open(false)
	sa, _ := a.EnrolmentSecret()
	sb, _ := b.EnrolmentSecret()
	if sa == "" || sa != sb {
		t.Fatalf("enrolment secrets %q and %q, want one for the site", sa, sb)
	}

	code, body, _ := call(t, "POST", a.URL()+"/api/v1/login", map[string]string{"username": `DEMO\user0001`, "password": "pw-multi-1"})
	if code != http.StatusOK {
		t.Fatalf("log on at the first broker: %d %s", code, body)
	}
	var login struct{ Token string }
	if err := json.Unmarshal(body, &login); err != nil || login.Token == "" {
		t.Fatalf("login answer %s: %v", body, err)
	}
	for name, s := range map[string]*server.Server{"first": a, "second": b} {
		if code, body, _ := call(t, "GET", s.URL()+"/api/v1/resources", nil, "Authorization", "Bearer "+login.Token); code != http.StatusOK {
			t.Errorf("the token enumerates at the %s broker: %d %s", name, code, body)
		}
	}
	if code, _, _ := call(t, "GET", b.URL()+"/api/v1/resources", nil, "Authorization", "Bearer "+login.Token+"x"); code != http.StatusUnauthorized {
		t.Errorf("a forged token: %d, want 401", code)
	}
}
