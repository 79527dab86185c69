package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestApplyPrune: an apply that would delete objects refuses without
// --prune, naming how many of each kind, and changes nothing; with
// --prune it deletes them. A dry run shows the deletions either way.
func TestApplyPrune(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	write := func(name, yaml string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const zone = "zones:\n  - name: primary\n    primary: true\n"
	full := write("full.yaml", zone+`catalogs:
  - {name: c1, kind: multi-session, zone: primary}
  - {name: c2, kind: multi-session, zone: primary}
machines:
  - {name: m1, catalog: c1, address: "m1:3389"}
  - {name: m2, catalog: c1, address: "m2:3389"}
  - {name: m3, catalog: c2, address: "m3:3389"}
`)
	less := write("less.yaml", zone+`catalogs:
  - {name: c2, kind: multi-session, zone: primary}
machines:
  - {name: m3, catalog: c2, address: "m3:3389", max_sessions: 5}
`)
	if code, out, stderr := run(t, "", "apply", "-f", full, "--data", data); code != 0 {
		t.Fatalf("apply %s: exit %d: %s%s", full, code, out, stderr)
	}
	export := func() string {
		t.Helper()
		code, out, stderr := run(t, "", "export", "--data", data)
		if code != 0 {
			t.Fatalf("export: exit %d: %s", code, stderr)
		}
		return out
	}
	before := export()

	t.Run("refused without --prune", func(t *testing.T) {
		code, out, stderr := run(t, "", "apply", "-f", less, "--data", data)
		want := "usher apply: " + less + " would delete 1 catalog, 2 machines (nothing was changed): run again with --prune, or --dry-run to see them\n"
		if code != 1 || out != "" || !strings.HasSuffix(stderr, want) {
			t.Fatalf("exit %d, stdout %q\nstderr %q\nwant   %q", code, out, stderr, want)
		}
		if after := export(); after != before {
			t.Fatalf("a refused apply changed the site:\n%s", after)
		}
	})
	t.Run("a dry run shows the deletions", func(t *testing.T) {
		code, out, stderr := run(t, "", "apply", "-f", less, "--data", data, "--dry-run")
		if code != 0 || !strings.Contains(out, `- machine "m1"`) || !strings.Contains(out, `- catalog "c1"`) ||
			!strings.Contains(out, "dry run: would create 0, update 1, delete 3 objects") {
			t.Fatalf("exit %d: %s%s", code, out, stderr)
		}
	})
	t.Run("applied with --prune", func(t *testing.T) {
		code, out, stderr := run(t, "", "apply", "-f", less, "--data", data, "--prune", "-q")
		if code != 0 || !strings.Contains(out, "created 0, updated 1, deleted 3 objects") {
			t.Fatalf("exit %d: %s%s", code, out, stderr)
		}
		after := export()
		if strings.Contains(after, "m1") || strings.Contains(after, "c1") || !strings.Contains(after, "max_sessions: 5") {
			t.Fatalf("the site after --prune:\n%s", after)
		}
	})
	t.Run("an apply that deletes nothing needs no --prune", func(t *testing.T) {
		if code, out, stderr := run(t, "", "apply", "-f", full, "--data", data, "-q"); code != 0 || !strings.Contains(out, "created 3") {
			t.Fatalf("exit %d: %s%s", code, out, stderr)
		}
	})
	before = export()
	// On a terminal the apply asks instead of refusing outright.
	onTerminal := func(t *testing.T, answer string) (int, string, string) {
		t.Helper()
		tty := openTerminal(t)
		if _, err := tty.master.WriteString(answer + "\n"); err != nil {
			t.Fatal(err)
		}
		var out, errb syncBuffer
		m := &Main{Stdin: tty.slave, Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }, Self: testSelf}
		code := m.Run(context.Background(), []string{"apply", "-f", less, "--data", data, "-q"})
		return code, out.String(), errb.String()
	}
	question := less + " would delete 1 catalog, 2 machines; delete them? [y/N] "
	t.Run("a terminal that answers no keeps everything", func(t *testing.T) {
		code, out, stderr := onTerminal(t, "n")
		if code != 1 || out != "" || !strings.Contains(stderr, question+"usher apply: "+less+" would delete 1 catalog, 2 machines (nothing was changed)") {
			t.Fatalf("exit %d, stdout %q, stderr %q; want the question %q, then the refusal", code, out, stderr, question)
		}
		if after := export(); after != before {
			t.Fatalf("an apply refused on the terminal changed the site:\n%s", after)
		}
	})
	t.Run("a terminal that answers yes deletes", func(t *testing.T) {
		code, out, stderr := onTerminal(t, "yes")
		if code != 0 || !strings.HasSuffix(stderr, "\n"+question) || !strings.Contains(out, "deleted 3 objects") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
		}
		if after := export(); strings.Contains(after, "m1") || strings.Contains(after, "c1") {
			t.Fatalf("the site after a yes:\n%s", after)
		}
	})
}

// terminal is a pseudo-terminal: what is written to master is read, a
// line at a time, from slave, a character device as a user's terminal is.
type terminal struct{ master, slave *os.File }

func openTerminal(t *testing.T) terminal {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open a pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("the pseudo-terminal's number: %v", err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open the pseudo-terminal's slave: %v", err)
	}
	t.Cleanup(func() { slave.Close() })
	return terminal{master, slave}
}
