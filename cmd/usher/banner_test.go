package main

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// usherProc is usher (this test binary run as usher) in a process of its
// own, so that it gets real signals and its output is the program's.
type usherProc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{} // closed when cmd has exited
}

func startUsherProc(t *testing.T, args ...string) *usherProc {
	t.Helper()
	p := &usherProc{stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(testSelf[0], append(append([]string{}, testSelf[1:]...), args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// waitOutput waits until stdout matches re and returns the match.
func (p *usherProc) waitOutput(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if m := re.FindStringSubmatch(p.stdout.String()); m != nil {
			return m
		}
		select {
		case <-p.done:
			t.Fatalf("usher exited before printing %q:\n%s\n%s", re, p.stdout.String(), p.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q within 2 minutes:\n%s\n%s", re, p.stdout.String(), p.stderr.String())
		}
	}
}

func (p *usherProc) interrupt(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("usher did not stop within 30s of SIGINT")
	}
}

var totalRE = regexp.MustCompile(`"total": ?400\b`)

// runTry runs the banner's Try: line in bash, as a user who pastes it.
func runTry(t *testing.T, line string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", strings.Replace(line, "curl ", "curl -sf ", 1))
	cmd.Env = append(cmd.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the banner's Try line %q failed: %v\n%s", line, err, out)
	}
	return string(out)
}

// TestDemoBannerAcrossRestarts starts the demo as a user does, twice on
// one data directory. The first start prints the password, and its Try
// line works when pasted into a shell; the restart prints no password
// (the site keeps only hashes), so it says how to set one, its Try line
// works once $PASSWORD is set, and its log counts the machines of the
// first run in one line instead of warning of each.
func TestDemoBannerAcrossRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the demo site twice")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	data := t.TempDir()
	try := regexp.MustCompile(`(?m)^Try: (.*)$`)
	args := []string{"serve", "--demo", "--sim-vdas", "-1", "--listen", "127.0.0.1:0", "--data", data}

	first := startUsherProc(t, args...)
	password := first.waitOutput(t, regexp.MustCompile(`password for all of them: (\S+)\)`))[1]
	line := first.waitOutput(t, try)[1]
	first.waitOutput(t, regexp.MustCompile(`Press Ctrl-C`))
	if !regexp.MustCompile(`'http://[^' ]+\?limit=5'$`).MatchString(line) {
		t.Errorf("the Try URL is not quoted for a shell: %s", line)
	}
	if out := runTry(t, line); !totalRE.MatchString(out) {
		t.Errorf("Try line %q answered %.300s", line, out)
	}
	first.interrupt(t)

	second := startUsherProc(t, args...)
	line = second.waitOutput(t, try)[1]
	second.waitOutput(t, regexp.MustCompile(`Press Ctrl-C`))
	out := second.stdout.String()
	if strings.Contains(out, password) {
		t.Fatalf("the restart printed a password:\n%s", out)
	}
	if !strings.Contains(out, "usher serve --demo --demo-password 'NEW PASSWORD'") {
		t.Errorf("the restart's banner does not say how to set a password:\n%s", out)
	}
	if got := runTry(t, line, "PASSWORD="+password); !totalRE.MatchString(got) {
		t.Errorf("Try line %q with $PASSWORD answered %.300s", line, got)
	}
	second.interrupt(t)
	logs := second.stderr.String()
	if n := strings.Count(logs, "missed its heartbeats"); n != 0 {
		t.Errorf("the restart warned %d times of machines missing heartbeats:\n%s", n, logs)
	}
	if !strings.Contains(logs, "machines registered before this broker started are unregistered until they heartbeat to it") ||
		!strings.Contains(logs, "machines=57") {
		t.Errorf("the restart's log does not count the first run's 57 machines in one line:\n%s", logs)
	}
}

// TestEmptySiteBanner: a site with no zones yet is not "of zone \"\"".
func TestEmptySiteBanner(t *testing.T) {
	s := startServe(t, "--data", t.TempDir())
	out := s.stdout.String()
	if strings.Contains(out, `zone ""`) || !strings.Contains(out, "the site has no zones yet") {
		t.Errorf("empty site's banner:\n%s", out)
	}
}
