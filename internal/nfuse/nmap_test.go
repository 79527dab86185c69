package nfuse_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/nfuse"
	"github.com/usher-vdi/usher/internal/site"
)

// TestNmap runs nmap's NSE scripts for the Citrix XML service, a
// third-party NFuse client, against the handler. The scripts' port rule
// takes only ports 80, 8080 and 443; a "+" before a script's name makes
// nmap run it on any port, so the handler listens on a free port of
// 127.0.0.1 and nothing is sent anywhere but there.
func TestNmap(t *testing.T) {
	nmap, err := exec.LookPath("nmap")
	if err != nil {
		t.Skip("nmap is not installed (Debian package nmap)")
	}
	for _, script := range []string{"citrix-enum-apps-xml", "citrix-enum-servers-xml", "citrix-brute-xml"} {
		if !nmapHasScript(nmap, script) {
			t.Skipf("nmap has no %s script", script)
		}
	}
	t.Parallel()

	run := func(t *testing.T, f *fixture, args ...string) string {
		t.Helper()
		host, port := serve(t, f)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		args = append([]string{"-Pn", "-n", "-sT", "-p", port, "--script-timeout", "90s"}, args...)
		args = append(args, host)
		out, err := exec.CommandContext(ctx, nmap, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("nmap %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if !strings.Contains(string(out), port+"/tcp open") {
			t.Fatalf("nmap did not reach the handler:\n%s", out)
		}
		t.Logf("nmap %s:\n%.1500s", strings.Join(args, " "), out)
		return string(out)
	}

	t.Run("enum-servers lists the machines", func(t *testing.T) {
		t.Parallel()
		out := run(t, newFixture(t, options{}), "--script", "+citrix-enum-servers-xml")
		for _, m := range []string{"office-vda-01", "eng-vda-10", "assigned-vda-02"} {
			if !strings.Contains(out, m) {
				t.Errorf("no %s in\n%s", m, out)
			}
		}
	})
	t.Run("enum-apps gets no list by default", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var answered []string
		f := newFixture(t, options{handlerConfig: func(c *nfuse.Config) {
			c.Observe = func(k nfuse.Kind, errorID string, _ time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				answered = append(answered, k.String()+" "+errorID)
			}
		}})
		out := run(t, f, "--script", "+citrix-enum-apps-xml")
		if strings.Contains(out, "Application:") || strings.Contains(out, "Writer") {
			t.Fatalf("nmap listed applications:\n%s", out)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"RequestAppData failed-credentials"}; !slices.Equal(answered, want) {
			t.Fatalf("answered %q, want %q", answered, want)
		}
	})
	t.Run("enum-apps lists every application when the site allows it", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, options{settings: func(s *site.Settings) { s.AnonymousAppData = true }})
		out := run(t, f, "--script", "+citrix-enum-apps-xml")
		if n := strings.Count(out, "Application: "); n != 403 {
			t.Errorf("nmap listed %d resources, want 403:\n%.2000s", n, out)
		}
		for _, want := range []string{
			`Application: Writer; Groups: DEMO\domain-users`,
			`Application: General Ledger (Test); Groups: DEMO\domain-users`,
			`Application: Pooled Linux Desktop; Groups: DEMO\engineering`,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in\n%.2000s", want, out)
			}
		}
	})
	t.Run("brute finds the valid credentials", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, options{brokerConfig: func(c *broker.Config) { c.LockoutThreshold = 1000 }})
		dir := t.TempDir()
		users, passwords := filepath.Join(dir, "users"), filepath.Join(dir, "passwords")
		writeLines(t, users, "user0001", "nobody", "user0002")
		writeLines(t, passwords, "letmein", userPassword, "123456")
		out := run(t, f, "--script", "+citrix-brute-xml",
			"--script-args", fmt.Sprintf("userdb=%s,passdb=%s,ntdomain=DEMO,unpwdb.timelimit=0", users, passwords))
		for _, want := range []string{"user0001:" + userPassword + " => Login was successful", "user0002:" + userPassword + " => Login was successful"} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in\n%s", want, out)
			}
		}
		if strings.Count(out, "=>") != 2 {
			t.Errorf("nmap found other credentials:\n%s", out)
		}
	})
}

// serve serves the handler on a free port of 127.0.0.1 until the test
// ends, and returns the host and the port.
func serve(t *testing.T, f *fixture) (host, port string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f.handler, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	host, port, _ = net.SplitHostPort(ln.Addr().String())
	return host, port
}

func nmapHasScript(nmap, script string) bool {
	out, err := exec.Command(nmap, "--script-help", script).CombinedOutput()
	return err == nil && strings.Contains(string(out), script)
}

func writeLines(t *testing.T, path string, lines ...string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}
