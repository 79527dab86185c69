// Package scripts holds the tests of the repository's shell scripts
// (scripts/test, scripts/check-debian12); it has no code of its own.
package scripts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestGoVersionCheck runs scripts/test with a fake Go (its GOROOT) that
// is older than go.mod's go line, or none, and wants the one line that
// says so, before scripts/test installs or runs anything. A fake dpkg on
// PATH says every package is installed, so that a scripts/test whose
// check is gone installs nothing either (and fails later, at the fake
// Go's go mod download).
func TestGoVersionCheck(t *testing.T) {
	need := goModVersion(t)
	for _, tc := range []struct {
		name string
		// goScript is the fake go's body; "" means there is no go.
		goScript string
		want     string
	}{
		{
			name:     "Debian 12's golang-go",
			goScript: fakeGo("go1.19.8"),
			want:     "scripts/test: Go 1.19.8 is too old: usher needs Go " + need + " or later (https://go.dev/dl/)",
		},
		{
			name:     "one release older than go.mod",
			goScript: fakeGo("go" + older(t, need)),
			want:     "scripts/test: Go " + older(t, need) + " is too old: usher needs Go " + need + " or later (https://go.dev/dl/)",
		},
		{
			// Go 1.21 and later with GOTOOLCHAIN=local refuse even go
			// env inside a module that needs a newer Go.
			name: "a Go that refuses the module",
			goScript: `if [ "$PWD" != / ]; then echo "go: go.mod requires go >= ` + need + ` (running go 1.22.0; GOTOOLCHAIN=local)" >&2; exit 1; fi
` + fakeGo("go1.22.0"),
			want: "scripts/test: Go 1.22.0 is too old: usher needs Go " + need + " or later (https://go.dev/dl/)",
		},
		{
			name: "no Go",
			want: "scripts/test: Go is not installed (https://go.dev/dl/)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			goroot := filepath.Join(tmp, "goroot")
			bin := filepath.Join(tmp, "bin")
			writeScript(t, filepath.Join(bin, "dpkg"), "exit 0\n")
			if tc.goScript != "" {
				writeScript(t, filepath.Join(goroot, "bin", "go"), tc.goScript)
			}
			path := bin + ":/usr/bin:/bin"
			if tc.goScript == "" {
				for _, d := range filepath.SplitList(path) {
					if _, err := os.Stat(filepath.Join(d, "go")); err == nil {
						t.Skipf("%s/go is installed: no PATH without a go to try", d)
					}
				}
			}
			cmd := exec.Command("bash", "test")
			cmd.Env = []string{"PATH=" + path, "GOROOT=" + goroot, "HOME=" + tmp, "LANG=C"}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if code := cmd.ProcessState.ExitCode(); code != 1 {
				t.Errorf("exit code %d (%v), want 1", code, err)
			}
			if got := strings.TrimSpace(stderr.String()); got != tc.want {
				t.Errorf("stderr:\n%s\nwant:\n%s", got, tc.want)
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout %q, want nothing: scripts/test went on", stdout.String())
			}
		})
	}
}

// fakeGo is a go that answers `go env GOVERSION` with version and fails
// everything else.
func fakeGo(version string) string {
	return `if [ "$*" = "env GOVERSION" ]; then echo ` + version + `; exit 0; fi
echo "fake go: $*" >&2
exit 2
`
}

func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

// goModVersion returns the version in go.mod's go line.
func goModVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "go" {
			return f[1]
		}
	}
	t.Fatal("go.mod has no go line")
	return ""
}

// older returns a Go version just below v (1.26.8: 1.26.7; 1.26.0 or
// 1.26: 1.25.99).
func older(t *testing.T, v string) string {
	t.Helper()
	parts := strings.Split(v, ".")
	if len(parts) < 2 {
		t.Fatalf("go.mod's go %q is not major.minor[.patch]", v)
	}
	if len(parts) == 3 && parts[2] != "0" {
		n, err := strconv.Atoi(parts[2])
		if err != nil {
			t.Fatal(err)
		}
		return parts[0] + "." + parts[1] + "." + strconv.Itoa(n-1)
	}
	minor, err := strconv.Atoi(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	return parts[0] + "." + strconv.Itoa(minor-1) + ".99"
}
