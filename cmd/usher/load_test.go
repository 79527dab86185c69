package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/ctx1"
	"github.com/usher-vdi/usher/internal/loadgen"
)

// loadServer answers after 2 ms; NFuse requests get an AppData answer
// when their ctx1 password is right.
func loadServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(2 * time.Millisecond) // the server's latency, as the doc says
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/scripts/wpnbr.dll" {
			w.Header().Set("Content-Type", "text/xml")
			inner := `<ErrorId>failed-credentials</ErrorId>`
			if strings.Contains(string(b), ">"+ctx1.Encode("pw")+"<") {
				inner = `<LeasingStatus>working</LeasingStatus><AppDataSet></AppDataSet>`
			}
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><NFuseProtocol version="5.9"><ResponseAppData>%s</ResponseAppData></NFuseProtocol>`, inner)
			return
		}
		fmt.Fprintf(w, "hello %s", r.URL.Query().Get("u"))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestLoadReportsAndThresholds(t *testing.T) {
	srv := loadServer(t)
	dir := t.TempDir()
	users := filepath.Join(dir, "users.txt")
	os.WriteFile(users, []byte("alice:pw\nDEMO\\bob:pw\nmallory:nope\n"), 0o600)

	t.Run("http with outputs", func(t *testing.T) {
		out := filepath.Join(dir, "report")
		code, stdout, stderr := run(t, "", "load", "--target", "http", "--url", srv.URL+"/?u={{user}}", "--users", users,
			"--expect-body", "hello", "--executor", "fixed", "--concurrency", "2,4", "--requests", "30",
			"--threshold", "errors<1%", "--threshold", "p99<30s", "--out", out, "--json", filepath.Join(dir, "r.json"))
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		for _, want := range []string{"| concurrent |", "| 2 ", "| 4 ", "time to finish"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("table lacks %q:\n%s", want, stdout)
			}
		}
		var rep loadgen.Report
		b, _ := os.ReadFile(filepath.Join(dir, "r.json"))
		if err := json.Unmarshal(b, &rep); err != nil || len(rep.Runs) != 1 || len(rep.Runs[0].Result.Steps) != 2 {
			t.Fatalf("JSON: %v %s", err, b)
		}
		if s := rep.Runs[0].Result.Steps[1]; s.Concurrency != 4 || s.Requests != 30 || s.Errors != 0 {
			t.Errorf("step 2: %+v", s)
		}
		for _, name := range []string{"report.html", "report.csv", "report.json", "report.md", "tps.svg", "latency.svg"} {
			if _, err := os.Stat(filepath.Join(out, name)); err != nil {
				t.Error(err)
			}
		}
	})
	t.Run("failed threshold exits 1", func(t *testing.T) {
		code, stdout, stderr := run(t, "", "load", "--target", "nfuse", "--url", srv.URL+"/scripts/wpnbr.dll", "--users", users,
			"--executor", "fixed", "--concurrency", "3", "--requests", "30", "--threshold", "errors<1%", "--csv", "-")
		if code != 1 || !strings.Contains(stderr, "threshold check(s) failed") {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if !strings.Contains(stdout, "threshold failed: step 1 (3): errors is 33") || !strings.Contains(stdout, "nfuse-failed-credentials=") {
			t.Errorf("stdout:\n%s", stdout)
		}
		if !strings.Contains(stdout, strings.Join(loadgen.CSVHeader, ",")) {
			t.Errorf("no CSV on stdout:\n%s", stdout)
		}
	})
	t.Run("open model", func(t *testing.T) {
		code, stdout, stderr := run(t, "", "load", "--target", "http", "--url", srv.URL, "--executor", "rate", "--rate", "50:100",
			"--steps", "2", "--step-duration", "400ms", "--workers", "4", "--threshold", "dropped==0")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		for _, want := range []string{"| rate/s ", "p99 uncorrected", "| 50 ", "| 100 "} {
			if !strings.Contains(stdout, want) {
				t.Errorf("table lacks %q:\n%s", want, stdout)
			}
		}
	})
}

func TestLoadUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--target", "http"}, "--url is required"},
		{[]string{"--url", "http://127.0.0.1:1"}, "--target is required"},
		{[]string{"--target", "ftp", "--url", "http://127.0.0.1:1"}, `--target "ftp"`},
		{[]string{"--target", "http", "--url", "127.0.0.1:1"}, "not an http://"},
		{[]string{"--target", "nfuse", "--url", "http://127.0.0.1:1"}, "no users"},
		{[]string{"--target", "rest", "--url", "http://127.0.0.1:1"}, "needs users"},
		{[]string{"--target", "http", "--url", "http://127.0.0.1:1", "--rate", "5"}, "--rate does not apply to --executor stepped"},
		{[]string{"--target", "http", "--url", "http://127.0.0.1:1", "--executor", "rate"}, "needs --rate"},
		{[]string{"--target", "http", "--url", "http://127.0.0.1:1", "--executor", "storm", "--count", "5"}, "--window"},
		{[]string{"--target", "http", "--url", "http://127.0.0.1:1", "--concurrency", "10:x:20"}, "START:STEP:MAX"},
		{[]string{"--target", "http", "--url", "http://127.0.0.1:1", "--concurrency", "20:10:10"}, "below the start"},
		{[]string{"--target", "http", "--url", "http://127.0.0.1:1", "--concurrency", "20,10"}, "must be positive and rise"},
		{[]string{"--target", "http", "--url", "http://127.0.0.1:1", "--executor", "fixed", "--concurrency", "0,10"}, `--concurrency "0,10" is not a list of positive numbers`},
		{[]string{"--target", "http", "--url", "http://127.0.0.1:1", "--executor", "rate", "--rate", "fast"}, `--rate "fast" is not R or FROM:TO`},
		{[]string{"--target", "http", "--url", "http://127.0.0.1:1", "--threshold", "p99~1"}, "METRIC OP VALUE"},
		{[]string{"--target", "http", "--url", "http://127.0.0.1:1", "--executor", "rate", "--rate", "5", "--policy", "pray"}, "queue or drop"},
	} {
		code, _, stderr := run(t, "", append([]string{"load"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("usher load %s: exit %d, stderr %q; want 2 and %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
	if code, out, _ := run(t, "", "load", "-h"); code != 0 || !strings.Contains(out, "Executors (--executor)") {
		t.Errorf("help: exit %d: %s", code, out)
	}
}

// TestLoadLevels checks that both closed models take both forms of
// --concurrency.
func TestLoadLevels(t *testing.T) {
	for _, tc := range []struct {
		executor, concurrency string
		want                  []int
	}{
		{"stepped", "", []int{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}},
		{"stepped", "3", []int{3}},
		{"stepped", "10:10:30", []int{10, 20, 30}},
		{"stepped", "10,20,40", []int{10, 20, 40}},
		{"fixed", "", []int{12, 24, 36, 48, 60}},
		{"fixed", "6,12", []int{6, 12}},
		{"fixed", "48,12", []int{48, 12}},
		{"fixed", "1:2:5", []int{1, 3, 5}},
	} {
		t.Run(tc.executor+" "+tc.concurrency, func(t *testing.T) {
			f := loadFlags{executor: tc.executor, concurrency: tc.concurrency, policy: "queue", stepDuration: time.Second, requests: 1}
			exec, err := f.buildExecutor(map[string]bool{"concurrency": tc.concurrency != ""})
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			switch e := exec.(type) {
			case loadgen.Stepped:
				got = e.Concurrencies()
			case loadgen.FixedWork:
				got = e.Concurrency
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("levels %v, want %v", got, tc.want)
			}
		})
	}
}

func TestShellCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"usher", "load", "--url", "http://127.0.0.1:8080/scripts/wpnbr.dll", "--concurrency", "10:10:100"},
			"usher load --url http://127.0.0.1:8080/scripts/wpnbr.dll --concurrency 10:10:100"},
		{[]string{"usher", "load", "--threshold", "p99<2s", "--threshold", "errors<1%"}, `usher load --threshold 'p99<2s' --threshold 'errors<1%'`},
		{[]string{"--header", "X-Name: a b"}, `--header 'X-Name: a b'`},
		{[]string{"--body", "it's"}, `--body 'it'\''s'`},
		{[]string{"--domain", `DEMO\user`, ""}, `--domain 'DEMO\user' ''`},
		{[]string{"$HOME", "a*", "~x", "a;b", "{{user}}"}, `'$HOME' 'a*' '~x' 'a;b' '{{user}}'`},
	} {
		if got := shellCommand(tc.args...); got != tc.want {
			t.Errorf("shellCommand(%q) = %s, want %s", tc.args, got, tc.want)
		}
		// sh reads it back as the same arguments.
		out, err := exec.Command("/bin/sh", "-c", `printf '%s\n' `+shellCommand(tc.args...)).Output()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(out), strings.Join(tc.args, "\n")+"\n"; got != want {
			t.Errorf("sh read %q back as %q", tc.args, got)
		}
	}
}

