package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
)

// The browser tests' tools: Debian's chromium, node (the one on PATH, or
// the one $USHER_E2E_NODE names), and the npm packages of web/e2e
// (playwright-core, axe-core), which `npm ci` installs there.
const (
	chromiumPath = "/usr/bin/chromium"
	e2eDir       = "../../web/e2e"
	// e2eMinNode is the oldest Node.js that web/e2e's playwright-core
	// supports: 18, Debian 12's, which is why package.json pins
	// playwright-core 1.61.1, the last release whose engines say
	// node >=18 (1.62 needs 20).
	e2eMinNode      = 18
	e2eNodeEnv      = "USHER_E2E_NODE"
	e2eTimeout      = 5 * time.Minute
	e2eNpmTimeout   = 5 * time.Minute
	e2eDemoPassword = "demo-pass-1"
)

// TestPortalInBrowser walks a user through the portal of a demo site in
// Debian's chromium: web/e2e/portal.mjs (Playwright, axe-core) logs on,
// searches, launches, logs a session off and logs off, on a desktop and a
// phone screen, and saves a screenshot of every page. The tools missing,
// the test is skipped, except under CI=true, where it fails: CI must run
// it. scripts/test installs them.
func TestPortalInBrowser(t *testing.T) {
	e := newE2E(t)
	// The lock-out step fails as many logons as lock an account out.
	e.run(t, "portal.mjs", "LOCKOUT_THRESHOLD="+strconv.Itoa(auth.DefaultLockoutThreshold))
}

// e2e is a demo site for a browser test, and the tools to drive it.
type e2e struct {
	node  string // node's path
	dir   string // web/e2e, absolute
	shots string // where the scripts save screenshots
	site  *serveProc
}

// newE2E finds the browser tests' tools (skipping the test without them,
// failing it under CI=true) and starts the demo site the scripts expect:
// simulated VDAs, so that launches find a machine, all 57 of them
// registered (the pooled desktops too: no desktop host), and per-address
// throttling off, as every logon comes from 127.0.0.1.
func newE2E(t *testing.T) *e2e {
	t.Helper()
	dir, err := filepath.Abs(e2eDir)
	if err != nil {
		t.Fatal(err)
	}
	e := &e2e{node: e2eTools(t, dir), dir: dir, shots: os.Getenv("SCREENSHOT_DIR")}
	if e.shots == "" {
		e.shots = filepath.Join(os.TempDir(), "usher-e2e-screenshots")
	}
	t.Logf("screenshots: %s", e.shots)
	e.site = startServe(t, "--demo", "--demo-password", e2eDemoPassword, "--data", t.TempDir(),
		"--sim-vdas", "-1", "--sim-logon-delay", "50ms", "--heartbeat-interval", "200ms", "--source-free", "0", "--demo-desktop=false")
	waitFor(t, "57 registered machines", func() bool {
		return metricSum(metrics(t, e.site.url), "usher_machines", `state="registered"`) == 57
	})
	return e
}

// run runs script, one of web/e2e's, against the site with env added to
// its environment, its output in the test's log, and fails the test when
// it fails, or when the demo password shows in the site's logs.
func (e *e2e) run(t *testing.T, script string, env ...string) {
	t.Helper()
	err := runE2EScript(t, e.node, e.dir, script, append([]string{
		"BASE_URL=" + e.site.url,
		"DEMO_PASSWORD=" + e2eDemoPassword,
		"SCREENSHOT_DIR=" + e.shots,
	}, env...)...)
	if err != nil {
		t.Logf("usher serve's log (end):\n%s", tail(e.site.stderr.String(), 6000))
		t.Fatalf("%s failed (%v); screenshots in %s", script, err, e.shots)
	}
	if strings.Contains(e.site.stderr.String(), e2eDemoPassword) {
		t.Fatal("the password appears in the logs")
	}
}

