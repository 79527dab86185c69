package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
	"github.com/usher-vdi/usher/internal/site/storetest"
)

// MustOpen opens a store at path and closes it when the test ends.
func MustOpen(tb testing.TB, path string) *sqlitestore.Store {
	tb.Helper()
	s, err := sqlitestore.Open(context.Background(), path, sqlitestore.Options{})
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) site.Store {
		return MustOpen(t, filepath.Join(t.TempDir(), "site.db"))
	})
}

func TestChangeHistoryKeep(t *testing.T) {
	storetest.RunChangeHistoryKeep(t, func(t *testing.T, keep int) site.Store {
		s, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "site.db"), sqlitestore.Options{ChangeHistoryKeep: keep})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestPath(t *testing.T) {
	// Characters that mean something in a URI are part of the name.
	path := filepath.Join(t.TempDir(), "my site?mode=ro#1%20.db")
	if got := MustOpen(t, path).Path(); got != path {
		t.Fatalf("Path() = %q, want %q", got, path)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database file: %v", err)
	}
}

func TestReopenKeepsDataAndVersion(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "site.db")
	s, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := storetest.GenerateConfig(storetest.MidSize)
	if err := s.Update(ctx, func(tx site.Tx) error {
		_, err := site.ApplyConfig(ctx, tx, want, false)
		return err
	}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if err := s.Update(ctx, func(tx site.Tx) error {
		return tx.Admins().Create(ctx, site.Admin{Name: "root", PasswordHash: "$argon2id$x", CreatedAt: time.Unix(1700000000, 123456789)})
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	s = MustOpen(t, path)
	if err := s.View(ctx, func(tx site.Tx) error {
		v, err := tx.ConfigVersion(ctx)
		if err != nil || v != 2 {
			t.Errorf("config version = %d, %v; want 2", v, err)
		}
		got, err := site.LoadConfig(ctx, tx)
		if err != nil {
			return err
		}
		if got.String() != want.String() || got.Settings != want.Settings {
			t.Errorf("reopened config: %s, want %s", got, want)
		}
		a, err := tx.Admins().Get(ctx, "root")
		if err != nil || !a.CreatedAt.Equal(time.Unix(1700000000, 123456789)) {
			t.Errorf("admin = %+v, %v", a, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// raw opens the database file without the store, as another program would.
func raw(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestMigrationsAreIdempotent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "site.db")
	for range 3 {
		s, err := sqlitestore.Open(context.Background(), path, sqlitestore.Options{})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		s.Close()
	}
	db := raw(t, path)
	var n, max int
	if err := db.QueryRow(`SELECT count(*), max(version) FROM schema_migrations`).Scan(&n, &max); err != nil {
		t.Fatal(err)
	}
	if want := sqlitestore.SchemaVersion(); n != want || max != want {
		t.Fatalf("schema_migrations has %d rows up to version %d, want %d", n, max, want)
	}
	var settings int
	if err := db.QueryRow(`SELECT count(*) FROM settings`).Scan(&settings); err != nil || settings != 1 {
		t.Fatalf("settings rows = %d, %v; want 1", settings, err)
	}
}

func TestFutureSchemaIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "site.db")
	s, err := sqlitestore.Open(context.Background(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	future := sqlitestore.SchemaVersion() + 1
	if _, err := raw(t, path).Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'from_the_future', '2099-01-01')`, future); err != nil {
		t.Fatal(err)
	}
	_, err = sqlitestore.Open(context.Background(), path, sqlitestore.Options{})
	if !errors.Is(err, sqlitestore.ErrSchemaTooNew) {
		t.Fatalf("open: %v, want ErrSchemaTooNew", err)
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprint(future)) || !strings.Contains(msg, "upgrade usher") {
		t.Fatalf("error %q does not say which versions or what to do", msg)
	}
}

func TestViewsRunDuringLongUpdate(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t, filepath.Join(t.TempDir(), "site.db"))
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Update(ctx, func(tx site.Tx) error {
			for i := range 100 {
				if err := tx.Zones().Create(ctx, site.Zone{Name: fmt.Sprint("z", i)}); err != nil {
					return err
				}
			}
			close(inside)
			<-release // hold the write transaction open
			return nil
		})
	}()
	<-inside

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 5 {
				err := s.View(ctx, func(tx site.Tx) error {
					p, err := tx.Zones().List(ctx, site.ListOptions{})
					if err != nil {
						return err
					}
					if p.Total != 0 {
						return fmt.Errorf("a view sees %d uncommitted zones", p.Total)
					}
					v, err := tx.ConfigVersion(ctx)
					if err == nil && v != 1 {
						err = fmt.Errorf("version %d before the commit", v)
					}
					return err
				})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait() // every view finished while the update holds the lock
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("update: %v", err)
	}
	if err := s.View(ctx, func(tx site.Tx) error {
		p, err := tx.Zones().List(ctx, site.ListOptions{})
		if err == nil && p.Total != 100 {
			err = fmt.Errorf("%d zones after the commit, want 100", p.Total)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func TestLockedDatabaseIsUnavailable(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "site.db")
	s, err := sqlitestore.Open(ctx, path, sqlitestore.Options{BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// Another process holds the write lock.
	db := raw(t, path)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	err = s.Update(ctx, func(tx site.Tx) error { return tx.Zones().Create(ctx, site.Zone{Name: "z"}) })
	if site.ErrorCode(err) != site.EUnavailable {
		t.Fatalf("update while locked: %v, want code %s", err, site.EUnavailable)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx site.Tx) error { return tx.Zones().Create(ctx, site.Zone{Name: "z"}) }); err != nil {
		t.Fatalf("update after the lock is gone: %v", err)
	}
}

func TestSchemaIsRelational(t *testing.T) {
	path := filepath.Join(t.TempDir(), "site.db")
	s := MustOpen(t, path)
	ctx := context.Background()
	if err := s.Update(ctx, func(tx site.Tx) error {
		_, err := site.ApplyConfig(ctx, tx, storetest.GenerateConfig(storetest.MidSize), false)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	db := raw(t, path)
	for table, want := range map[string]int{
		"zones": storetest.MidSize.Zones, "users": storetest.MidSize.Users, "machines": storetest.MidSize.Machines,
		"resources": storetest.MidSize.Applications + storetest.MidSize.Desktops, "entitlements": storetest.MidSize.Entitlements,
	} {
		var n int
		if err := db.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil || n != want {
			t.Errorf("%s: %d rows, %v; want %d", table, n, err, want)
		}
	}
	var fk int
	if err := db.QueryRow(`SELECT count(*) FROM pragma_foreign_key_check`).Scan(&fk); err != nil || fk != 0 {
		t.Errorf("foreign key check: %d violations, %v", fk, err)
	}
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal mode %q, %v; want wal", mode, err)
	}
}

func TestDatabaseFilesAreOwnerOnly(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	for _, tc := range []struct {
		name  string
		wider bool // the files exist, left 0644 by an earlier usher
	}{{"new", false}, {"existing", true}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "site.db")
			if tc.wider {
				s := MustOpen(t, path)
				s.Close()
				for _, p := range []string{path, path + "-wal", path + "-shm"} {
					if err := os.Chmod(p, 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
						t.Fatal(err)
					}
				}
			}
			s := MustOpen(t, path)
			if err := s.Update(context.Background(), func(tx site.Tx) error {
				return tx.Groups().Create(context.Background(), site.Group{Name: "g"})
			}); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{path, path + "-wal", path + "-shm"} {
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if got := fi.Mode().Perm(); got != 0o600 {
					t.Errorf("%s: mode %o, want 600", filepath.Base(p), got)
				}
			}
		})
	}
}
