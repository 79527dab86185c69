package server_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// TestPasswordCheckMetrics: /metrics counts the argon2id checks and the
// time they took; a second logon with the same password hits the cache
// and adds none.
func TestPasswordCheckMetrics(t *testing.T) {
	t.Parallel()
	s, err := server.Open(context.Background(), server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Demo: true,
		DemoPassword: testPassword, PasswordParams: sitetest.Cheap, SimVDAs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	metric := func(name string) float64 {
		t.Helper()
		_, body := get(t, s.URL()+"/metrics")
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("/metrics lacks %s", name)
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return v
	}
	checks0, secs0 := metric("usher_password_checks_total"), metric("usher_password_check_seconds_total")
	login(t, s, `DEMO\user0001`)
	login(t, s, `DEMO\user0001`)
	checks, secs := metric("usher_password_checks_total"), metric("usher_password_check_seconds_total")
	if checks-checks0 != 1 || secs <= secs0 {
		t.Errorf("two logons of one user: %v checks taking %vs, want 1 check taking some time", checks-checks0, secs-secs0)
	}
}
