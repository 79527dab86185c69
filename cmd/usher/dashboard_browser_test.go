package main

import "testing"

// TestDashboardInBrowser watches the console's live dashboard of a demo
// site in Debian's chromium: web/e2e/dashboard.mjs (Playwright, axe-core)
// logs the admin on and checks that the figures come pushed over one
// EventSource (server-sent events from GET /api/v1/admin/dashboard/events)
// and that nothing polls /metrics; that the per-zone table is hidden while
// the demo site has its one zone, and shows both once the script adds a
// second zone with a machine through the admin API; that a launch through
// the REST API moves the sessions and the launch rate without a reload;
// and that when the admin's session ends (a new password) the dashboard
// says it is reconnecting, then the log-on takes over. It saves a
// screenshot of each state (dashboard-*.png). Like TestConsoleInBrowser,
// it is skipped without the tools, except under CI=true, where it fails.
func TestDashboardInBrowser(t *testing.T) {
	newE2E(t).run(t, "dashboard.mjs")
}
