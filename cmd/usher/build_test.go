package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// staticBuilds is held through each static build of usher in the
// package's tests (scripts/build here, the boot agent in
// TestNetBootDeviceCache): both compile every package with
// CGO_ENABLED=0 and -trimpath, so that whichever comes second finds them
// in the go command's build cache and only links, where two at once would
// each compile them all.
var staticBuilds sync.Mutex

// TestBuildScript: scripts/build makes a static (CGO_ENABLED=0),
// -trimpath binary whose usher version prints the version it was given
// (-ldflags -X main.version), and refuses a version that is not a semver.
func TestBuildScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds usher (-short)")
	}
	// A build of its own, which waits for nothing the other tests do:
	// beside them rather than before the boot tests.
	t.Parallel()
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "build"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "usher")

	bad := exec.Command(script, "-o", bin)
	bad.Env = append(bad.Environ(), "VERSION=1.2")
	if out, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(out), "version '1.2' is not a semver") {
		t.Errorf("VERSION=1.2: %v: %s", err, out)
	}

	build := exec.Command(script, "-o", bin)
	build.Env = append(build.Environ(), "VERSION=v9.8.7-test")
	staticBuilds.Lock()
	out, err := build.CombinedOutput()
	staticBuilds.Unlock()
	if err != nil {
		t.Fatalf("scripts/build: %v: %s", err, out)
	}
	out, err = exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "usher v9.8.7-test ") && !strings.HasPrefix(string(out), "usher v9.8.7-test, ") {
		t.Fatalf("usher version: %v: %q, want usher v9.8.7-test ...", err, out)
	}
	info, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v: %s", err, info)
	}
	for _, want := range []string{"build\tCGO_ENABLED=0\n", "build\t-trimpath=true\n"} {
		if !strings.Contains(string(info), want) {
			t.Errorf("the binary was not built with %q:\n%s", want, info)
		}
	}
}
