package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestAdminEnrolTokenAndRevokeCredential(t *testing.T) {
	data := t.TempDir()
	if code, out, stderr := run(t, "", "apply", "-f", filepath.Join("..", "..", "examples", "site.yaml"), "--data", data); code != 0 {
		t.Fatalf("apply: exit %d: %s%s", code, out, stderr)
	}
	code, out, stderr := run(t, "", "admin", "enrol-token", "assigned-vda-01", "--ttl", "1h", "--data", data)
	if code != 0 || !strings.HasPrefix(out, "usher-enrol-") || !strings.Contains(stderr, "--enrolment-token") {
		t.Fatalf("enrol-token: exit %d: %q %q", code, out, stderr)
	}
	if code, out, stderr := run(t, "", "admin", "revoke-credential", "assigned-vda-01", "--data", data); code != 0 || !strings.Contains(out, "revoked") {
		t.Fatalf("revoke-credential: exit %d: %s%s", code, out, stderr)
	}
	for _, args := range [][]string{
		{"admin", "enrol-token", "no-such-vda", "--data", data},
		{"admin", "revoke-credential", "no-such-vda", "--data", data},
		{"admin", "enrol-token", "--data", data},
	} {
		if code, _, _ := run(t, "", args...); code == 0 {
			t.Errorf("%s: exit 0", args)
		}
	}
}
