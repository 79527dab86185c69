package main

import "testing"

// TestConsoleInBrowser walks an admin through the console (/console) of a
// demo site in Debian's chromium: web/e2e/console.mjs (Playwright,
// axe-core) has a user refused, logs the admin on, watches launches reach
// the dashboard, filters and sorts the machines, puts a machine in
// maintenance and checks that launches avoid it, finds, disconnects and
// logs off sessions, and logs off, saving a screenshot of every page
// (console-*.png). Like TestPortalInBrowser, it is skipped without the
// tools, except under CI=true.
func TestConsoleInBrowser(t *testing.T) {
	newE2E(t).run(t, "console.mjs")
}
