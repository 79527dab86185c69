package main

import (
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/pgtest"
)

// TestAdminOutage: usher admin outage shows a broker's Local Host Cache,
// forces outage mode and ends it, through the running server's admin API;
// a server on the embedded site DB says it has none.
func TestAdminOutage(t *testing.T) {
	const pw = "demo-pass-outage"
	s := startServe(t, "--data", t.TempDir(), "--db", pgtest.DSN(t), "--demo", "--demo-password", pw)
	for _, step := range []struct{ verb, want, metric string }{
		{"status", "mode:          normal", "usher_lhc_outage 0"},
		{"force", "mode:          outage (forced)", "usher_lhc_outage_forced 1"},
		{"status", "cause:         forced by an admin", "usher_lhc_outages_total 1"},
		{"clear", "mode:          normal", "usher_lhc_outage 0"},
	} {
		code, out, stderr := run(t, pw+"\n", "admin", "outage", step.verb, "--server", s.url, "--password-stdin")
		if code != 0 || !strings.Contains(out, step.want) {
			t.Fatalf("admin outage %s: exit %d, want %q in:\n%s%s", step.verb, code, step.want, out, stderr)
		}
		if m := metrics(t, s.url); !strings.Contains(m, "\n"+step.metric+"\n") {
			t.Errorf("after admin outage %s, /metrics has no %q", step.verb, step.metric)
		}
	}
	if code, _, stderr := run(t, "wrong\n", "admin", "outage", "force", "--server", s.url, "--password-stdin"); code == 0 || !strings.Contains(stderr, "401") {
		t.Errorf("admin outage force with a wrong password: exit %d: %s", code, stderr)
	}
	if code, _, stderr := run(t, "", "admin", "outage", "sideways", "--server", s.url); code == 0 || !strings.Contains(stderr, "status, force or clear") {
		t.Errorf("admin outage sideways: exit %d: %s", code, stderr)
	}

	lite := startServe(t, "--data", t.TempDir(), "--demo", "--demo-password", pw)
	if code, _, stderr := run(t, pw+"\n", "admin", "outage", "status", "--server", lite.url, "--password-stdin"); code == 0 || !strings.Contains(stderr, "no Local Host Cache") {
		t.Errorf("admin outage status on the embedded site DB: exit %d: %s", code, stderr)
	}
}
