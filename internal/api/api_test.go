package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/gateway"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitetest"
)

var cheap = sitetest.Cheap

const (
	adminPassword = sitetest.AdminPassword
	userPassword  = sitetest.UserPassword
)

type fixture struct {
	t       *testing.T
	srv     *httptest.Server
	api     *api.Server
	store   site.Store
	broker  *broker.Broker
	control *sitetest.Control
	signer  *auth.Signer
}

// newFixture serves the API over a real SQLite store holding the demo site
// and one admin account (sitetest), no machine registered.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	// Per-source throttling would slow the tests, all from one address;
	// internal/server's tests replay it.
	s := sitetest.New(t, sitetest.Options{Broker: func(c *broker.Config) { c.SourceFree = -1 }})
	signer, err := auth.NewSigner([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	// The display gateway as a site mounts it, so that its route is
	// documented and served.
	gw, err := gateway.New(gateway.Config{Authenticate: api.UserAuthenticator(signer, s.Broker), Resolver: gateway.FromBroker(s.Broker)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	a, err := api.New(api.Config{Store: s.Store, Signer: signer, PasswordParams: cheap, MaxBodyBytes: 64 << 10,
		Broker: s.Broker, EnrolmentSecret: enrolmentSecret, Display: gw, DisplayURL: gw.DisplayURL})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return &fixture{t: t, srv: srv, api: a, store: s.Store, broker: s.Broker, control: s.Control, signer: signer}
}

const enrolmentSecret = "enrol-me-please-0123456789"

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) errorCode() string {
	var e api.ErrorBody
	json.Unmarshal(r.body, &e)
	return e.Error.Code
}

func (r response) errorField() string {
	var e api.ErrorBody
	json.Unmarshal(r.body, &e)
	return e.Error.Field
}

func (r response) errorMessage() string {
	var e api.ErrorBody
	json.Unmarshal(r.body, &e)
	return e.Error.Message
}

// do sends a request as the admin (unless the request already carries an
// Authorization header or auth is "none").
func (f *fixture) do(method, path string, body any, authz ...string) response {
	f.t.Helper()
	return f.doAt(f.srv.URL, method, path, body, authz...)
}

// doAt is do at another server of the fixture's site.
func (f *fixture) doAt(base, method, path string, body any, authz ...string) response {
	f.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			f.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	switch {
	case len(authz) == 0:
		req.SetBasicAuth("admin", adminPassword)
	case authz[0] == "none":
	default:
		req.Header.Set("Authorization", authz[0])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, raw}
}

func (f *fixture) want(r response, status int, code string) {
	f.t.Helper()
	if r.status != status {
		f.t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if code != "" && r.errorCode() != code {
		f.t.Fatalf("error code %q, want %q; body %s", r.errorCode(), code, r.body)
	}
}

func basic(user, pw string) string {
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth(user, pw)
	return req.Header.Get("Authorization")
}

func TestAdminAuthentication(t *testing.T) {
	f := newFixture(t)
	f.want(f.do("GET", "/api/v1/admin/site", nil), 200, "")

	var bodies []string
	for _, tc := range []struct{ name, authz string }{
		{"no credentials", "none"},
		{"wrong password", basic("admin", "wrong")},
		{"unknown admin", basic("nobody", adminPassword)},
		{"end user password", basic("user0001", adminPassword)},
		{"garbage bearer", "Bearer abc.def"},
		{"empty bearer", "Bearer "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.do("GET", "/api/v1/admin/site", nil, tc.authz)
			f.want(r, 401, site.EUnauthorized)
			if r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			bodies = append(bodies, string(r.body))
		})
	}
	for _, b := range bodies[1:] {
		if b != bodies[0] {
			t.Fatalf("401 bodies differ, revealing why: %q vs %q", b, bodies[0])
		}
	}
}

func TestAdminTokens(t *testing.T) {
	f := newFixture(t)
	r := f.do("POST", "/api/v1/admin/tokens", map[string]int{"ttl_seconds": 600})
	f.want(r, 201, "")
	var tok api.TokenResponse
	if err := json.Unmarshal(r.body, &tok); err != nil || tok.Token == "" {
		t.Fatalf("token response %s: %v", r.body, err)
	}
	if d := time.Until(tok.ExpiresAt); d < 9*time.Minute || d > 11*time.Minute {
		t.Fatalf("expires in %v, want about 10m", d)
	}
	f.want(f.do("GET", "/api/v1/admin/site", nil, "Bearer "+tok.Token), 200, "")
	f.want(f.do("GET", "/api/v1/admin/site", nil, "Bearer "+tok.Token+"x"), 401, site.EUnauthorized)
	f.want(f.do("POST", "/api/v1/admin/tokens", map[string]int{"ttl_seconds": 1}), 400, site.EInvalid)

	// A token dies with its admin.
	f.want(f.do("POST", "/api/v1/admin/admins", map[string]string{"name": "ops", "password": "ops-password"}), 201, "")
	r = f.do("POST", "/api/v1/admin/tokens", nil, basic("ops", "ops-password"))
	f.want(r, 201, "")
	json.Unmarshal(r.body, &tok)
	f.want(f.do("GET", "/api/v1/admin/site", nil, "Bearer "+tok.Token), 200, "")
	f.want(f.do("DELETE", "/api/v1/admin/admins/ops", nil), 204, "")
	f.want(f.do("GET", "/api/v1/admin/site", nil, "Bearer "+tok.Token), 401, site.EUnauthorized)
	f.want(f.do("DELETE", "/api/v1/admin/admins/admin", nil), 409, site.EConflict) // yourself, and the last one
	// Yourself, spelled in another case, while another admin exists.
	f.want(f.do("POST", "/api/v1/admin/admins", map[string]string{"name": "ops2", "password": "ops-password"}), 201, "")
	r = f.do("DELETE", "/api/v1/admin/admins/ADMIN", nil)
	f.want(r, 409, site.EConflict)
	if !strings.Contains(r.errorMessage(), "their own account") {
		t.Fatalf("deleting yourself as ADMIN: %s", r.body)
	}
}

func TestListApplicationsPaging(t *testing.T) {
	f := newFixture(t)
	seen := map[string]bool{}
	after, pages := "", 0
	for {
		r := f.do("GET", "/api/v1/admin/applications?limit=37&after="+after, nil)
		f.want(r, 200, "")
		var page api.ListResponse[site.Resource]
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatal(err)
		}
		if page.Total != 400 {
			t.Fatalf("total %d, want 400", page.Total)
		}
		if len(page.Items) > 37 {
			t.Fatalf("page of %d items, limit 37", len(page.Items))
		}
		for _, a := range page.Items {
			if seen[a.Name] {
				t.Fatalf("application %q on two pages", a.Name)
			}
			seen[a.Name] = true
		}
		pages++
		if page.Next == "" {
			break
		}
		after = page.Next
		if pages > 20 {
			t.Fatal("paging does not end")
		}
	}
	if len(seen) != 400 || pages != 11 {
		t.Fatalf("saw %d applications in %d pages, want 400 in 11", len(seen), pages)
	}
	r := f.do("GET", "/api/v1/admin/applications", nil)
	var page api.ListResponse[site.Resource]
	json.Unmarshal(r.body, &page)
	if len(page.Items) != api.DefaultPageLimit {
		t.Fatalf("default page has %d items, want %d", len(page.Items), api.DefaultPageLimit)
	}
	for _, bad := range []string{"0", "-1", "1001", "ten"} {
		f.want(f.do("GET", "/api/v1/admin/applications?limit="+bad, nil), 400, site.EInvalid)
	}
}

// crudCase exercises create, read, update and delete of one kind.
type crudCase struct {
	path    string
	create  map[string]any
	update  map[string]any // the same object with a change
	check   string         // a field whose value the update changes
	checkTo any
}

func TestAdminCRUD(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []crudCase{
		{"zones", map[string]any{"name": "branch"}, map[string]any{"name": "branch", "description": "the branch office"}, "description", "the branch office"},
		{"catalogs", map[string]any{"name": "c2", "kind": "multi-session", "zone": "primary"},
			map[string]any{"name": "c2", "kind": "single-session-pooled", "zone": "primary"}, "kind", "single-session-pooled"},
		{"groups", map[string]any{"name": "sales"}, map[string]any{"name": "sales", "description": "Sales"}, "description", "Sales"},
		{"users", map[string]any{"name": "jdoe", "password": "a long password", "groups": []string{"domain-users"}},
			map[string]any{"name": "jdoe", "display_name": "Jane Doe", "groups": []string{"domain-users"}}, "display_name", "Jane Doe"},
		{"machines", map[string]any{"name": "new-vda", "catalog": "rdsh-office", "address": "new-vda.demo.internal:3389"},
			map[string]any{"name": "new-vda", "catalog": "rdsh-office", "address": "new-vda.demo.internal:3389", "maintenance": true}, "maintenance", true},
		{"delivery-groups", map[string]any{"name": "Empty", "catalogs": []string{}},
			map[string]any{"name": "Empty", "catalogs": []string{}, "reconnect": "disconnected-only"}, "reconnect", "disconnected-only"},
		{"applications", map[string]any{"name": "calc", "display_name": "Calculator", "command_line": "/usr/bin/calc", "delivery_groups": []string{"Office Apps"}},
			map[string]any{"name": "calc", "display_name": "Calculator", "command_line": "/usr/bin/calc", "folder": "Tools", "delivery_groups": []string{"Office Apps"}}, "folder", "Tools"},
		{"desktops", map[string]any{"name": "Kiosk", "display_name": "Kiosk", "delivery_groups": []string{"Office Apps"}},
			map[string]any{"name": "Kiosk", "display_name": "Kiosk Desktop", "delivery_groups": []string{"Office Apps"}}, "display_name", "Kiosk Desktop"},
		{"entitlements", map[string]any{"name": "finance-office", "delivery_group": "Office Apps", "groups": []string{"finance"}},
			map[string]any{"name": "finance-office", "delivery_group": "Office Apps", "groups": []string{"finance", "helpdesk"}}, "groups", []any{"finance", "helpdesk"}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			base := "/api/v1/admin/" + tc.path
			name := tc.create["name"].(string)
			version := f.configVersion()
			f.want(f.do("POST", base, tc.create), 201, "")
			f.want(f.do("POST", base, tc.create), 409, site.EConflict)
			f.want(f.do("GET", base+"/"+name, nil), 200, "")
			r := f.do("PUT", base+"/"+name, tc.update)
			f.want(r, 200, "")
			var got map[string]any
			json.Unmarshal(r.body, &got)
			if fmt.Sprint(got[tc.check]) != fmt.Sprint(tc.checkTo) {
				t.Fatalf("after update %s = %v, want %v", tc.check, got[tc.check], tc.checkTo)
			}
			if _, leaked := got["password_hash"]; leaked {
				t.Fatal("password hash in a response")
			}
			f.want(f.do("DELETE", base+"/"+name, nil), 204, "")
			f.want(f.do("GET", base+"/"+name, nil), 404, site.ENotFound)
			f.want(f.do("DELETE", base+"/"+name, nil), 404, site.ENotFound)
			f.want(f.do("PUT", base+"/"+name, tc.update), 404, site.ENotFound)
			if v := f.configVersion(); v != version+3 {
				t.Fatalf("configuration version %d after create, update, delete from %d; want %d", v, version, version+3)
			}
		})
	}
}

