// Package pgtest gives tests an empty, isolated PostgreSQL database: a
// new schema, alone on the search_path of the DSN that DSN returns, and
// dropped when the test ends.
//
// The server is, in order: the one the DSN in USHER_TEST_POSTGRES names;
// the local one on 127.0.0.1:5432 (trust authentication, user postgres or
// root, database test) when it answers; or a throwaway cluster that
// initdb and pg_ctl (from /usr/lib/postgresql/*/bin or PATH) start in a
// temporary directory, listening on a unix socket there only, and that
// Main stops when the test binary's tests end. Without any, DSN skips the
// test, saying why; with CI=true in the environment it fails it instead.
//
// A package whose tests call DSN runs them through Main:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
// Only tests import this package.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usher-vdi/usher/internal/pgcluster"
)

// EnvDSN names the environment variable that points the tests at a
// server: a DSN (URL or key=value) whose user may create schemas.
const EnvDSN = "USHER_TEST_POSTGRES"

// LocalDSNs are the local server's DSNs that DSN tries. They set no
// connect_timeout: ping bounds its own try, and a Store takes pgstore's
// default, since a CI machine running many packages' tests at once can
// take seconds to let a connection in, which a Store with a shorter
// timeout would take for a lost database.
var LocalDSNs = []string{
	"postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
	"postgres://root@127.0.0.1:5432/test?sslmode=disable",
}

var (
	inMain atomic.Bool

	once    sync.Once
	admin   string             // the DSN schemas are created with
	reason  string             // why there is no server, when admin is ""
	started *pgcluster.Cluster // the cluster this package started, if any
)

// Main runs m's tests, then stops the cluster that DSN started for them, if
// any, and returns m's exit code.
func Main(m interface{ Run() int }) int {
	inMain.Store(true)
	code := m.Run()
	if started != nil {
		if err := started.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// DSN returns the DSN of a new, empty schema, the only one on its
// search_path, which is dropped when tb and its cleanups end. It skips tb
// when no server can be had (fails it when CI=true).
func DSN(tb testing.TB) string {
	tb.Helper()
	once.Do(find)
	if admin == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("pgtest: no PostgreSQL server for the tests (CI=true): %s", reason)
		}
		tb.Skipf("pgtest: no PostgreSQL server for the tests: %s", reason)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema := "usher_test_" + randomHex(8)
	if err := exec1(ctx, admin, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		tb.Fatalf("pgtest: create schema: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := exec1(ctx, admin, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("pgtest: drop schema %s: %v", schema, err)
		}
	})
	dsn, err := withSetting(admin, "search_path", schema)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return dsn
}

// Admin returns the DSN of the server's database that DSN creates its
// schemas in, for tests that need a connection of their own (as a
// superuser on a local server or cluster); it skips tb as DSN does.
func Admin(tb testing.TB) string {
	tb.Helper()
	once.Do(find)
	if admin == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("pgtest: no PostgreSQL server for the tests (CI=true): %s", reason)
		}
		tb.Skipf("pgtest: no PostgreSQL server for the tests: %s", reason)
	}
	return admin
}

// find picks the server, once per test binary.
func find() {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		if err := ping(dsn); err != nil {
			reason = fmt.Sprintf("%s is set, but its server does not answer: %v", EnvDSN, err)
			return
		}
		admin = dsn
		return
	}
	var errs []string
	for _, dsn := range LocalDSNs {
		err := ping(dsn)
		if err == nil {
			admin = dsn
			return
		}
		errs = append(errs, err.Error())
	}
	if !inMain.Load() {
		reason = "the local server does not answer (" + strings.Join(errs, "; ") +
			"), and the package's TestMain does not run pgtest.Main, which would stop a throwaway cluster"
		return
	}
	c, err := pgcluster.Start()
	if err != nil {
		reason = "the local server does not answer (" + strings.Join(errs, "; ") + "), and no throwaway cluster: " + err.Error()
		return
	}
	started, admin = c, c.DSN()
}

func ping(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return exec1(ctx, dsn, "SELECT 1")
}

// exec1 runs one statement on a connection of its own.
func exec1(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// withSetting returns dsn with a run-time setting added, in its own form.
func withSetting(dsn, key, value string) (string, error) {
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", errors.New("the server's DSN is not a valid URL")
		}
		q := u.Query()
		q.Set(key, value)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	return dsn + " " + key + "='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(value) + "'", nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Cluster is a throwaway PostgreSQL cluster of one test's own, which the
// test may crash and start again.
type Cluster struct{ c *pgcluster.Cluster }

// Throwaway creates and starts a cluster for tb alone, stopped and removed
// when tb ends. It skips tb when PostgreSQL's programs are missing (fails
// it when CI=true).
func Throwaway(tb testing.TB) *Cluster {
	tb.Helper()
	c, err := pgcluster.Start()
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("pgtest: a throwaway cluster: %v", err)
		}
		tb.Skipf("pgtest: a throwaway cluster: %v", err)
	}
	tb.Cleanup(func() {
		if err := c.Stop(); err != nil {
			tb.Errorf("pgtest: %v", err)
		}
	})
	return &Cluster{c: c}
}

// DSN connects to the cluster's postgres database.
func (c *Cluster) DSN() string { return c.c.DSN() }

// Crash stops the cluster as a crash would (pg_ctl stop -m immediate: no
// checkpoint, recovery at the next start).
func (c *Cluster) Crash() error { return c.c.Crash() }

// Start starts the cluster again after Crash.
func (c *Cluster) Start() error { return c.c.Start() }
