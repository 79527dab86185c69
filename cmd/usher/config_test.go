package main

import (
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// commandFlags returns the flag set usher CMD parses, made by running
// usher CMD -h.
func commandFlags(t *testing.T, cmd string) *flag.FlagSet {
	t.Helper()
	var fs *flag.FlagSet
	m := &Main{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" },
		flagSetMade: func(f *flag.FlagSet) { fs = f }}
	if code := m.Run(context.Background(), []string{cmd, "-h"}); code != 0 || fs == nil {
		t.Fatalf("usher %s -h: exit %d, flag set %v", cmd, code, fs)
	}
	return fs
}

// TestConfigFile: a --config file sets the flags the command line leaves
// unset, refuses what it cannot set with its file and line, and can set
// every flag of the roles that take one.
func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(yaml string) string {
		t.Helper()
		p := filepath.Join(dir, "usher.yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	parseWith := func(yaml string, args ...string) (*flag.FlagSet, error) {
		fs := flag.NewFlagSet("usher test", flag.ContinueOnError)
		fs.String("listen", "127.0.0.1:8080", "")
		fs.Bool("demo", false, "")
		fs.Duration("shutdown-timeout", 0, "")
		var list multiFlag
		fs.Var(&list, "threshold", "")
		configFlag(fs)
		return fs, parse(fs, append([]string{"--config", write(yaml)}, args...), 0)
	}

	t.Run("sets flags; the command line overrides", func(t *testing.T) {
		fs, err := parseWith("listen: 0.0.0.0:1\ndemo: true\nshutdown-timeout: 3s\nthreshold: [a, b]\n", "--listen", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]string{"listen": "127.0.0.1:0", "demo": "true", "shutdown-timeout": "3s", "threshold": "a, b"} {
			if got := fs.Lookup(name).Value.String(); got != want {
				t.Errorf("%s = %q, want %q", name, got, want)
			}
		}
	})
	t.Run("an empty file sets nothing", func(t *testing.T) {
		if _, err := parseWith("# nothing\n"); err != nil {
			t.Fatal(err)
		}
	})
	for _, tc := range []struct{ yaml, want string }{
		{"listen: x\nlisten-addr: y\n", `usher.yaml:2: unknown key "listen-addr" (did you mean "listen"?)`},
		{"\n\nfrobnicate: 1\n", `usher.yaml:3: unknown key "frobnicate"`},
		{"shutdown-timeout: soon\n", `usher.yaml:1: key "shutdown-timeout": `},
		{"demo: maybe\n", `usher.yaml:1: key "demo": `},
		{"listen:\n  host: x\n", `usher.yaml:2: key "listen" takes a value or a list of values, not a mapping`},
		{"listen: a\nlisten: b\n", `usher.yaml:2: key "listen" again (first at line 1)`},
		{"listen:\n", `usher.yaml:1: key "listen" has no value`},
		{"config: other.yaml\n", `usher.yaml:1: key "config": a configuration file cannot name another`},
		{"- listen\n", `usher.yaml:1: want a mapping of flag names to values`},
		{"listen: [\n", `usher.yaml: yaml: `},
	} {
		_, err := parseWith(tc.yaml)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error %v, want one line with %q", tc.yaml, err, tc.want)
		}
	}

	t.Run("every flag of a role is settable", func(t *testing.T) {
		for _, cmd := range []string{"serve", "broker", "vda", "stream"} {
			fs := commandFlags(t, cmd)
			var b strings.Builder
			fs.VisitAll(func(f *flag.Flag) {
				if f.Name != "config" {
					b.WriteString(f.Name + ": " + quoteYAML(f.DefValue) + "\n")
				}
			})
			fresh := commandFlags(t, cmd)
			fresh.Set("config", write(b.String()))
			if err := loadConfig(fresh); err != nil {
				t.Errorf("%s: a file of every flag at its default: %v", cmd, err)
			}
		}
	})
}

func quoteYAML(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }

// TestConfigSample: usher serve starts with examples/usher.yaml, takes
// its settings (json logs, the demo site) and lets the command line
// override its listener and data directory.
func TestConfigSample(t *testing.T) {
	data := t.TempDir()
	s := startServe(t, "--config", filepath.Join("..", "..", "examples", "usher.yaml"), "--data", data, "--demo-password", "sample-pass-1")
	if strings.HasSuffix(s.url, ":8080") || !strings.Contains(s.stdout.String(), data) {
		t.Errorf("the command line's --listen 127.0.0.1:0 and --data %s did not override the file: %s\n%s", data, s.url, s.stdout)
	}
	if code, _ := get(t, s.url+"/api/v1/admin/site", "admin", "sample-pass-1"); code != 200 {
		t.Errorf("the demo site's admin: %d", code)
	}
	stderr := s.stderr.String()
	if first, _, _ := strings.Cut(stderr, "\n"); !strings.HasPrefix(first, "{") {
		t.Errorf("logs are not JSON:\n%s", stderr)
	}
}