func (f *fixture) configVersion() int64 {
	f.t.Helper()
	r := f.do("GET", "/api/v1/admin/site", nil)
	f.want(r, 200, "")
	var info api.SiteInfo
	json.Unmarshal(r.body, &info)
	return info.ConfigVersion
}

func TestAdminBadInput(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		code, message      string
		field              string // the error's field, "" for none
	}{
		{"malformed JSON", "POST", "/api/v1/admin/zones", `{"name": `, 400, site.EInvalid, "not valid JSON", ""},
		{"empty body", "POST", "/api/v1/admin/zones", ``, 400, site.EInvalid, "empty", ""},
		{"unknown field", "POST", "/api/v1/admin/zones", `{"name":"z","colour":"red"}`, 400, site.EInvalid, `unknown field "colour"`, "colour"},
		{"wrong type", "POST", "/api/v1/admin/machines", `{"name":"m","catalog":"rdsh-office","address":"a:1","max_sessions":"many"}`, 400, site.EInvalid, "max_sessions", "max_sessions"},
		{"trailing data", "POST", "/api/v1/admin/zones", `{"name":"z"} {"name":"y"}`, 400, site.EInvalid, "after the JSON value", ""},
		{"oversized body", "POST", "/api/v1/admin/zones", `{"name":"` + strings.Repeat("z", 70<<10) + `"}`, 413, site.EInvalid, "larger than", ""},
		{"missing reference", "POST", "/api/v1/admin/machines", map[string]any{"name": "m", "catalog": "nope", "address": "m:3389"}, 400, site.EInvalid, `catalog "nope"`, "catalog"},
		{"invalid enum", "POST", "/api/v1/admin/catalogs", map[string]any{"name": "c", "kind": "multi", "zone": "primary"}, 400, site.EInvalid, `kind "multi"`, "kind"},
		{"rename by PUT", "PUT", "/api/v1/admin/zones/primary", map[string]any{"name": "other", "primary": true}, 400, site.EInvalid, "cannot be renamed", "name"},
		{"delete in use", "DELETE", "/api/v1/admin/catalogs/rdsh-office", nil, 409, site.EConflict, `catalog "rdsh-office" is still in use`, ""},
		{"unknown route", "GET", "/api/v1/admin/frobs", nil, 404, site.ENotFound, "no such API route", ""},
		{"short password", "PUT", "/api/v1/admin/users/user0001/password", map[string]string{"password": "short"}, 400, site.EInvalid, "shorter", "password"},
		{"bad session state", "GET", "/api/v1/admin/sessions?state=sleepy", nil, 400, site.EInvalid, "sleepy", ""},
		{"nested field", "POST", "/api/v1/admin/delivery-groups", map[string]any{"name": "G", "catalogs": []string{}, "load_rules": map[string]any{"cpu": map[string]any{"enabled": true, "full_percent": 0}}}, 400, site.EInvalid, "outside 1..100", "load_rules.cpu.full_percent"},
		{"session timer too long", "POST", "/api/v1/admin/delivery-groups", `{"name":"G","catalogs":[],"session_timers":{"max_session":"721h"}}`, 400, site.EInvalid, "longer than 30 days", "session_timers.max_session"},
		{"session timer not a duration", "POST", "/api/v1/admin/delivery-groups", `{"name":"G","catalogs":[],"session_timers":{"idle_disconnect":"15"}}`, 400, site.EInvalid, "not a duration", "session_timers.idle_disconnect"},
		{"wrong type in an embedded struct", "POST", "/api/v1/admin/users", `{"name":"u9","display_name":7}`, 400, site.EInvalid, `field "display_name" must be`, "display_name"},
		{"nested wrong type", "POST", "/api/v1/admin/delivery-groups", `{"name":"G","catalogs":[],"load_rules":{"cpu":{"full_percent":"most"}}}`, 400, site.EInvalid, "must be", "load_rules.cpu.full_percent"},
		{"empty command line", "POST", "/api/v1/admin/applications", map[string]any{"name": "x", "display_name": "X", "delivery_groups": []string{"Office Apps"}}, 400, site.EInvalid, "command_line is empty", "command_line"},
		{"text with a line break", "POST", "/api/v1/admin/groups", map[string]any{"name": "g2", "description": "a\nb"}, 400, site.EInvalid, "line break", "description"},
		{"duplicate across resource kinds", "POST", "/api/v1/admin/applications", map[string]any{"name": "Office Desktop", "display_name": "x", "command_line": "/bin/x", "delivery_groups": []string{"Office Apps"}}, 409, site.EConflict, "Office Desktop", "name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			version := f.configVersion()
			r := f.do(tc.method, tc.path, tc.body)
			f.want(r, tc.status, tc.code)
			if !strings.Contains(r.errorMessage(), tc.message) {
				t.Fatalf("message %q does not contain %q", r.errorMessage(), tc.message)
			}
			if got := r.errorField(); got != tc.field {
				t.Fatalf("error field %q, want %q; body %s", got, tc.field, r.body)
			}
			if v := f.configVersion(); v != version {
				t.Fatalf("a refused request moved the configuration version from %d to %d", version, v)
			}
		})
	}
}

