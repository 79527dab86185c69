package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/benchkit"
)

// TestREADME runs every shell block of README.md, in order, as a new user
// would after a clone: in a fresh directory holding the repository's
// files, with a fresh HOME (so the default data directory is new), and
// fails when a command fails. It keeps the README true to the code. The
// blocks run as in one terminal: a block's cd holds for the blocks after
// it. It fails too when the blocks changed the repository (git status),
// which they must leave as they found it: their files go in a directory
// of their own.
//
// An HTML comment just before a block steers it:
//
//	<!-- readme: skip REASON -->                  not run (said why); the rest of
//	                                              the comment is the reason
//	<!-- readme: background WAIT -->              started in the background; the
//	                                              next block runs once WAIT answers
//	                                              (an http:// URL or host:port)
//	<!-- readme: capture NAME REGEXP -->          (with background) sets $NAME for
//	                                              later blocks from the first
//	                                              submatch of the block's output
//
// Background commands get SIGTERM at the end (a service manager's stop) and must exit 0. The blocks'
// port 8080 is replaced by a free port, as CI machines may have 8080 taken,
// and usher serve gets --listen with it.
func TestREADME(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the README's commands (minutes)")
	}
	for _, tool := range []string{"bash", "curl", "jq", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (scripts/test installs it)", tool)
		}
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := readmeBlocks(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) < 5 {
		t.Fatalf("README has %d shell blocks", len(blocks))
	}

	// A clone: the repository's files, linked, in a directory of its own.
	work := t.TempDir()
	for _, name := range []string{"go.mod", "go.sum", "cmd", "internal", "examples", "scripts", "docs"} {
		if err := os.Symlink(filepath.Join(repo, name), filepath.Join(work, name)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	status := gitStatus(t, repo)
	t.Cleanup(func() {
		if after := gitStatus(t, repo); after != status {
			t.Errorf("the README's blocks changed the repository; git status --porcelain before:\n%s\nafter:\n%s", status, after)
		}
	})
	// cwd is the blocks' working directory, as a cd left it.
	cwd, cwdFile := work, filepath.Join(t.TempDir(), "cwd")
	port := freePort(t)
	// A new HOME, but the Go caches of this machine: the blocks build usher
	// as a user would, without downloading every module again.
	goenv, err := exec.Command("go", "env", "GOPATH", "GOMODCACHE", "GOCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	g := strings.Fields(string(goenv))
	env := append(os.Environ(), "HOME="+filepath.Join(work, "home"), "USHER_DATA=", "XDG_STATE_HOME=",
		"GOPATH="+g[0], "GOMODCACHE="+g[1], "GOCACHE="+g[2])
	vars := map[string]string{}

	var background []*bgProc
	defer func() {
		for _, p := range background {
			// The command itself, or what it runs: go run exits 1 when it
			// gets a signal, whatever its child does, so only the child
			// (the leaf of the process tree) is told to stop.
			syscall.Kill(leaf(p.cmd.Process.Pid), syscall.SIGTERM)
			select {
			case <-p.done:
				if p.err != nil {
					t.Errorf("README line %d (background) exited with %v:\n%s", p.line, p.err, tail(p.out.String(), 2000))
				}
			case <-time.After(30 * time.Second):
				syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
				<-p.done
				t.Errorf("README line %d (background) did not stop within 30s of SIGTERM", p.line)
			}
		}
	}()

	for _, b := range blocks {
		if b.skip != "" {
			t.Logf("README line %d: skipped: %s", b.line, b.skip)
			continue
		}
		script := strings.ReplaceAll(b.script, "127.0.0.1:8080", "127.0.0.1:"+port)
		script = strings.ReplaceAll(script, "localhost:8080", "127.0.0.1:"+port)
		script = strings.ReplaceAll(script, "usher serve ", "usher serve --listen 127.0.0.1:"+port+" ")
		cmdEnv := env
		for k, v := range vars {
			cmdEnv = append(cmdEnv, k+"="+v)
		}
		if b.background {
			p := &bgProc{line: b.line, out: &syncBuffer{}, done: make(chan struct{})}
			p.cmd = exec.Command("bash", "-euo", "pipefail", "-c", "exec "+strings.TrimSpace(script))
			p.cmd.Dir, p.cmd.Env, p.cmd.Stdout, p.cmd.Stderr = cwd, cmdEnv, p.out, p.out
			p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := p.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { p.err = p.cmd.Wait(); close(p.done) }()
			background = append(background, p)
			out := p.out
			wait := strings.ReplaceAll(b.wait, "8080", port)
			if err := waitReady(wait, p.done, 3*time.Minute); err != nil {
				t.Fatalf("README line %d: %v\n%s", b.line, err, tail(out.String(), 3000))
			}
			if b.capture != nil {
				var m []string
				for deadline := time.Now().Add(time.Minute); m == nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
					m = b.capture.re.FindStringSubmatch(out.String())
				}
				if m == nil {
					t.Fatalf("README line %d: no %q in the output:\n%s", b.line, b.capture.re, tail(out.String(), 3000))
				}
				vars[b.capture.name] = m[1]
			}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", `trap 'pwd >"$USHER_README_CWD"' EXIT`+"\n"+script)
		cmd.Dir, cmd.Env = cwd, append(cmdEnv, "USHER_README_CWD="+cwdFile)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("README line %d failed: %v\n%s\n--- output:\n%s", b.line, err, script, tail(string(out), 4000))
		}
		if d, err := os.ReadFile(cwdFile); err == nil && len(d) > 1 {
			cwd = strings.TrimSuffix(string(d), "\n")
		}
		t.Logf("README line %d: ok (%d bytes of output)", b.line, len(out))
	}
}

type readmeBlock struct {
	line       int
	script     string
	skip       string
	background bool
	wait       string
	capture    *struct {
		name string
		re   *regexp.Regexp
	}
}

var directive = regexp.MustCompile(`^<!-- readme: (.*) -->$`)

// readmeBlocks returns the README's ```sh blocks with their directives.
func readmeBlocks(readme string) ([]readmeBlock, error) {
	var blocks []readmeBlock
	var cur *readmeBlock
	pending := ""
	sc := bufio.NewScanner(strings.NewReader(readme))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.script += line + "\n"
		case strings.TrimSpace(line) == "```sh":
			cur = &readmeBlock{line: n + 1}
			if err := cur.parse(pending); err != nil {
				return nil, fmt.Errorf("README line %d: %w", n-1, err)
			}
			pending = ""
		case directive.MatchString(strings.TrimSpace(line)):
			pending = directive.FindStringSubmatch(strings.TrimSpace(line))[1]
		case strings.TrimSpace(line) != "":
			pending = ""
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("README line %d: unclosed block", cur.line)
	}
	return blocks, sc.Err()
}

