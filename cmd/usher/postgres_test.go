package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/pgtest"
)

// TestSiteDBOnPostgres runs apply, export, admin and serve against a
// PostgreSQL site DB named by --db: the same site as on SQLite.
func TestSiteDBOnPostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	data := t.TempDir()
	code, _, stderr := run(t, "", "apply", "-f", "../../examples/site.yaml", "--db", dsn, "--data", data)
	if code != 0 {
		t.Fatalf("apply: exit %d: %s", code, stderr)
	}
	if strings.Contains(stderr, "site.db") || !strings.Contains(stderr, "site DB: postgres") && !strings.Contains(stderr, "site DB: host=") {
		t.Errorf("apply does not name the PostgreSQL site DB:\n%s", stderr)
	}
	code, onPG, stderr := run(t, "", "export", "--db", dsn, "--data", data)
	if code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	sqliteData := t.TempDir()
	if code, _, stderr := run(t, "", "apply", "-f", "../../examples/site.yaml", "--data", sqliteData); code != 0 {
		t.Fatalf("apply on SQLite: exit %d: %s", code, stderr)
	}
	_, onSQLite, _ := run(t, "", "export", "--data", sqliteData)
	if onPG != onSQLite || len(onPG) < 1000 {
		t.Errorf("the site exported from PostgreSQL (%d bytes) differs from SQLite's (%d bytes)", len(onPG), len(onSQLite))
	}
	if code, _, stderr := run(t, "admin-password\n", "admin", "add", "root", "--password-stdin", "--db", dsn, "--data", data); code != 0 {
		t.Fatalf("admin add: exit %d: %s", code, stderr)
	}

	s := startServe(t, "--db", dsn, "--data", t.TempDir())
	code, body := get(t, s.url+"/api/v1/admin/applications?limit=1", "root", "admin-password")
	if code != http.StatusOK {
		t.Fatalf("admin API on the PostgreSQL site: %d %s", code, body)
	}
	var page struct{ Total int }
	if err := json.Unmarshal(body, &page); err != nil || page.Total == 0 {
		t.Errorf("applications: %s (%v)", body, err)
	}
}

// TestBadDBIsNamedWithoutItsPassword: a wrong --db says what is wrong and
// never prints the password it holds.
func TestBadDBIsNamedWithoutItsPassword(t *testing.T) {
	for _, args := range [][]string{
		{"export", "--db", "postgres://alice:s3cret-pw@127.0.0.1:1/site?connect_timeout=2"},
		{"serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--db", "postgres://alice:s3cret-pw@127.0.0.1:1/site?connect_timeout=2"},
		{"export", "--db", "mysql://alice:s3cret-pw@db/site"},
	} {
		code, stdout, stderr := run(t, "", args...)
		if code == 0 {
			t.Errorf("%v: exit 0", args)
		}
		if strings.Contains(stdout+stderr, "s3cret-pw") {
			t.Errorf("%v printed the password:\n%s%s", args, stdout, stderr)
		}
		if !strings.Contains(stderr, "127.0.0.1:1") && !strings.Contains(stderr, "--db takes a PostgreSQL URL") {
			t.Errorf("%v: the error does not say which database or what is wrong:\n%s", args, stderr)
		}
	}
}

// TestRotateSecret: rotating the enrolment secret changes what a broker
// hands VDAs at its next start; an unknown secret is a usage error.
func TestRotateSecret(t *testing.T) {
	data := t.TempDir()
	s := startServe(t, "--data", data)
	s.stop()
	before, err := os.ReadFile(filepath.Join(data, "enrolment.secret"))
	if err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := run(t, "", "admin", "rotate-secret", "enrolment", "--data", data); code != 0 || !strings.Contains(out, "rotated") {
		t.Fatalf("rotate: exit %d: %s%s", code, out, stderr)
	}
	if code, _, _ := run(t, "", "admin", "rotate-secret", "nonsense", "--data", data); code != 2 {
		t.Errorf("an unknown secret: exit %d, want 2", code)
	}
	startServe(t, "--data", data).stop()
	after, err := os.ReadFile(filepath.Join(data, "enrolment.secret"))
	if err != nil {
		t.Fatal(err)
	}
	if string(before) == string(after) || len(after) < 17 {
		t.Errorf("the enrolment secret did not change: %q then %q", before, after)
	}
}

// TestBrokerWaitingForItsSiteDB: a broker whose site DB does not answer
// keeps trying, and meanwhile answers on its address that it is alive
// but not ready, saying why, without the DSN's password; it stops when
// told to.
func TestBrokerWaitingForItsSiteDB(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }, Self: testSelf}
	done := make(chan int, 1)
	go func() {
		done <- m.Run(ctx, []string{"broker", "--listen", addr, "--data", t.TempDir(), "--start-retry", "1m",
			"--db", "postgres://alice:s3cret-pw@127.0.0.1:1/site?connect_timeout=1"})
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "unavailable") ||
				!strings.Contains(string(body), "site DB") || strings.Contains(string(body), "s3cret-pw") {
				t.Fatalf("/readyz while the site DB does not answer: %d %s", resp.StatusCode, body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing answered on %s for 20 s: %v\n%s", addr, err, errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, _ := get(t, "http://"+addr+"/healthz", "", ""); code != http.StatusOK {
		t.Errorf("/healthz while waiting: %d, want 200", code)
	}
	cancel()
	select {
	case code := <-done:
		if code == 0 {
			t.Error("a broker that never reached its site DB exited 0")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the broker did not stop within 30 s of cancellation")
	}
	if strings.Contains(out.String()+errb.String(), "s3cret-pw") {
		t.Errorf("the password was printed:\n%s%s", out.String(), errb.String())
	}
}