func TestSessionsAndPasswords(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	err := f.store.Update(ctx, func(tx site.Tx) error {
		for i, u := range []string{"user0001", "user0002", "user0001"} {
			s := site.Session{ID: fmt.Sprintf("s%d", i), User: u, Resource: "Office Desktop", DeliveryGroup: "Office Apps",
				Machine: "office-vda-01", State: site.SessionActive, CreatedAt: now, UpdatedAt: now}
			if err := tx.Sessions().Create(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r := f.do("GET", "/api/v1/admin/sessions?user=user0001", nil)
	f.want(r, 200, "")
	var page api.ListResponse[site.Session]
	json.Unmarshal(r.body, &page)
	if page.Total != 2 || len(page.Items) != 2 {
		t.Fatalf("user0001 has %d sessions listed (total %d), want 2", len(page.Items), page.Total)
	}
	// By group: user0002's only, once user0002 is its only member.
	f.want(f.do("POST", "/api/v1/admin/groups", map[string]any{"name": "night-shift"}), 201, "")
	f.want(f.do("PUT", "/api/v1/admin/users/user0002", map[string]any{"groups": []string{"domain-users", "night-shift"}}), 200, "")
	r = f.do("GET", "/api/v1/admin/sessions?group=night-shift", nil)
	f.want(r, 200, "")
	page = api.ListResponse[site.Session]{}
	json.Unmarshal(r.body, &page)
	if page.Total != 1 || len(page.Items) != 1 || page.Items[0].ID != "s1" {
		t.Fatalf("the group's sessions: %s, want s1 only", r.body)
	}
	f.want(f.do("GET", "/api/v1/admin/sessions/s1", nil), 200, "")
	f.want(f.do("DELETE", "/api/v1/admin/sessions/s1", nil), 204, "")
	f.want(f.do("GET", "/api/v1/admin/sessions/s1", nil), 404, site.ENotFound)

	f.want(f.do("PUT", "/api/v1/admin/users/user0001/password", map[string]string{"password": "a new password"}), 204, "")
	var hash string
	f.store.View(ctx, func(tx site.Tx) error {
		u, err := tx.Users().Get(ctx, "user0001")
		hash = u.PasswordHash
		return err
	})
	if ok, _ := auth.VerifyPassword(hash, "a new password"); !ok {
		t.Fatal("the password set through the API does not verify")
	}
	// Replacing the user without a password keeps it.
	f.want(f.do("PUT", "/api/v1/admin/users/user0001", map[string]any{"display_name": "One", "groups": []string{"domain-users", "engineering"}}), 200, "")
	f.store.View(ctx, func(tx site.Tx) error {
		u, _ := tx.Users().Get(ctx, "user0001")
		if u.PasswordHash != hash {
			t.Error("PUT without a password dropped the password")
		}
		return nil
	})
}
