package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/datadir"
)

func TestApplyNamesSiteDB(t *testing.T) {
	example := filepath.Join("..", "..", "examples", "site.yaml")

	t.Run("a dry run creates nothing", func(t *testing.T) {
		data := filepath.Join(t.TempDir(), "data")
		code, out, stderr := run(t, "", "apply", "-f", example, "--data", data, "--dry-run", "-q")
		if code != 0 || !strings.Contains(out, "dry run: would create") {
			t.Fatalf("dry run: exit %d\n%s%s", code, out, stderr)
		}
		db := filepath.Join(data, datadir.SiteDBFile)
		if want := "site DB: " + db + " does not exist; comparing with an empty site"; !strings.Contains(stderr, want) {
			t.Errorf("stderr %q lacks %q", stderr, want)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Fatalf("the dry run created %s: %v", data, err)
		}
	})
	t.Run("apply creates one and says so, then names it", func(t *testing.T) {
		data := t.TempDir()
		db := filepath.Join(data, datadir.SiteDBFile)
		code, _, stderr := run(t, "", "apply", "-f", example, "--data", data, "-q")
		if code != 0 || !strings.Contains(stderr, "site DB: "+db+" (new: there was none)") {
			t.Fatalf("apply: exit %d, stderr %q", code, stderr)
		}
		for _, args := range [][]string{
			{"apply", "-f", example, "--dry-run"},
			{"apply", "-f", example},
			{"export"},
			{"admin", "list"},
		} {
			code, _, stderr := run(t, "", append(args, "--data", data)...)
			if code != 0 || strings.Count(stderr, "site DB: ") != 1 || !strings.Contains(stderr, "site DB: "+db+"\n") {
				t.Errorf("%s: exit %d, stderr %q; want one line naming %s", args, code, stderr, db)
			}
		}
	})
	t.Run("export and admin need an existing one", func(t *testing.T) {
		data := filepath.Join(t.TempDir(), "elsewhere")
		db := filepath.Join(data, datadir.SiteDBFile)
		for _, args := range [][]string{
			{"export"},
			{"admin", "list"},
			{"admin", "remove", "ops"},
			{"admin", "reset-password", "ops"},
		} {
			code, _, stderr := run(t, "", append(args, "--data", data)...)
			if code != 1 || !strings.Contains(stderr, "no site DB at "+db) || !strings.Contains(stderr, "usher serve --data "+data) {
				t.Errorf("%s: exit %d, stderr %q", args, code, stderr)
			}
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Fatalf("a refused command created %s: %v", data, err)
		}
	})
}

