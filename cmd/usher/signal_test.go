package main

import (
	"bufio"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// usherProcess is this test binary running as usher in its own process.
type usherProcess struct {
	cmd    *exec.Cmd
	lines  chan string // standard output, a line at a time
	stderr *syncBuffer
}

// startUsher starts usher with args, and env added to this process's
// environment.
func startUsher(t *testing.T, env []string, args ...string) *usherProcess {
	t.Helper()
	cmd := exec.Command(testSelf[0], append(testSelf[1:], args...)...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &usherProcess{cmd: cmd, lines: make(chan string, 100), stderr: &syncBuffer{}}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	return p
}

// waitLine waits for a line of standard output that contains s.
func (p *usherProcess) waitLine(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("usher exited before printing %q: %s", s, p.stderr)
			}
			if strings.Contains(line, s) {
				return
			}
		case <-timeout:
			t.Fatalf("usher did not print %q in 60s: %s", s, p.stderr)
		}
	}
}

// exit waits for the process and returns its exit status.
func (p *usherProcess) exit(t *testing.T) int {
	t.Helper()
	for range p.lines { // drain, so that Wait can finish
	}
	err := p.cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.Exited():
		return ee.ExitCode()
	}
	t.Fatalf("usher did not exit by itself: %v", err)
	return -1
}

// TestSignals: Ctrl-C (SIGINT) stops a command with status 130, as a
// shell reports an interrupted program, and prints no "context
// canceled"; SIGTERM, a service manager's stop, is a clean shutdown:
// status 0.
func TestSignals(t *testing.T) {
	t.Run("SIGINT stops serve with 130", func(t *testing.T) {
		p := startUsher(t, nil, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir())
		p.waitLine(t, "Press Ctrl-C to stop.")
		p.cmd.Process.Signal(os.Interrupt)
		if code := p.exit(t); code != 130 {
			t.Fatalf("exit %d, want 130: %s", code, p.stderr)
		}
		if strings.Contains(p.stderr.String(), "context canceled") {
			t.Fatalf("stderr says context canceled:\n%s", p.stderr)
		}
	})
	t.Run("SIGTERM stops serve cleanly", func(t *testing.T) {
		p := startUsher(t, nil, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir())
		p.waitLine(t, "Press Ctrl-C to stop.")
		p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.exit(t); code != 0 {
			t.Fatalf("exit %d, want 0: %s", code, p.stderr)
		}
	})
	t.Run("SIGINT during a request prints no error", func(t *testing.T) {
		// A server that takes the request and never answers.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		p := startUsher(t, []string{"USHER_ADMIN_PASSWORD=not-asked"}, "admin", "unlock", "bob", "--server", "http://"+ln.Addr().String())
		conn, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		p.cmd.Process.Signal(os.Interrupt)
		if code := p.exit(t); code != 130 || p.stderr.String() != "" {
			t.Fatalf("exit %d, want 130 and nothing on stderr: %q", code, p.stderr)
		}
	})
}