// runE2EScript runs script, one of dir's (web/e2e), with node, env added
// to its environment (and CHROMIUM), its output in the test's log, within
// e2eTimeout.
func runE2EScript(t *testing.T, node, dir, script string, env ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "CHROMIUM="+chromiumPath), env...)
	// node and the browser it starts in a process group of their own, so
	// that a test that runs out of time leaves no chromium behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	err := runLogged(t, cmd)
	if ctx.Err() != nil {
		t.Errorf("%s did not finish within %s", script, e2eTimeout)
	}
	return err
}

// e2eTools returns node's path once node, chromium and web/e2e's npm
// packages are there, running `npm ci` in dir when its packages are
// missing or not the versions package.json pins, and npm is there.
// Otherwise it skips the test, or under CI=true fails it. node is
// $USHER_E2E_NODE when set (a path, or a name looked up on PATH), else
// the node on PATH.
func e2eTools(t *testing.T, dir string) string {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		e2eUnavailable(t, format, args...)
	}
	node, err := exec.LookPath("node")
	if env := os.Getenv(e2eNodeEnv); env != "" {
		if node, err = exec.LookPath(env); err != nil {
			unavailable("%s=%s: %v", e2eNodeEnv, env, err)
		}
	} else if err != nil {
		unavailable("node is not installed")
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		unavailable("node --version: %v", err)
	}
	version := strings.TrimSpace(string(out))
	major, _, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	if n, err := strconv.Atoi(major); err != nil || n < e2eMinNode {
		unavailable("node is %s; playwright-core needs %d or later", version, e2eMinNode)
	}
	t.Logf("node %s (%s)", version, node)
	if _, err := os.Stat(chromiumPath); err != nil {
		unavailable("chromium is not installed (%s)", chromiumPath)
	}
	if stale := e2eStale(dir); stale != "" {
		npm, err := exec.LookPath("npm")
		if err != nil {
			unavailable("%s/node_modules is missing, and npm is not installed to run npm ci", dir)
		}
		ctx, cancel := context.WithTimeout(context.Background(), e2eNpmTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		t.Logf("npm ci in %s: %s", dir, stale)
		if out, err := cmd.CombinedOutput(); err != nil {
			unavailable("npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	for _, p := range []string{"playwright-core/package.json", "axe-core/axe.min.js"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", p)); err != nil {
			unavailable("%s/node_modules lacks %s: run npm ci there", dir, p)
		}
	}
	return node
}

// e2eUnavailable skips the test for want of a tool, or under CI=true,
// where the browser tests must run, fails it.
func e2eUnavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s; CI=true, where the browser test must run (scripts/test installs what it needs)", msg)
	}
	t.Skipf("%s (scripts/test installs what the browser test needs)", msg)
}

// e2eStale returns why dir's node_modules must be installed again: a
// package of package.json's devDependencies missing, or at another
// version than the one pinned there (a checkout that moved to a new pin
// keeps the old node_modules); "" when none.
func e2eStale(dir string) string {
	var pkg struct {
		DevDependencies map[string]string `json:"devDependencies"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err == nil {
		err = json.Unmarshal(b, &pkg)
	}
	if err != nil {
		return fmt.Sprintf("package.json: %v", err)
	}
	for _, name := range slices.Sorted(maps.Keys(pkg.DevDependencies)) {
		want := pkg.DevDependencies[name]
		var got struct {
			Version string `json:"version"`
		}
		b, err := os.ReadFile(filepath.Join(dir, "node_modules", name, "package.json"))
		if err == nil {
			err = json.Unmarshal(b, &got)
		}
		if err != nil {
			return fmt.Sprintf("%s is not installed", name)
		}
		if got.Version != want {
			return fmt.Sprintf("node_modules has %s %s, package.json pins %s", name, got.Version, want)
		}
	}
	return ""
}

// runLogged runs cmd with its output, line by line, in the test's log.
func runLogged(t *testing.T, cmd *exec.Cmd) error {
	t.Helper()
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			t.Log(sc.Text())
		}
		io.Copy(io.Discard, r) // a line too long for the scanner
	}()
	err := cmd.Run()
	w.Close()
	<-done
	return err
}