func TestAdminCommands(t *testing.T) {
	data := t.TempDir()
	admin := func(stdin string, args ...string) (int, string, string) {
		t.Helper()
		return run(t, stdin, append(append([]string{"admin"}, args...), "--data", data)...)
	}
	if code, out, stderr := admin("first-password\n", "add", "ops", "--password-stdin"); code != 0 || !strings.Contains(out, `admin "ops" added`) {
		t.Fatalf("add ops: exit %d: %s%s", code, out, stderr)
	}
	code, out, stderr := admin("", "add", "audit")
	if code != 0 || !strings.HasPrefix(out, `admin "audit" added: `) {
		t.Fatalf("add audit: exit %d: %s%s", code, out, stderr)
	}
	auditPassword := strings.TrimSpace(strings.TrimPrefix(out, `admin "audit" added: `))

	t.Run("list", func(t *testing.T) {
		code, out, stderr := admin("", "list")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[1], "audit ") || !strings.HasPrefix(lines[2], "ops ") {
			t.Fatalf("exit %d:\n%s%s", code, out, stderr)
		}
	})
	t.Run("reset-password", func(t *testing.T) {
		if code, out, stderr := admin("second-password\n", "reset-password", "ops", "--password-stdin"); code != 0 || !strings.Contains(out, `admin "ops" has a new password`) {
			t.Fatalf("exit %d: %s%s", code, out, stderr)
		}
		if code, _, stderr := admin("", "reset-password", "nobody"); code != 1 || !strings.Contains(stderr, `admin "nobody" not found`) {
			t.Fatalf("unknown admin: exit %d: %s", code, stderr)
		}
		if code, _, stderr := admin("short\n", "reset-password", "ops", "--password-stdin"); code != 1 || !strings.Contains(stderr, "shorter than 8") {
			t.Fatalf("short password: exit %d: %s", code, stderr)
		}
	})
	t.Run("the new passwords work", func(t *testing.T) {
		s := startServe(t, "--data", data)
		if code, _ := get(t, s.url+"/api/v1/admin/site", "ops", "second-password"); code != 200 {
			t.Errorf("ops with the new password: %d", code)
		}
		if code, _ := get(t, s.url+"/api/v1/admin/site", "ops", "first-password"); code != 401 {
			t.Errorf("ops with the old password: %d, want 401", code)
		}
		if code, _ := get(t, s.url+"/api/v1/admin/site", "audit", auditPassword); code != 200 {
			t.Errorf("audit with the generated password: %d", code)
		}
	})
	t.Run("remove, not the last one unless forced", func(t *testing.T) {
		if code, out, stderr := admin("", "remove", "audit"); code != 0 || !strings.Contains(out, `admin "audit" removed`) {
			t.Fatalf("remove audit: exit %d: %s%s", code, out, stderr)
		}
		if code, _, stderr := admin("", "remove", "audit"); code != 1 || !strings.Contains(stderr, "not found") {
			t.Fatalf("remove audit again: exit %d: %s", code, stderr)
		}
		if code, _, stderr := admin("", "remove", "ops"); code != 1 || !strings.Contains(stderr, "last admin account") || !strings.Contains(stderr, "--force") {
			t.Fatalf("remove the last: exit %d: %s", code, stderr)
		}
		if code, out, _ := admin("", "list"); code != 0 || !strings.Contains(out, "ops") {
			t.Fatalf("a refused remove removed ops: %s", out)
		}
		if code, out, stderr := admin("", "remove", "ops", "--force"); code != 0 || !strings.Contains(out, `admin "ops" removed`) || !strings.Contains(stderr, "no admin accounts are left") {
			t.Fatalf("forced remove: exit %d: %s%s", code, out, stderr)
		}
		if code, out, stderr := admin("", "list"); code != 0 || out != "" || !strings.Contains(stderr, "no admin accounts") {
			t.Fatalf("list of none: exit %d: %q %q", code, out, stderr)
		}
	})
	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{{"admin", "-h"}, {"admin", "help"}, {"admin", "--help"}} {
			code, out, stderr := run(t, "", args...)
			if code != 0 || !strings.Contains(out, "reset-password NAME") || stderr != "" {
				t.Errorf("%s: exit %d: %s%s", args, code, out, stderr)
			}
		}
		if code, out, _ := run(t, "", "admin", "remove", "-h"); code != 0 || !strings.Contains(out, "-force") {
			t.Errorf("admin remove -h: exit %d: %s", code, out)
		}
		if code, _, stderr := run(t, "", "admin", "frob"); code != 2 || !strings.Contains(stderr, `unknown subcommand "frob"`) {
			t.Errorf("admin frob: exit %d: %s", code, stderr)
		}
		if code, _, stderr := run(t, "", "admin", "remove", "--data", data); code != 2 || !strings.Contains(stderr, "needs a NAME") {
			t.Errorf("admin remove without a name: exit %d: %s", code, stderr)
		}
	})
}

func TestHelpCommand(t *testing.T) {
	code, out, stderr := run(t, "", "help", "serve")
	if code != 0 || !strings.Contains(out, "Usage: usher serve") || !strings.Contains(out, "-sim-vdas") || stderr != "" {
		t.Fatalf("help serve: exit %d\nstdout %q\nstderr %q", code, out, stderr)
	}
	if code, out, _ := run(t, "", "help", "admin"); code != 0 || !strings.Contains(out, "reset-password") {
		t.Fatalf("help admin: exit %d\n%s", code, out)
	}
	if code, _, stderr := run(t, "", "help", "frobnicate"); code != 2 || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Fatalf("help frobnicate: exit %d\n%s", code, stderr)
	}
}

// TestUnknownFlag: a mistyped flag gets one line naming it as typed,
// the flag meant when one is close, and where the flags are; exit 2.
func TestUnknownFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--lisen", "x"}, "usher serve: unknown flag --lisen: did you mean --listen? run 'usher serve -h' for its flags\n"},
		{[]string{"serve", "-sim-vda=3"}, "usher serve: unknown flag -sim-vda: did you mean --sim-vdas? run 'usher serve -h' for its flags\n"},
		{[]string{"apply", "--dry"}, "usher apply: unknown flag --dry: did you mean --dry-run? run 'usher apply -h' for its flags\n"},
		{[]string{"serve", "--bogus"}, "usher serve: unknown flag --bogus; run 'usher serve -h' for its flags\n"},
		{[]string{"admin", "unlock", "bob", "--srever", "http://x"}, "usher admin: unknown flag --srever: did you mean --server? run 'usher admin unlock -h' for its flags\n"},
		{[]string{"apply", "-f"}, "usher apply: flag -f needs a value; run 'usher apply -h' for its flags\n"},
	} {
		code, out, stderr := run(t, "", tc.args...)
		if code != 2 || out != "" || stderr != tc.want {
			t.Errorf("%s: exit %d, stdout %q\nstderr %q\nwant   %q", tc.args, code, out, stderr, tc.want)
		}
	}
}

