package main

import (
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestSignals: Ctrl-C (SIGINT) stops a command with status 130, as a
// shell reports an interrupted program, and prints no "context
// canceled"; SIGTERM, a service manager's stop, is a clean shutdown:
// status 0.
func TestSignals(t *testing.T) {
	t.Run("SIGINT stops serve with 130", func(t *testing.T) {
		p := startUsherProc(t, nil, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir())
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
		p := startUsherProc(t, nil, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir())
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
		p := startUsherProc(t, []string{"USHER_ADMIN_PASSWORD=not-asked"}, "admin", "unlock", "bob", "--server", "http://"+ln.Addr().String())
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
