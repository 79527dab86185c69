package pgstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usher-vdi/usher/internal/pgtest"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/pgstore"
)

// limitedRole creates a login role that may open at most limit
// connections (CONNECTION LIMIT, which the server enforces with the same
// refusal as max_connections, SQLSTATE 53300) and use the schema of dsn,
// whose tables a store has made; it returns dsn as that role. The role is
// dropped when t ends, after the cleanups registered later.
func limitedRole(t *testing.T, dsn string, limit int) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	var schema string
	err = conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	role := "usher_limited_" + hex.EncodeToString(b)
	admin := func(sql string) error {
		conn, err := pgx.Connect(ctx, pgtest.Admin(t))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	r, s := pgx.Identifier{role}.Sanitize(), pgx.Identifier{schema}.Sanitize()
	if err := admin(fmt.Sprintf(`CREATE ROLE %s LOGIN CONNECTION LIMIT %d;
		GRANT USAGE, CREATE ON SCHEMA %s TO %[1]s;
		GRANT ALL ON ALL TABLES IN SCHEMA %[3]s TO %[1]s;
		GRANT ALL ON ALL SEQUENCES IN SCHEMA %[3]s TO %[1]s;
		GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %[3]s TO %[1]s`, r, limit, s)); err != nil {
		t.Fatalf("create role: %v", err)
	}
	t.Cleanup(func() {
		if err := admin(fmt.Sprintf(`DROP OWNED BY %s; DROP ROLE %[1]s`, r)); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(role)
		return u.String()
	}
	return dsn + " user=" + role
}

// TestServerAtItsConnectionLimit: a server that refuses new connections
// (here the role's CONNECTION LIMIT of 2, as a server at max_connections
// does) makes transactions wait for the pool's open connections, not fail;
// a pool with none open fails at once, saying why. (A broker once took
// the refusal for an unavailable site DB, so its site-wide lock-out fell
// back to its own count, and CI's TestLockoutIsSiteWide saw 17 password
// checks against a threshold of 5.)
func TestServerAtItsConnectionLimit(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	MustOpen(t, dsn) // migrates the schema the role gets
	limited := limitedRole(t, dsn, 2)

	var logs bytes.Buffer // slog's handler serializes the writes; read after wg.Wait
	s := MustOpenWith(t, limited, pgstore.Options{MaxConns: 8,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	const workers, each = 40, 5
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				errs <- s.Update(ctx, func(tx site.Tx) error {
					l, err := tx.AccountLock(ctx, site.AccountKey("user", fmt.Sprintf("u%02d", w)))
					if err != nil {
						return err
					}
					l.Failures = i + 1
					l.WindowStart = time.Now()
					return tx.SetAccountLock(ctx, l)
				})
			}
		})
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			if failed++; failed == 1 {
				t.Errorf("a transaction failed while the pool had connections: %v", err)
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d transactions failed", failed, workers*each)
	}
	if !strings.Contains(logs.String(), "at its connection limit") {
		t.Errorf("the server never refused a connection, so this test tried nothing; log: %q", logs.String())
	}
	var locks []site.AccountLock
	if err := s.View(ctx, func(tx site.Tx) (err error) { locks, err = tx.AccountLocks(ctx); return err }); err != nil {
		t.Fatal(err)
	}
	if len(locks) != workers {
		t.Errorf("%d accounts recorded, want %d", len(locks), workers)
	}
	for _, l := range locks {
		if l.Failures != each {
			t.Errorf("%s: %d failures recorded, want %d", l.Account, l.Failures, each)
		}
	}

	// A role that may open no connection at all waits out the bound (here
	// the AnswerTimeout of a context without a deadline), then fails
	// saying why, with an error that tells a busy database from a lost one.
	none := limitedRole(t, dsn, 0)
	start := time.Now()
	_, err := pgstore.Open(ctx, none, pgstore.Options{AnswerTimeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "53300") || time.Since(start) > 5*time.Second {
		t.Errorf("open with no connection allowed: %v after %s, want the server's refusal (53300) within the bound", err, time.Since(start))
	}
	if !errors.Is(err, site.ErrConnLimit) || site.ErrorCode(err) != site.EUnavailable {
		t.Errorf("open with no connection allowed: %v (code %q), want site.ErrConnLimit and %s", err, site.ErrorCode(err), site.EUnavailable)
	}
}

// TestConnLimitWaitsForAnotherClient: a transaction that needs a new
// connection from a server at its connection limit, while the pool's only
// connection is busy, waits and succeeds once another client's connection
// frees (not the pool's own: that one stays busy), and the refusals are
// counted; the database is never taken for lost.
func TestConnLimitWaitsForAnotherClient(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	MustOpen(t, dsn) // migrates the schema the role gets
	limited := limitedRole(t, dsn, 2)
	s := MustOpenWith(t, limited, pgstore.Options{MaxConns: 2}) // its migration leaves one connection open
	other, err := pgx.Connect(ctx, limited)                     // the role's second and last
	if err != nil {
		t.Fatalf("the other client's connection: %v", err)
	}
	defer other.Close(ctx)

	// The pool's one connection is held by a transaction that waits.
	holding, release := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- s.Update(ctx, func(tx site.Tx) error {
			if _, err := tx.ConfigVersion(ctx); err != nil {
				return err
			}
			close(holding)
			<-release
			return nil
		})
	}()
	select {
	case <-holding:
	case err := <-held:
		t.Fatalf("the holding transaction: %v", err)
	}
	defer func() { close(release); <-held }()

	before := s.ConnLimitRefusals()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- s.View(cctx, func(tx site.Tx) error {
			_, err := tx.ConfigVersion(cctx)
			return err
		})
	}()
	// The server refuses it: the counter moves, and the call waits.
	deadline := time.Now().Add(10 * time.Second)
	for s.ConnLimitRefusals() == before {
		select {
		case err := <-done:
			t.Fatalf("the view returned (%v) before the server refused it a connection", err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the server refused no connection in 10s: the test tried nothing")
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the view returned (%v) while the server was at its limit, want it to wait", err)
	default:
	}
	// One whose context ends first fails, saying the database is busy,
	// not lost.
	sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = s.View(sctx, func(tx site.Tx) error { _, err := tx.ConfigVersion(sctx); return err })
	scancel()
	if !errors.Is(err, site.ErrConnLimit) || !errors.Is(err, context.DeadlineExceeded) || site.ErrorCode(err) != site.EUnavailable {
		t.Errorf("a view whose context ended while it waited: %v (code %q), want site.ErrConnLimit, its deadline and %s",
			err, site.ErrorCode(err), site.EUnavailable)
	}
	other.Close(ctx) // a connection frees, not the pool's
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the view that waited: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the view did not get the freed connection in 20s")
	}
	if got := s.ConnLimitRefusals(); got <= before {
		t.Errorf("ConnLimitRefusals = %d after a refusal, want more than %d", got, before)
	}
	// Not taken for lost: the next transaction goes through at once.
	if err := s.View(ctx, func(tx site.Tx) error { _, err := tx.Settings(ctx); return err }); err != nil {
		t.Errorf("a view after the wait: %v", err)
	}
}
