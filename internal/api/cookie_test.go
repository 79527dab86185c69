package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/api"
)

// cookieClient is a browser-like client of srv: a cookie jar, and the
// Sec-Fetch-Site header a browser sends (site "same-origin" or
// "cross-site").
type cookieClient struct {
	t    *testing.T
	srv  *httptest.Server
	http *http.Client
	site string
}

func newCookieClient(t *testing.T, srv *httptest.Server) *cookieClient {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client()
	c.Jar = jar
	return &cookieClient{t: t, srv: srv, http: c, site: "same-origin"}
}

func (c *cookieClient) do(method, path string, body any) (int, http.Header, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.srv.URL+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Sec-Fetch-Site", c.site)
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func sessionCookieOf(t *testing.T, h http.Header) *http.Cookie {
	return cookieOf(t, h, api.SessionCookieName)
}

func cookieOf(t *testing.T, h http.Header, name string) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", name, h.Values("Set-Cookie"))
	return nil
}

// TestSessionCookie: the portal's logon sets an HttpOnly, SameSite=Strict
// cookie (Secure over TLS) and answers no token; the cookie authenticates
// the user API; a cross-site request with it is refused; logout clears it;
// a password change revokes it.
func TestSessionCookie(t *testing.T) {
	f := newFixture(t)
	f.registerAll()
	tls := httptest.NewTLSServer(f.api)
	t.Cleanup(tls.Close)
	for _, srv := range []*httptest.Server{f.srv, tls} {
		c := newCookieClient(t, srv)
		if code, _, _ := c.do("GET", "/api/v1/me", nil); code != 401 {
			t.Fatalf("me without a cookie: %d", code)
		}
		code, h, body := c.do("POST", "/api/v1/login", api.LoginRequest{Username: "user0001", Password: userPassword, SessionCookie: true})
		if code != 200 {
			t.Fatalf("login: %d %s", code, body)
		}
		var lr api.LoginResponse
		json.Unmarshal(body, &lr)
		if lr.Token != "" || lr.User != "user0001" || strings.Contains(string(body), `"token"`) {
			t.Fatalf("a cookie login answers the token to the page's script: %s", body)
		}
		ck := sessionCookieOf(t, h)
		if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.Secure != (srv == tls) {
			t.Fatalf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/, Secure=%v", ck, srv == tls)
		}
		// The marker the page reads holds nothing secret, and lasts as
		// long as the session cookie.
		mk := cookieOf(t, h, api.SessionMarkerName)
		if mk.HttpOnly || mk.Value != "1" || mk.SameSite != http.SameSiteStrictMode || mk.Path != "/" || mk.Secure != (srv == tls) || !mk.Expires.Equal(ck.Expires) {
			t.Fatalf("marker %+v: want 1, readable by the page, SameSite=Strict, Path=/, Secure=%v, expiring with %v", mk, srv == tls, ck.Expires)
		}
		code, _, body = c.do("GET", "/api/v1/me", nil)
		var me api.MeResponse
		json.Unmarshal(body, &me)
		if code != 200 || me.User != "user0001" || me.Site == "" {
			t.Fatalf("me with the cookie: %d %s", code, body)
		}
		if code, _, body := c.do("GET", "/api/v1/resources", nil); code != 200 || !strings.Contains(string(body), `"resources"`) {
			t.Fatalf("resources with the cookie: %d %.200s", code, body)
		}
		// A page of another site posting with the user's cookie.
		c.site = "cross-site"
		if code, _, body := c.do("POST", "/api/v1/resources/notepad/launch", nil); code != 403 || !strings.Contains(string(body), "cross-site") {
			t.Fatalf("cross-site launch with the cookie: %d %s", code, body)
		}
		c.site = "same-origin"
		code, h, _ = c.do("POST", "/api/v1/logout", nil)
		if ck := sessionCookieOf(t, h); code != 204 || ck.MaxAge >= 0 {
			t.Fatalf("logout: %d, cookie %+v", code, ck)
		}
		if mk := cookieOf(t, h, api.SessionMarkerName); mk.MaxAge >= 0 {
			t.Fatalf("logout leaves the marker: %+v", mk)
		}
		if code, _, _ := c.do("GET", "/api/v1/me", nil); code != 401 {
			t.Fatalf("me after logout: %d", code)
		}
	}

	// A password change revokes the cookie's token.
	c := newCookieClient(t, f.srv)
	if code, _, body := c.do("POST", "/api/v1/login", api.LoginRequest{Username: "user0002", Password: userPassword, SessionCookie: true}); code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	f.want(f.do("PUT", "/api/v1/admin/users/user0002/password", map[string]string{"password": "another-password-1"}), 204, "")
	if code, _, _ := c.do("GET", "/api/v1/me", nil); code != 401 {
		t.Fatalf("a cookie issued under the old password: %d", code)
	}
}

