package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompletion: usher completion bash prints a script bash accepts and
// that completes commands, subcommands and flags; zsh's and fish's
// scripts are produced (and checked by those shells when installed).
func TestCompletion(t *testing.T) {
	dir := t.TempDir()
	script := func(shell string) string {
		t.Helper()
		code, out, stderr := run(t, "", "completion", shell)
		if code != 0 || stderr != "" || len(out) < 1000 {
			t.Fatalf("completion %s: exit %d, %d bytes: %s", shell, code, len(out), stderr)
		}
		p := filepath.Join(dir, "usher."+shell)
		if err := os.WriteFile(p, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("bash", func(t *testing.T) {
		bash, err := exec.LookPath("bash")
		if err != nil {
			t.Skip("no bash")
		}
		p := script("bash")
		if out, err := exec.Command(bash, "-n", p).CombinedOutput(); err != nil {
			t.Fatalf("bash -n: %v: %s", err, out)
		}
		for _, tc := range []struct{ line, want string }{
			{"usher se", "serve"},
			{"usher a", "apply admin"},
			{"usher serve --lis", "--listen"},
			{"usher serve --conf", "--config"},
			{"usher apply -", "--data --db --dry-run -f --prune -q"},
			{"usher admin unl", "unlock"},
			{"usher admin unlock bob --ser", "--server"},
			{"usher image import --st", "--store"},
			{"usher help ser", "serve"},
			{"usher frob --x", ""},
		} {
			words := strings.Fields(tc.line)
			if strings.HasSuffix(tc.line, " ") {
				words = append(words, "")
			}
			// COMP_WORDS as bash sets it, then the completion function.
			prog := `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _usher; echo "${COMPREPLY[*]}"`
			out, err := exec.Command(bash, append([]string{"-c", prog, "bash", p}, words...)...).CombinedOutput()
			if got := strings.TrimSpace(string(out)); err != nil || got != tc.want {
				t.Errorf("%q completes to %q (%v), want %q", tc.line, got, err, tc.want)
			}
		}
	})
	t.Run("zsh", func(t *testing.T) {
		p := script("zsh")
		zsh, err := exec.LookPath("zsh")
		if err != nil {
			t.Skip("no zsh to check the script with")
		}
		if out, err := exec.Command(zsh, "-n", p).CombinedOutput(); err != nil {
			t.Fatalf("zsh -n: %v: %s", err, out)
		}
	})
	t.Run("fish", func(t *testing.T) {
		p := script("fish")
		b, _ := os.ReadFile(p)
		if !strings.Contains(string(b), "complete -c usher -n '__usher_words serve' -l listen") {
			t.Errorf("fish script lacks serve's --listen:\n%.2000s", b)
		}
		fish, err := exec.LookPath("fish")
		if err != nil {
			t.Skip("no fish to check the script with")
		}
		if out, err := exec.Command(fish, "--no-execute", p).CombinedOutput(); err != nil {
			t.Fatalf("fish --no-execute: %v: %s", err, out)
		}
	})
	if code, _, stderr := run(t, "", "completion", "tcsh"); code != 2 || !strings.Contains(stderr, `completion "tcsh": want bash, zsh or fish`) {
		t.Errorf("completion tcsh: exit %d: %s", code, stderr)
	}
}
