// Package dirservertest is internal/dirserver for tests: it starts a
// directory that is closed when the test ends, skipping the test when
// slapd or Samba is not installed (failing it instead with CI=true in the
// environment), wraps the servers' controls so that an error fails the
// test, and gives a Recorder, a listener that keeps what a client sends
// to a "directory server" and never answers.
//
// Only tests import this package; the benches use internal/dirserver
// itself.
package dirservertest

import (
	"context"
	"errors"
	"os"

	"github.com/usher-vdi/usher/internal/dirserver"
)

// TB is the part of testing.TB that the package uses; a *testing.T, a
// *testing.B or any testing.TB is one.
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skip(args ...any)
	Cleanup(func())
}

// Start starts opts.Servers slapd servers with the same data
// (dirserver.Launch) and stops them when tb ends (Close). It skips tb
// (fails it with CI=true) when slapd or its tools are missing.
func Start(tb TB, opts dirserver.Options) *dirserver.Directory {
	tb.Helper()
	return start(tb, dirserver.Launch, opts)
}

// StartSamba provisions a Samba Active Directory domain controller
// (dirserver.LaunchSamba) and stops it when tb ends. It skips tb when
// Samba is not installed (under CI=true it fails instead), and when
// 127.0.0.1:389 or :636 is taken (a system directory, or another test's
// Samba).
func StartSamba(tb TB, opts dirserver.Options) *dirserver.Directory {
	tb.Helper()
	return start(tb, dirserver.LaunchSamba, opts)
}

// start launches a directory for tb and closes it when tb ends. It skips
// tb when the directory's programs are missing (fails it with CI=true),
// or when its ports are taken (ErrPortsTaken: even under CI, another
// server holds them).
func start(tb TB, launch func(dirserver.Options) (*dirserver.Directory, error), opts dirserver.Options) *dirserver.Directory {
	tb.Helper()
	d, err := launch(opts)
	switch {
	case errors.Is(err, dirserver.ErrPortsTaken):
		tb.Skip(err)
	case errors.Is(err, dirserver.ErrNotInstalled) && os.Getenv("CI") == "true":
		tb.Fatal(err)
	case errors.Is(err, dirserver.ErrNotInstalled):
		tb.Skip(err)
	case err != nil:
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() { d.Close() })
	return d
}

// StartServer starts s again after Stop or Kill, failing tb when it
// does not start.
func StartServer(tb TB, s *dirserver.Server) {
	tb.Helper()
	if err := s.Start(); err != nil {
		tb.Fatalf("%v", err)
	}
}

// Stop stops s (SIGTERM), failing tb on an error.
func Stop(tb TB, s *dirserver.Server) {
	tb.Helper()
	if err := s.Stop(); err != nil {
		tb.Fatalf("%v", err)
	}
}

// Kill kills s (SIGKILL), failing tb on an error.
func Kill(tb TB, s *dirserver.Server) {
	tb.Helper()
	if err := s.Kill(); err != nil {
		tb.Fatalf("%v", err)
	}
}

// Pause pauses s (SIGSTOP: a hung server), failing tb when it is not
// running.
func Pause(tb TB, s *dirserver.Server) {
	tb.Helper()
	if err := s.Pause(); err != nil {
		tb.Fatalf("%v", err)
	}
}

// Resume continues a paused s (SIGCONT), failing tb when it is not
// running.
func Resume(tb TB, s *dirserver.Server) {
	tb.Helper()
	if err := s.Resume(); err != nil {
		tb.Fatalf("%v", err)
	}
}

// Connections returns s's open and accepted connection counts
// (Server.Connections), failing tb when cn=Monitor does not say.
func Connections(tb TB, s *dirserver.Server) (current, total int) {
	tb.Helper()
	current, total, err := s.Connections(context.Background())
	if err != nil {
		tb.Fatalf("%v", err)
	}
	return current, total
}

// Modify applies an LDIF of changes to s as its root DN
// (Server.Modify), failing tb when ldapmodify fails.
func Modify(tb TB, s *dirserver.Server, ldif string) {
	tb.Helper()
	if err := s.Modify(context.Background(), ldif); err != nil {
		tb.Fatalf("%v", err)
	}
}
