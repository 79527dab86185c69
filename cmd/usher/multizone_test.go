package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/pgtest"
)

// tourStep is a command of examples/multizone/README.md's tour and what
// its comment there says, as a check of the command's output.
type tourStep struct {
	line  string
	check func(out string, seen map[string]string) error
}

// tourMachine finds the machine that launch.sh printed.
var tourMachine = regexp.MustCompile(`"machine": *"([^"]*)"`)

// lands checks that a launch went to a machine matching re, and remembers
// it as key (when set).
func lands(re, key string) func(string, map[string]string) error {
	return func(out string, seen map[string]string) error {
		m := tourMachine.FindStringSubmatch(out)
		if m == nil || !regexp.MustCompile(`^`+re+`$`).MatchString(m[1]) {
			return fmt.Errorf("want a session on %s", re)
		}
		if key != "" {
			seen[key] = m[1]
		}
		return nil
	}
}

// again checks that a launch went back to the machine remembered as key.
func again(key string) func(string, map[string]string) error {
	return func(out string, seen map[string]string) error {
		m := tourMachine.FindStringSubmatch(out)
		if m == nil || m[1] != seen[key] {
			return fmt.Errorf("want the session on %s again", seen[key])
		}
		return nil
	}
}

// The tour, command by command, with its claims. The README's commands
// must be these, in this order: a changed tour changes this test.
var tour = []tourStep{
	{`curl -s -u root:multizone-demo http://127.0.0.1:8201/api/v1/admin/brokers`, func(out string, _ map[string]string) error {
		var page struct {
			Items []struct {
				Name, Zone, State, LHC string
				ZoneLeader             bool `json:"zone_leader"`
			}
		}
		if err := json.Unmarshal([]byte(out), &page); err != nil {
			return err
		}
		var got []string
		for _, b := range page.Items {
			got = append(got, fmt.Sprintf("%s/%s/%s/leader=%v/%s", b.Name, b.Zone, b.State, b.ZoneLeader, b.LHC))
		}
		want := "branch-1/branch/up/leader=true/normal hq-1/hq/up/leader=true/normal hq-2/hq/up/leader=false/normal"
		if strings.Join(got, " ") != want {
			return fmt.Errorf("brokers %v, want %s", got, want)
		}
		return nil
	}},
	{`examples/multizone/launch.sh bob notepad 8101`, lands(`branch-rdsh-0[12]`, "")},
	{`examples/multizone/launch.sh alice notepad 8201`, lands(`hq-rdsh-0[1-3]`, "alice")},
	{`examples/multizone/launch.sh carol notepad 8201`, lands(`branch-rdsh-0[12]`, "carol")},
	{`examples/multizone/launch.sh erin notepad 8101`, lands(`hq-rdsh-0[1-3]`, "")},
	{`examples/multizone/launch.sh carol notepad 8101`, again("carol")},
	{`examples/multizone/launch.sh dave ledger 8201`, lands(`hq-ledger-01`, "")},
	{`curl -s -u root:multizone-demo -X PUT -H 'Content-Type: application/json' ` +
		`-d '{"name":"alice","display_name":"Alice (moved)","home_zone":"branch","groups":["staff"]}' ` +
		`http://127.0.0.1:8102/api/v1/admin/users/alice`, func(out string, _ map[string]string) error {
		if !regexp.MustCompile(`"home_zone": *"branch"`).MatchString(out) {
			return fmt.Errorf("alice is not at home in the branch")
		}
		return nil
	}},
	{`examples/multizone/launch.sh alice notepad 8101`, again("alice")},
	{`examples/multizone/logoff.sh alice 8101`, func(out string, seen map[string]string) error {
		if strings.TrimSpace(out) != "logged off alice's session on "+seen["alice"] {
			return fmt.Errorf("want alice's one session, on %s, logged off", seen["alice"])
		}
		return nil
	}},
	{`examples/multizone/launch.sh alice notepad 8101`, lands(`branch-rdsh-0[12]`, "")},
}

