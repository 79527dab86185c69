package main

import (
	"os"
	"os/exec"
	"regexp"
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

// startUsherProc starts usher with args, and env added to this process's
// environment; the test's end kills it if it still runs.
func startUsherProc(t *testing.T, env []string, args ...string) *usherProc {
	t.Helper()
	p := &usherProc{stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(testSelf[0], append(append([]string{}, testSelf[1:]...), args...)...)
	p.cmd.Env = append(os.Environ(), env...)
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
	deadline := time.After(2 * time.Minute)
	for {
		changed := p.stdout.changed()
		if m := re.FindStringSubmatch(p.stdout.String()); m != nil {
			return m
		}
		select {
		case <-changed:
		case <-p.done:
			if m := re.FindStringSubmatch(p.stdout.String()); m != nil {
				return m
			}
			t.Fatalf("usher exited before printing %q:\n%s\n%s", re, p.stdout, p.stderr)
		case <-deadline:
			t.Fatalf("no %q within 2 minutes:\n%s\n%s", re, p.stdout, p.stderr)
		}
	}
}

// waitLine waits for standard output to contain s.
func (p *usherProc) waitLine(t *testing.T, s string) {
	t.Helper()
	p.waitOutput(t, regexp.MustCompile(regexp.QuoteMeta(s)))
}

// exit waits for the process to end by itself and returns its exit
// status.
func (p *usherProc) exit(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("usher did not exit within 30s")
	}
	code := p.cmd.ProcessState.ExitCode()
	if code < 0 {
		t.Fatalf("usher did not exit by itself: %v", p.cmd.ProcessState)
	}
	return code
}

// interrupt sends SIGINT, as Ctrl-C does, and waits for the process to
// end.
func (p *usherProc) interrupt(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("usher did not stop within 30s of SIGINT")
	}
}
