package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestAdminUnlock: usher serve --lockout-threshold 3 locks a user out after
// three wrong passwords; usher admin unlock clears the lock through the
// running server's admin API.
func TestAdminUnlock(t *testing.T) {
	const pw = "demo-pass-unlock"
	s := startServe(t, "--data", t.TempDir(), "--demo", "--demo-password", pw, "--lockout-threshold", "3", "--source-free", "0")
	logon := func(password string) int {
		t.Helper()
		resp, err := http.Post(s.url+"/api/v1/login", "application/json",
			strings.NewReader(`{"username":"user0001","password":"`+password+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for range 3 {
		if code := logon("wrong"); code != http.StatusUnauthorized {
			t.Fatalf("wrong password: %d (--source-free 0 must not throttle)", code)
		}
	}
	if code := logon(pw); code != http.StatusUnauthorized {
		t.Fatalf("right password after 3 failures: %d, want locked out", code)
	}
	if code, _, stderr := run(t, "wrong\n", "admin", "unlock", "--server", s.url, "--password-stdin", "user0001"); code == 0 || !strings.Contains(stderr, "401") || strings.Contains(stderr, "{") {
		t.Fatalf("unlock with a wrong admin password: exit %d: %s", code, stderr)
	}
	code, out, stderr := run(t, pw+"\n", "admin", "unlock", "--server", s.url, "--password-stdin", "user0001")
	if code != 0 || !strings.Contains(out, "lock-out cleared") {
		t.Fatalf("unlock: exit %d: %s%s", code, out, stderr)
	}
	if code := logon(pw); code != http.StatusOK {
		t.Fatalf("right password after unlock: %d", code)
	}
	if code, _, stderr := run(t, pw+"\n", "admin", "unlock", "--server", s.url, "--password-stdin", "user0001"); code == 0 || !strings.Contains(stderr, "404 Not Found: ") || !strings.Contains(stderr, "not locked out") || strings.Contains(stderr, "{") {
		t.Fatalf("unlock of an account that is not locked: exit %d: %s", code, stderr)
	}
}