// tourCommands returns the commands of the README's tour: the lines of its
// sh blocks after "## The tour", a continued line joined to the next,
// comments left out.
func tourCommands(readme string) []string {
	_, after, _ := strings.Cut(readme, "## The tour")
	var out []string
	var cur string
	in := false
	for _, line := range strings.Split(after, "\n") {
		switch {
		case line == "```sh":
			in = true
			continue
		case line == "```":
			in = false
			continue
		case !in:
			continue
		}
		if i := strings.Index(line, "  # "); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if strings.HasSuffix(line, `\`) {
			cur += strings.TrimSuffix(line, `\`)
			continue
		}
		out = append(out, cur+line)
		cur = ""
	}
	return out
}

// TestMultizoneTour runs examples/multizone/run.sh, with this test binary
// for usher and a schema of the test PostgreSQL server for its site DB,
// and then every command of its README's tour, checking what the README
// says of each: the brokers route lists the three brokers, launches land
// in the zone their comments name, a reconnection returns to the same
// machine, and alice, moved to the branch, goes back to her hq session
// until she logs it off, and then launches at the branch.
func TestMultizoneTour(t *testing.T) {
	for _, tool := range []string{"sh", "curl", "psql", "paste"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("the tour needs %s: %v", tool, err)
			}
			t.Skipf("the tour needs %s: %v", tool, err)
		}
	}
	admin := pgtest.Admin(t)
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(repo, "examples/multizone/README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, s := range tour {
		want = append(want, s.line)
	}
	if got := tourCommands(string(readme)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the README's tour is not the one this test checks; its commands:\n%s\nthe test's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// This test binary is usher (TestMain), behind a script that says so.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	usher := filepath.Join(dir, "usher")
	if err := os.WriteFile(usher, []byte("#!/bin/sh\nexec env "+runAsUsher+"=1 '"+self+"' \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	schema := "usher_tour_" + strings.ReplaceAll(fmt.Sprint(time.Now().UnixNano()), "-", "")
	t.Cleanup(func() {
		if out, err := exec.Command("psql", "-q", admin, "-c", "DROP SCHEMA IF EXISTS "+schema+" CASCADE").CombinedOutput(); err != nil {
			t.Errorf("drop schema %s: %v\n%s", schema, err, out)
		}
	})
	ports := map[string]string{"8101": freePort(t), "8102": freePort(t), "8201": freePort(t)}
	cmd := exec.Command("sh", filepath.Join(repo, "examples/multizone/run.sh"))
	cmd.Env = append(os.Environ(), "USHER="+usher, "USHER_DB="+admin, "USHER_SCHEMA="+schema, "TMPDIR="+dir,
		"MULTIZONE_PORTS="+strings.Join([]string{ports["8101"], ports["8102"], ports["8201"], freePort(t), freePort(t)}, " "))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &syncBuffer{}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	running := make(chan struct{})
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		said := false
		for sc.Scan() {
			out.Write(append(sc.Bytes(), '\n'))
			if !said && strings.Contains(sc.Text(), "usher multi-zone demo is running") {
				said = true
				close(running)
			}
		}
	}()
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		// run.sh stops its brokers and simulators on SIGTERM.
		syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		select {
		case err := <-exited:
			// 143: the shell's exit on SIGTERM, after its trap.
			if err != nil && !strings.Contains(err.Error(), "signal") && !strings.Contains(err.Error(), "exit status 143") {
				t.Logf("run.sh: %v", err)
			}
		case <-time.After(30 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Errorf("run.sh did not stop within 30 s of SIGTERM")
		}
	})
	select {
	case <-running:
	case err := <-exited:
		t.Fatalf("run.sh exited: %v\n%s", err, out.String())
	case <-time.After(3 * time.Minute):
		t.Fatalf("run.sh did not say it runs within 3 minutes:\n%s", out.String())
	}

	// The simulators register the site's seven machines.
	hq1 := "http://127.0.0.1:" + ports["8101"]
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := registeredMachines(t.Context(), hq1)
		if err == nil && n == 7 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 7 machines registered after a minute (%v):\n%s", n, err, out.String())
		}
		select {
		case err := <-exited:
			t.Fatalf("run.sh exited: %v\n%s", err, out.String())
		case <-time.After(200 * time.Millisecond):
		}
	}

	seen := map[string]string{}
	for i, s := range tour {
		line := s.line
		for from, to := range ports {
			line = strings.ReplaceAll(line, "127.0.0.1:"+from, "127.0.0.1:"+to)
			line = strings.ReplaceAll(line, " "+from, " "+to)
		}
		c := exec.CommandContext(t.Context(), "sh", "-c", line)
		c.Dir = repo
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		if err := c.Run(); err != nil {
			t.Fatalf("tour step %d, %s: %v\n%s%s", i+1, s.line, err, stdout.String(), stderr.String())
		}
		if err := s.check(stdout.String(), seen); err != nil {
			t.Fatalf("tour step %d, %s: %v; it printed:\n%s%s", i+1, s.line, err, stdout.String(), stderr.String())
		}
		t.Logf("tour step %d: %s: %s", i+1, s.line, strings.TrimSpace(stdout.String()))
	}
}

// registeredMachines counts the site's registered machines, read through
// the admin API at base.
func registeredMachines(ctx context.Context, base string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/admin/machines", nil)
	if err != nil {
		return 0, err
	}
	req.SetBasicAuth("root", "multizone-demo")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var page struct {
		Items []struct{ Registration string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return 0, err
	}
	n := 0
	for _, m := range page.Items {
		if m.Registration == "registered" {
			n++
		}
	}
	return n, nil
}
