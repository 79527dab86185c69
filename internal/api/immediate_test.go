package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/site"
)

func TestMethodNotAllowed(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		method, path, allow string
	}{
		{"GET", "/api/v1/login", "POST"},
		{"DELETE", "/api/v1/admin/site", "GET, HEAD"},
		{"POST", "/api/v1/admin/zones/z1", "GET, HEAD, PUT, DELETE"},
		{"GET", "/api/v1/admin/users/user0001/password", "PUT"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := f.do(tc.method, tc.path, nil)
			f.want(r, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed)
			if got := r.header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
			if !strings.Contains(r.errorMessage(), tc.path) {
				t.Errorf("message %q does not name the path", r.errorMessage())
			}
		})
	}
	t.Run("an unknown path is still 404", func(t *testing.T) {
		f.want(f.do("GET", "/api/v1/nothing-here", nil), http.StatusNotFound, site.ENotFound)
	})
}

// TestPasswordChangeTakesEffectAtOnce: the broker in the fixture never
// refreshes by itself, so only the API's refresh after the change can make
// the new password work, and no try with it counts towards lock-out.
func TestPasswordChangeTakesEffectAtOnce(t *testing.T) {
	f := newFixture(t)
	if _, r := f.login("user0001", userPassword); r.status != 200 {
		t.Fatalf("login with the old password: %d %s", r.status, r.body)
	}
	f.want(f.do("PUT", "/api/v1/admin/users/user0001/password", map[string]string{"password": "a brand new password"}), 204, "")
	for i := range 12 { // more than the lock-out threshold
		if _, r := f.login("user0001", "a brand new password"); r.status != 200 {
			t.Fatalf("login %d with the new password: %d %s", i, r.status, r.body)
		}
	}
	if _, r := f.login("user0001", userPassword); r.status != 401 {
		t.Fatalf("login with the old password after the change: %d, want 401", r.status)
	}
}

// TestLockedAnswersAsWrongPassword: a locked account's answer is a wrong
// password's, so that lock-out tells no one which names exist.
func TestLockedAnswersAsWrongPassword(t *testing.T) {
	f := newFixture(t)
	for range 10 {
		f.login("user0002", "wrong password")
	}
	_, locked := f.login("user0002", userPassword)
	_, unknown := f.login("nobody", userPassword)
	for _, r := range []response{locked, unknown} {
		f.want(r, http.StatusUnauthorized, site.EUnauthorized)
	}
	if string(locked.body) != string(unknown.body) {
		t.Fatalf("locked answer %s differs from unknown answer %s", locked.body, unknown.body)
	}
}