// TestAdminCookie: the console's logon (an admin token in a cookie)
// authenticates the admin API, not the user API; a user's cookie does not
// authenticate the admin API; a cross-site change is refused.
func TestAdminCookie(t *testing.T) {
	f := newFixture(t)
	c := newCookieClient(t, f.srv)
	if code, _, body := c.do("POST", "/api/v1/login", api.LoginRequest{Username: "user0001", Password: userPassword, SessionCookie: true}); code != 200 {
		t.Fatalf("user login: %d %s", code, body)
	}
	if code, _, _ := c.do("GET", "/api/v1/admin/machines?limit=1", nil); code != 401 {
		t.Fatalf("a user's cookie on the admin API: %d", code)
	}

	a := newCookieClient(t, f.srv)
	b, _ := json.Marshal(api.TokenRequest{SessionCookie: true})
	req, _ := http.NewRequest("POST", f.srv.URL+"/api/v1/admin/tokens", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth("admin", adminPassword)
	resp, err := a.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 || strings.Contains(string(body), `"token"`) {
		t.Fatalf("admin token as a cookie: %d %s", resp.StatusCode, body)
	}
	var ck *http.Cookie
	for _, x := range resp.Cookies() {
		if x.Name == api.AdminCookieName {
			ck = x
		}
	}
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
		t.Fatalf("admin cookie %+v: want HttpOnly, SameSite=Strict", ck)
	}
	// The console's marker: the page logged off shows the logon form
	// without a request that fails.
	if mk := cookieOf(t, resp.Header, api.ConsoleMarkerName); mk.HttpOnly || mk.Value != "1" || !mk.Expires.Equal(ck.Expires) {
		t.Fatalf("console marker %+v: want 1, readable by the page, expiring with %v", mk, ck.Expires)
	}
	if code, _, body := a.do("GET", "/api/v1/admin/machines?limit=1", nil); code != 200 {
		t.Fatalf("the admin cookie on the admin API: %d %s", code, body)
	}
	if code, _, _ := a.do("GET", "/api/v1/me", nil); code != 401 {
		t.Fatalf("the admin cookie on the user API: %d", code)
	}
	a.site = "cross-site"
	if code, _, _ := a.do("DELETE", "/api/v1/admin/applications/notepad", nil); code != 403 {
		t.Fatalf("a cross-site change with the admin cookie: %d", code)
	}
	a.site = "same-origin"
	code, h, _ := a.do("POST", "/api/v1/logout", nil)
	if code != 204 {
		t.Fatalf("logout: %d", code)
	}
	if mk := cookieOf(t, h, api.ConsoleMarkerName); mk.MaxAge >= 0 {
		t.Fatalf("logout leaves the console marker: %+v", mk)
	}
	if code, _, _ := a.do("GET", "/api/v1/admin/machines?limit=1", nil); code != 401 {
		t.Fatalf("the admin API after logout: %d", code)
	}
}