func TestLoadDemoUsers(t *testing.T) {
	srv := loadServer(t)
	t.Run("users file", func(t *testing.T) {
		code, stdout, stderr := run(t, "", "load", "users", "--count", "3", "--password", "pw")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		users, err := loadgen.ParseUsers(strings.NewReader(stdout))
		if err != nil {
			t.Fatal(err)
		}
		want := loadgen.Users{{User: "user0001", Password: "pw", Domain: "DEMO"}, {User: "user0002", Password: "pw", Domain: "DEMO"},
			{User: "user0003", Password: "pw", Domain: "DEMO"}}
		if !slices.Equal(users, want) {
			t.Errorf("users %+v, want %+v", users, want)
		}
	})
	t.Run("shorthand", func(t *testing.T) {
		code, stdout, stderr := run(t, "", "load", "--target", "http", "--url", srv.URL+"/?u={{domain}}/{{user}}", "--demo-users", "2",
			"--password", "pw", "--expect-body", "hello DEMO/user000", "--executor", "fixed", "--concurrency", "2", "--requests", "4",
			"--threshold", "errors==0")
		if code != 0 {
			t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
		}
		if strings.Contains(stderr, "password hash") {
			t.Errorf("a request without passwords warns of password hashes:\n%s", stderr)
		}
	})
	t.Run("cold users cost a hash each", func(t *testing.T) {
		code, stdout, stderr := run(t, "", "load", "--target", "http", "--url", srv.URL+"/?u={{user}}&p={{password}}", "--demo-users", "2",
			"--password", "pw", "--executor", "fixed", "--concurrency", "2", "--requests", "4")
		if code != 0 {
			t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
		}
		if !strings.Contains(stderr, "the first pass over the 2 users pays one password hash each on the broker") {
			t.Errorf("stderr does not say that cold users cost a password hash each:\n%s", stderr)
		}
	})
	for _, args := range [][]string{{"--demo-users", "2"}, {"--password", "pw"}, {"--demo-users", "2", "--password", "pw", "--users", "u.txt"}} {
		code, _, stderr := run(t, "", append([]string{"load", "--target", "http", "--url", srv.URL}, args...)...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage): %s", args, code, stderr)
		}
	}
}
