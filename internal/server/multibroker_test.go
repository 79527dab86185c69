package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

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

// openBrokers starts n brokers of one new demo site on PostgreSQL, the
// first loading the demo; every broker after the first checks the
// configuration version only once an hour, so that it sees changes only
// when told of them.
func openBrokers(t *testing.T, n int, edit func(i int, c *server.Config)) []*server.Server {
	t.Helper()
	dsn := pgtest.DSN(t)
	var out []*server.Server
	for i := range n {
		cfg := server.Config{DataDir: t.TempDir(), DB: dsn, Listen: "127.0.0.1:0", PasswordParams: sitetest.Cheap, Name: fmt.Sprint("broker-", i)}
		if i == 0 {
			cfg.Demo, cfg.DemoPassword = true, testPassword
		} else {
			cfg.RefreshInterval = time.Hour
		}
		if edit != nil {
			edit(i, &cfg)
		}
		s, err := server.Open(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out = append(out, s)
	}
	return out
}

// TestConfigChangeReachesEveryBroker: a change made through one broker's
// admin API is served by the others within seconds (propagateWithin),
// although they check the version only hourly: the site DB tells them
// (LISTEN/NOTIFY), and they read only what changed. It takes about
// 100–400 ms here; the bound leaves room for a loaded CI machine, and
// scripts/change-latency measures it.
func TestConfigChangeReachesEveryBroker(t *testing.T) {
	const propagateWithin = 5 * time.Second
	brokers := openBrokers(t, 3, nil)
	a := brokers[0]
	user := `DEMO\user0001`
	token := login(t, a, user)
	var res struct {
		Resources []struct{ Name, Kind string } `json:"resources"`
	}
	userDo(t, a, "GET", "/resources", token, "", &res)
	gone := ""
	for _, r := range res.Resources {
		if r.Kind == "application" {
			gone = r.Name
			break
		}
	}
	if gone == "" {
		t.Fatal("the demo user has no application")
	}
	serves := func(s *server.Server, name string) bool {
		var r struct {
			Resources []struct{ Name string } `json:"resources"`
		}
		userDo(t, s, "GET", "/resources", token, "", &r)
		for _, x := range r.Resources {
			if x.Name == name {
				return true
			}
		}
		return false
	}
	for _, s := range brokers {
		if !serves(s, gone) {
			t.Fatalf("%s does not serve %q before the change", s.Name(), gone)
		}
	}

	// A delete through the first broker.
	start := time.Now()
	if code, body := adminDo(t, a, "DELETE", "/applications/"+url.PathEscape(gone), nil); code != http.StatusNoContent && code != http.StatusOK {
		t.Fatalf("delete %s: %d %s", gone, code, body)
	}
	for _, s := range brokers[1:] {
		poll(t, propagateWithin-time.Since(start), s.Name()+" to stop serving "+gone, func() bool { return !serves(s, gone) })
	}
	t.Logf("a delete reached every broker in %v", time.Since(start))

	// A password change: the new password logs on at every other broker
	// within propagateWithin, the old one no longer.
	start = time.Now()
	body, _ := json.Marshal(map[string]string{"password": "pw-changed-5678"})
	req, _ := http.NewRequestWithContext(t.Context(), "PUT", a.URL()+"/api/v1/admin/users/user0001/password", bytes.NewReader(body))
	req.SetBasicAuth("admin", testPassword)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		t.Fatalf("set password: %d", resp.StatusCode)
	}
	for _, s := range brokers[1:] {
		poll(t, propagateWithin-time.Since(start), s.Name()+" to take the new password", func() bool {
			code, _, _ := call(t, "POST", s.URL()+"/api/v1/login", map[string]string{"username": user, "password": "pw-changed-5678"})
			return code == http.StatusOK
		})
		if code, _, _ := call(t, "POST", s.URL()+"/api/v1/login", map[string]string{"username": user, "password": testPassword}); code == http.StatusOK {
			t.Errorf("%s still takes the old password", s.Name())
		}
	}
	t.Logf("a password change reached every broker in %v", time.Since(start))
}

// TestLockoutReachesEveryBroker replays guessing over HTTP, the guesses
// spread over two brokers of one PostgreSQL site: once the threshold is
// reached, the right password is refused at both (as a wrong one is), both
// list the lock, and an unlock through one broker's admin API lets the
// user in through the other.
func TestLockoutReachesEveryBroker(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	const password, threshold = "pw-lockout-1", 4
	var brokers []*server.Server
	for i := range 2 {
		cfg := server.Config{DataDir: t.TempDir(), DB: dsn, Listen: "127.0.0.1:0", PasswordParams: sitetest.Cheap,
			Name: fmt.Sprint("b", i), LockoutThreshold: threshold, SourceFree: -1}
		if i == 0 {
			cfg.Demo, cfg.DemoPassword = true, password
		}
		s, err := server.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		brokers = append(brokers, s)
	}
	logon := func(s *server.Server, pw string) int {
		code, _, _ := call(t, "POST", s.URL()+"/api/v1/login", map[string]string{"username": "user0007", "password": pw})
		return code
	}
	for i := range threshold {
		if code := logon(brokers[i%2], "wrong"); code != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d", i, code)
		}
	}
	for i, s := range brokers {
		if code := logon(s, password); code != http.StatusUnauthorized {
			t.Fatalf("the right password at broker %d after %d failures spread over both: %d, want 401", i, threshold, code)
		}
		code, body, _ := call(t, "GET", s.URL()+"/api/v1/admin/lockouts", nil, "Authorization", "Basic "+basicAuth("admin", password))
		if code != http.StatusOK || !strings.Contains(string(body), `"user0007"`) {
			t.Fatalf("lock-outs at broker %d: %d %s", i, code, body)
		}
	}
	if code, body, _ := call(t, "DELETE", brokers[0].URL()+"/api/v1/admin/lockouts/user0007", nil, "Authorization", "Basic "+basicAuth("admin", password)); code != http.StatusNoContent {
		t.Fatalf("unlock: %d %s", code, body)
	}
	if code := logon(brokers[1], password); code != http.StatusOK {
		t.Fatalf("the right password at the other broker after the unlock: %d", code)
	}
}