func (b *readmeBlock) parse(d string) error {
	if d == "" {
		return nil
	}
	if reason, ok := strings.CutPrefix(d, "skip "); ok {
		b.skip = reason
		return nil
	}
	for _, part := range strings.Split(d, ";") {
		f := strings.Fields(strings.TrimSpace(part))
		switch {
		case len(f) == 2 && f[0] == "background":
			b.background, b.wait = true, f[1]
		case len(f) >= 3 && f[0] == "capture":
			re, err := regexp.Compile(strings.Trim(strings.Join(f[2:], " "), `"`))
			if err != nil {
				return err
			}
			b.capture = &struct {
				name string
				re   *regexp.Regexp
			}{f[1], re}
		default:
			return fmt.Errorf("unknown readme directive %q", part)
		}
	}
	return nil
}

// bgProc is a block running in the background.
type bgProc struct {
	line int
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{} // closed when cmd has exited, with err
	err  error
}

// waitReady waits until wait answers (an HTTP URL with 200, or a TCP
// address accepting), failing early if the command exits (exited closes).
func waitReady(wait string, exited <-chan struct{}, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("the background command exited before %s answered", wait)
		default:
		}
		if strings.HasPrefix(wait, "http") {
			if resp, err := http.Get(wait); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return nil
				}
			}
		} else if c, err := net.DialTimeout("tcp", wait, time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer within %s", wait, limit)
}

// leaf returns the deepest first descendant of process pid, or pid when it
// has no children. A Go program's children hang off whichever thread
// started them, so every thread's list is read.
func leaf(pid int) int {
	for {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		child := 0
		for _, t := range tasks {
			b, _ := os.ReadFile(t)
			if f := strings.Fields(string(b)); len(f) > 0 {
				child, _ = strconv.Atoi(f[0])
				break
			}
		}
		if child == 0 {
			return pid
		}
		pid = child
	}
}

// gitStatus is git status --porcelain of the repository at dir, or "" when
// it is no git checkout (a source tarball) or git is missing.
func gitStatus(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--untracked-files=all").Output()
	if err != nil {
		return ""
	}
	return string(out)
}

// freePort is benchkit.FreePort for a test, as a string.
func freePort(t *testing.T) string {
	t.Helper()
	port, err := benchkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(port)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
