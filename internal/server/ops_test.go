package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/server"
)

func del(t *testing.T, c *http.Client, url string, header []string) answer {
	t.Helper()
	return send(t, c, "DELETE", url, "", header)
}

// TestLockoutOperations: an admin lists a locked-out user over the admin
// API and clears the lock, after which the right password gets in.
func TestLockoutOperations(t *testing.T) {
	s, _ := openSite(t, func(c *server.Config) { c.SourceFree = -1 })
	c := client("127.0.0.1")
	adm := basicHeader("admin", demoPassword)
	for range auth.DefaultLockoutThreshold {
		restLogon(t, c, s, "user0001", "wrong")
	}
	if a := restLogon(t, c, s, "user0001", demoPassword); a.status != http.StatusUnauthorized {
		t.Fatalf("locked user's right password: %+v", a)
	}
	if a := get2(t, c, s.URL()+"/api/v1/admin/lockouts", nil); a.status != http.StatusUnauthorized {
		t.Fatalf("lockouts without credentials: %+v", a)
	}
	a := get2(t, c, s.URL()+"/api/v1/admin/lockouts", adm)
	var list struct {
		Items []struct {
			Name, Kind  string
			SecondsLeft int64 `json:"seconds_left"`
		}
		Total int
	}
	if err := json.Unmarshal([]byte(a.body), &list); err != nil || a.status != 200 {
		t.Fatalf("lockouts: %+v (%v)", a, err)
	}
	if len(list.Items) != 1 || list.Total != 1 || list.Items[0].Name != "user0001" || list.Items[0].Kind != "user" ||
		list.Items[0].SecondsLeft != int64(auth.DefaultLockoutDuration/time.Second) {
		t.Fatalf("lockouts: %s", a.body)
	}
	if a := del(t, c, s.URL()+"/api/v1/admin/lockouts/user0001", adm); a.status != http.StatusNoContent {
		t.Fatalf("clear: %+v", a)
	}
	if a := restLogon(t, c, s, "user0001", demoPassword); a.status != 200 {
		t.Fatalf("right password after the lock was cleared: %+v", a)
	}
	if a := del(t, c, s.URL()+"/api/v1/admin/lockouts/user0001", adm); a.status != http.StatusNotFound {
		t.Fatalf("clearing an account that is not locked: %+v", a)
	}
	if a := del(t, c, s.URL()+"/api/v1/admin/lockouts/user0001?kind=robot", adm); a.status != http.StatusBadRequest {
		t.Fatalf("unknown kind: %+v", a)
	}
}

// TestRetryAfterCarriesTheWait: a throttled logon's Retry-After is what
// the source has still to wait, rounded up to seconds.
func TestRetryAfterCarriesTheWait(t *testing.T) {
	s, clk := openSite(t, nil)
	c := client("127.0.0.1")
	retryAfter := func() string {
		t.Helper()
		req, _ := http.NewRequest("POST", s.URL()+"/api/v1/login", strings.NewReader(`{"username":"user0002","password":"wrong"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("status %d, want throttled", resp.StatusCode)
		}
		return resp.Header.Get("Retry-After")
	}
	for range auth.DefaultSourceFree {
		restLogon(t, c, s, "user0002", "wrong")
	}
	if got := retryAfter(); got != "1" {
		t.Fatalf("after the free failures: Retry-After %q, want 1", got)
	}
	clk.Add(time.Second)
	restLogon(t, c, s, "user0002", "wrong") // checked: the delay doubles
	clk.Add(2 * time.Second)
	restLogon(t, c, s, "user0002", "wrong")
	if got := retryAfter(); got != "4" {
		t.Fatalf("Retry-After %q, want 4", got)
	}
	clk.Add(1500 * time.Millisecond)
	if got := retryAfter(); got != "3" {
		t.Fatalf("1.5s later: Retry-After %q, want 3 (2.5s rounded up)", got)
	}
}

// TestMetricsAuth: with MetricsAuth, /metrics answers admins only.
func TestMetricsAuth(t *testing.T) {
	c := client("127.0.0.1")
	open, _ := openSite(t, nil)
	if a := get2(t, c, open.URL()+"/metrics", nil); a.status != 200 || !strings.Contains(a.body, "usher_") {
		t.Fatalf("default /metrics: %d", a.status)
	}
	s, _ := openSite(t, func(c *server.Config) { c.MetricsAuth = true })
	if a := get2(t, c, s.URL()+"/metrics", nil); a.status != http.StatusUnauthorized || strings.Contains(a.body, "usher_") {
		t.Fatalf("/metrics without credentials: %+v", a)
	}
	if a := get2(t, c, s.URL()+"/metrics", basicHeader("admin", "wrong")); a.status != http.StatusUnauthorized {
		t.Fatalf("/metrics with a wrong password: %d", a.status)
	}
	if a := get2(t, c, s.URL()+"/metrics", basicHeader("admin", demoPassword)); a.status != 200 || !strings.Contains(a.body, "usher_") {
		t.Fatalf("/metrics as an admin (basic): %d", a.status)
	}
	token, _, _ := adminToken(t, c, s, 600, basicHeader("admin", demoPassword))
	if a := get2(t, c, s.URL()+"/metrics", []string{"Authorization", "Bearer " + token}); a.status != 200 {
		t.Fatalf("/metrics as an admin (bearer): %d", a.status)
	}
}

// TestServerDataCredentials: RequestServerData lists machines to anyone
// by default; with the site setting server_data_credentials on (through
// the admin API), only to valid credentials.
func TestServerDataCredentials(t *testing.T) {
	s, _ := openSite(t, func(c *server.Config) { c.SourceFree = -1 })
	c := client("127.0.0.1")
	serverData := func(creds string) answer {
		body := `<?xml version="1.0" encoding="UTF-8"?><NFuseProtocol version="5.4"><RequestServerData><ServerType>win32</ServerType><ClientType>ica30</ClientType>` +
			creds + `</RequestServerData></NFuseProtocol>`
		return post(t, c, s.URL()+"/scripts/wpnbr.dll", "text/xml", body)
	}
	creds := func(user, pw string) string {
		return `<Credentials><UserName>` + user + `</UserName><Password encoding="cleartext">` + pw + `</Password></Credentials>`
	}
	if a := serverData(""); !strings.Contains(a.body, "<ServerName>") {
		t.Fatalf("anonymous RequestServerData by default: %+v", a)
	}
	adm := basicHeader("admin", demoPassword)
	settings := get2(t, c, s.URL()+"/api/v1/admin/settings", adm)
	on := strings.Replace(settings.body, `"server_data_credentials": false`, `"server_data_credentials": true`, 1)
	if on == settings.body {
		t.Fatalf("settings without server_data_credentials: %s", settings.body)
	}
	if a := put(t, c, s.URL()+"/api/v1/admin/settings", on, adm); a.status != 200 || !strings.Contains(a.body, `"server_data_credentials": true`) {
		t.Fatalf("put settings: %+v", a)
	}
	for name, cr := range map[string]string{"anonymous": "", "wrong password": creds("user0001", "wrong"), "unknown user": creds("nobody", demoPassword)} {
		if a := serverData(cr); strings.Contains(a.body, "<ServerName>") || !strings.Contains(a.body, "failed-credentials") {
			t.Errorf("%s: %+v", name, a)
		}
	}
	if a := serverData(creds("user0001", demoPassword)); !strings.Contains(a.body, "<ServerName>") {
		t.Fatalf("valid credentials: %+v", a)
	}
}
