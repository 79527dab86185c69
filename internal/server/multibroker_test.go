package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
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
		cfg := server.Config{DataDir: t.TempDir(), DB: dsn, Listen: "127.0.0.1:0", PasswordParams: sitetest.Cheap, Name: "second"}
		if demo {
			cfg.Demo, cfg.DemoPassword, cfg.Name = true, "pw-multi-1", "first"
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

// TestBrokerNamesAndZones: a second running broker under a taken name, or
// a zone the site does not have, is refused with a clear error; a broker
// restarted from its own data directory takes its name back at once.
func TestBrokerNamesAndZones(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	dataA := t.TempDir()
	cfg := func(data, name, zone string) server.Config {
		return server.Config{DataDir: data, DB: dsn, Listen: "127.0.0.1:0", PasswordParams: sitetest.Cheap, Name: name, Zone: zone}
	}
	first := cfg(dataA, "b1", "")
	first.Demo, first.DemoPassword = true, "pw-names-1"
	a, err := server.Open(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if a.Zone() == "" {
		t.Errorf("a broker without --zone is in zone %q, want the primary zone", a.Zone())
	}
	if _, err := server.Open(ctx, cfg(t.TempDir(), "b1", "")); err == nil || !strings.Contains(err.Error(), "taken by a running broker") ||
		!strings.Contains(err.Error(), a.Addr()) {
		t.Errorf("a second broker named b1: %v", err)
	}
	if _, err := server.Open(ctx, cfg(t.TempDir(), "b2", "atlantis")); err == nil || !strings.Contains(err.Error(), `zone "atlantis" is not a zone of the site`) {
		t.Errorf("a broker of an unknown zone: %v", err)
	}
	a.Close()
	b, err := server.Open(ctx, cfg(dataA, "b1", ""))
	if err != nil {
		t.Fatalf("b1 restarted from its data directory: %v", err)
	}
	b.Close()
}