// TestHelpOnStdout: -h and --help print a command's usage on standard
// output and exit 0, for every command.
func TestHelpOnStdout(t *testing.T) {
	for _, c := range commands() {
		for _, h := range []string{"-h", "--help"} {
			code, out, stderr := run(t, "", c.name, h)
			if code != 0 || !strings.Contains(out, "Usage: usher "+c.name) || stderr != "" {
				t.Errorf("usher %s %s: exit %d\nstdout %q\nstderr %q", c.name, h, code, out, stderr)
			}
		}
	}
}

// TestCommandListAligned: usher help lists the commands with their
// summaries in one column.
func TestCommandListAligned(t *testing.T) {
	_, out, _ := run(t, "", "help")
	col := -1
	n := 0
	for _, c := range commands() {
		for _, line := range strings.Split(out, "\n") {
			if !strings.HasPrefix(line, "  "+c.name+" ") {
				continue
			}
			n++
			at := strings.Index(line, c.summary)
			if col == -1 {
				col = at
			}
			if at != col || at < 0 {
				t.Errorf("%q: summary at column %d, want %d", line, at, col)
			}
		}
	}
	if n != len(commands()) {
		t.Fatalf("%d of %d commands listed:\n%s", n, len(commands()), out)
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := run(t, "", "version")
	if code != 0 || !strings.HasPrefix(out, "usher ") {
		t.Fatalf("version: exit %d %q", code, out)
	}
	if code, out2, _ := run(t, "", "--version"); code != 0 || out2 != out {
		t.Fatalf("--version: exit %d %q, want %q", code, out2, out)
	}
	for _, tc := range []struct {
		name    string
		version string // -ldflags -X main.version
		bi      *debug.BuildInfo
		want    string
	}{
		{"built by scripts/build", "v0.3.0-4-gabcdef0", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "abcdef0123"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "false"}}},
			"usher v0.3.0-4-gabcdef0 git abcdef0123 2026-01-02T03:04:05Z go1.26.0"},
		{"release", "", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "false"}}},
			"usher v1.2.3 git 0123abcd 2026-01-02T03:04:05Z go1.26.0"},
		{"dirty work tree", "", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}},
			"usher (devel) git 0123abcd 2026-01-02T03:04:05Z (modified) go1.26.0"},
		{"no VCS stamp", "", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}},
			"usher (devel), no VCS revision (built without -buildvcs, or outside a repository) go1.26.0"},
		{"no build information", "", nil, "usher (devel), no build information"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionLine(tc.version, tc.bi); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMainLoadQuietNamesFailedThreshold(t *testing.T) {
	srv := loadServer(t)
	users := filepath.Join(t.TempDir(), "users.txt")
	os.WriteFile(users, []byte("alice:pw\nbob:pw\nmallory:nope\n"), 0o600)
	code, stdout, stderr := run(t, "", "load", "-q", "--target", "nfuse", "--url", srv.URL+"/scripts/wpnbr.dll", "--users", users,
		"--executor", "fixed", "--concurrency", "3", "--requests", "30", "--threshold", "errors<1%", "--threshold", "p99<30s")
	if code != 1 || stdout != "" {
		t.Fatalf("exit %d, stdout %q", code, stdout)
	}
	if !strings.Contains(stderr, "1 threshold check(s) failed") || !strings.Contains(stderr, "step 1 (3): errors is 33") || !strings.Contains(stderr, "want errors<1%") {
		t.Fatalf("stderr does not name the failed threshold:\n%s", stderr)
	}
}

// TestDemoGeneratesASiteApplyTakes: usher demo writes a site that usher
// apply takes as it is, whose users log on with the password given, and
// refuses what it cannot make.
func TestDemoGeneratesASiteApplyTakes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mid.yaml")
	if code, _, stderr := run(t, "a-password-123\n", "demo", "--scale", "mid", "--password-stdin", "--out", file); code != 0 {
		t.Fatalf("demo: exit %d: %s", code, stderr)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the site file: %v %v", fi, err)
	}
	if code, out, stderr := run(t, "", "apply", "-f", file, "--data", filepath.Join(dir, "data")); code != 0 || !strings.Contains(out, "created") {
		t.Fatalf("apply: exit %d: %s%s", code, out, stderr)
	}
	code, out, _ := run(t, "", "demo", "--scale", "mid")
	if code != 0 || !strings.Contains(out, "user0001") || strings.Contains(out, "argon2id") {
		t.Errorf("without a password: exit %d, hashes in it: %v", code, strings.Contains(out, "argon2id"))
	}
	if code, out, stderr := run(t, "", "demo"); code != 0 || !strings.Contains(out, "user1000") || strings.Contains(out, "user1001") {
		t.Errorf("demo without --scale is not the demo scale (1,000 users): exit %d: %s", code, stderr)
	}
	for _, tc := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{"", []string{"demo", "--scale", "huge"}, `--scale "huge"`},
		{"short\n", []string{"demo", "--scale", "mid", "--password-stdin"}, "at least 8"},
	} {
		if code, _, stderr := run(t, tc.stdin, tc.args...); code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d: %s", tc.args, code, stderr)
		}
	}
}
