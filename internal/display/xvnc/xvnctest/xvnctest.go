// Package xvnctest holds what tests that run a real Xvnc share. Only
// tests import it.
package xvnctest

import (
	"os"
	"os/exec"
	"testing"
)

// Need skips tb when Xvnc or xsetroot (which the tests' desktops paint
// with) is missing, and fails it instead under CI=true.
func Need(tb testing.TB) {
	tb.Helper()
	for _, prog := range []string{"Xvnc", "xsetroot"} {
		if _, err := exec.LookPath(prog); err != nil {
			if os.Getenv("CI") == "true" {
				tb.Fatalf("%s is not installed (apt-get install tigervnc-standalone-server x11-xserver-utils)", prog)
			}
			tb.Skipf("%s is not installed (apt-get install tigervnc-standalone-server x11-xserver-utils)", prog)
		}
	}
}
