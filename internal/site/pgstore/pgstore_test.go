package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/usher-vdi/usher/internal/pgtest"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/pgstore"
	"github.com/usher-vdi/usher/internal/site/storetest"
)

// TestMain runs the tests on the server pgtest finds or starts, and fails
// when one of them leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(mainFunc(func() int { return pgtest.Main(m) }))
}

type mainFunc func() int

func (f mainFunc) Run() int { return f() }

// MustOpen opens a store on dsn and closes it when the test ends.
func MustOpen(tb testing.TB, dsn string) *pgstore.Store {
	tb.Helper()
	return MustOpenWith(tb, dsn, pgstore.Options{})
}

// MustOpenWith opens a store on dsn with opts and closes it when the test
// ends.
func MustOpenWith(tb testing.TB, dsn string, opts pgstore.Options) *pgstore.Store {
	tb.Helper()
	s, err := pgstore.Open(context.Background(), dsn, opts)
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) site.Store {
		return MustOpen(t, pgtest.DSN(t))
	})
}

func TestChangeHistoryKeep(t *testing.T) {
	storetest.RunChangeHistoryKeep(t, func(t *testing.T, keep int) site.Store {
		return MustOpenWith(t, pgtest.DSN(t), pgstore.Options{ChangeHistoryKeep: keep})
	})
}

// TestConformanceWithoutPreparedStatements runs the suite with the
// statements sent unprepared, in one round trip each, as behind a pooler
// that keeps no prepared statements (default_query_exec_mode=exec in the
// DSN): every parameter's type is spelled out.
func TestConformanceWithoutPreparedStatements(t *testing.T) {
	if testing.Short() {
		t.Skip("the suite runs once with prepared statements in -short")
	}
	storetest.Run(t, func(t *testing.T) site.Store {
		return MustOpen(t, setting(t, pgtest.DSN(t), "default_query_exec_mode", "exec"))
	})
}

// setting adds a setting to a DSN of pgtest.
func setting(t *testing.T, dsn, key, value string) string {
	t.Helper()
	if strings.Contains(dsn, "://") {
		return dsn + "&" + key + "=" + value
	}
	return dsn + " " + key + "=" + value
}

// raw connects to the store's schema without the store, as another
// program would.
func raw(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestReopenKeepsDataAndVersion(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s, err := pgstore.Open(ctx, dsn, pgstore.Options{})
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
		return tx.Admins().Create(ctx, site.Admin{Name: "root", PasswordHash: "$argon2id$x", CreatedAt: time.Unix(1700000000, 123456000)})
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	s = MustOpen(t, dsn)
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
		if err != nil || !a.CreatedAt.Equal(time.Unix(1700000000, 123456000)) || a.CreatedAt.Location() != time.UTC {
			t.Errorf("admin = %+v, %v; want created at 2023-11-14T22:13:20.123456Z, in UTC", a, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestMigrationsAreIdempotent(t *testing.T) {
	dsn := pgtest.DSN(t)
	for range 3 {
		s, err := pgstore.Open(context.Background(), dsn, pgstore.Options{})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		s.Close()
	}
	wantMigrated(t, dsn)
}

// wantMigrated fails the test unless the schema holds every migration
// once and one settings row.
func wantMigrated(t *testing.T, dsn string) {
	t.Helper()
	conn := raw(t, dsn)
	var n, max int
	if err := conn.QueryRow(context.Background(), `SELECT count(*), max(version) FROM schema_migrations`).Scan(&n, &max); err != nil {
		t.Fatal(err)
	}
	if want := pgstore.SchemaVersion(); n != want || max != want {
		t.Fatalf("schema_migrations has %d rows up to version %d, want %d", n, max, want)
	}
	var settings int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM settings`).Scan(&settings); err != nil || settings != 1 {
		t.Fatalf("settings rows = %d, %v; want 1", settings, err)
	}
}

// TestBrokersStartingTogetherMigrateOnce opens several stores on one new
// schema at once, as brokers that start together do: the advisory lock
// lets one migrate and the others find the schema migrated.
func TestBrokersStartingTogetherMigrateOnce(t *testing.T) {
	dsn := pgtest.DSN(t)
	const brokers = 6
	var wg sync.WaitGroup
	errs := make(chan error, brokers)
	for range brokers {
		wg.Go(func() {
			s, err := pgstore.Open(context.Background(), dsn, pgstore.Options{})
			if err != nil {
				errs <- err
				return
			}
			errs <- s.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("open: %v", err)
		}
	}
	wantMigrated(t, dsn)
	s := MustOpen(t, dsn)
	if err := s.View(context.Background(), func(tx site.Tx) error {
		v, err := tx.ConfigVersion(context.Background())
		if err == nil && v != 1 {
			err = fmt.Errorf("config version %d, want 1", v)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func TestFutureSchemaIsRefused(t *testing.T) {
	dsn := pgtest.DSN(t)
	s, err := pgstore.Open(context.Background(), dsn, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	future := pgstore.SchemaVersion() + 1
	if _, err := raw(t, dsn).Exec(context.Background(), `INSERT INTO schema_migrations (version, name) VALUES ($1, 'from_the_future')`, future); err != nil {
		t.Fatal(err)
	}
	_, err = pgstore.Open(context.Background(), dsn, pgstore.Options{})
	if !errors.Is(err, pgstore.ErrSchemaTooNew) {
		t.Fatalf("open: %v, want ErrSchemaTooNew", err)
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprint(future)) || !strings.Contains(msg, "upgrade usher") {
		t.Fatalf("error %q does not say which versions or what to do", msg)
	}
}

func TestSchemaIsRelational(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s := MustOpen(t, dsn)
	if err := s.Update(ctx, func(tx site.Tx) error {
		_, err := site.ApplyConfig(ctx, tx, storetest.GenerateConfig(storetest.MidSize), false)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	conn := raw(t, dsn)
	for table, want := range map[string]int{
		"zones": storetest.MidSize.Zones, "users": storetest.MidSize.Users, "machines": storetest.MidSize.Machines,
		"machine_status": storetest.MidSize.Machines, "machine_credentials": storetest.MidSize.Machines,
		"resources": storetest.MidSize.Applications + storetest.MidSize.Desktops, "entitlements": storetest.MidSize.Entitlements,
	} {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil || n != want {
			t.Errorf("%s: %d rows, %v; want %d", table, n, err, want)
		}
	}
	// Every reference is a foreign key, and every name sorts as bytes.
	var fks, names int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND connamespace = current_schema()::regnamespace`).Scan(&fks); err != nil || fks != 20 {
		t.Errorf("%d foreign keys, %v; want 20", fks, err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
		WHERE table_schema = current_schema() AND column_name IN ('name', 'name_key', 'id') AND table_name NOT IN ('schema_migrations', 'settings')
		AND coalesce(collation_name, '') <> 'C'`).Scan(&names); err != nil || names != 0 {
		t.Errorf("%d name columns not in the C collation, %v", names, err)
	}
}

// TestViewsRunDuringLongUpdate: views neither wait for an Update that
// holds the configuration lock nor see what it has not committed.
func TestViewsRunDuringLongUpdate(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t, pgtest.DSN(t))
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
			<-release // hold the transaction, and its locks, open
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
	wg.Wait() // every view finished while the update holds its locks
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

// holdUpdate runs fn in an Update that stays open until the returned
// release is called, which returns the Update's error.
func holdUpdate(t *testing.T, s site.Store, fn func(ctx context.Context, tx site.Tx) error) (release func() error) {
	t.Helper()
	ctx := context.Background()
	inside, hold := make(chan error, 1), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Update(ctx, func(tx site.Tx) error {
			err := fn(ctx, tx)
			inside <- err
			if err != nil {
				return err
			}
			<-hold
			return nil
		})
	}()
	if err := <-inside; err != nil {
		t.Fatalf("held update: %v", err)
	}
	var once sync.Once
	var err error
	release = func() error {
		once.Do(func() { close(hold); err = <-done })
		return err
	}
	t.Cleanup(func() { release() })
	return release
}

func TestLockedDatabaseIsUnavailable(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s := MustOpenWith(t, dsn, pgstore.Options{LockTimeout: 50 * time.Millisecond})
	// Another broker changes the configuration.
	other := MustOpen(t, dsn)
	release := holdUpdate(t, other, func(ctx context.Context, tx site.Tx) error {
		return tx.Zones().Create(ctx, site.Zone{Name: "theirs"})
	})
	err := s.Update(ctx, func(tx site.Tx) error { return tx.Zones().Create(ctx, site.Zone{Name: "z"}) })
	if site.ErrorCode(err) != site.EUnavailable {
		t.Fatalf("update while locked: %v, want code %s", err, site.EUnavailable)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx site.Tx) error { return tx.Zones().Create(ctx, site.Zone{Name: "z"}) }); err != nil {
		t.Fatalf("update after the lock is gone: %v", err)
	}
}

// openBase opens a store holding a zone, a catalog, a user, machines m1
// and m2, a delivery group and an application.
func openBase(t *testing.T) (site.Store, string) {
	t.Helper()
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s := MustOpen(t, dsn)
	if err := s.Update(ctx, func(tx site.Tx) error {
		for _, err := range []error{
			tx.Zones().Create(ctx, site.Zone{Name: "z", Primary: true}),
			tx.Catalogs().Create(ctx, site.Catalog{Name: "c", Kind: site.MultiSession, Zone: "z"}),
			tx.Users().Create(ctx, site.User{Name: "u"}),
			tx.Machines().Create(ctx, site.Machine{Name: "m1", Catalog: "c", Address: "h1:1"}),
			tx.Machines().Create(ctx, site.Machine{Name: "m2", Catalog: "c", Address: "h2:1"}),
			tx.DeliveryGroups().Create(ctx, site.NewDeliveryGroup("dg", "c")),
			tx.Applications().Create(ctx, site.Resource{Kind: site.Application, Name: "app", DisplayName: "App", CommandLine: "app", DeliveryGroups: []string{"dg"}}),
		} {
			if err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return s, dsn
}

// claim is a broker's launch: read the machine's status, count a session
// on it and record the session.
func claim(ctx context.Context, tx site.Tx, machine, id string) error {
	st, err := tx.MachineStatus(ctx, machine)
	if err != nil {
		return err
	}
	st.Sessions++
	if err := tx.SetMachineStatus(ctx, machine, st); err != nil {
		return err
	}
	return tx.Sessions().Create(ctx, site.Session{ID: id, User: "u", Resource: "app", DeliveryGroup: "dg", Machine: machine, State: site.SessionPending})
}

func TestMachineStatusLocksOnlyItsMachine(t *testing.T) {
	ctx := context.Background()
	s, _ := openBase(t)
	// A broker holds m1's status.
	release := holdUpdate(t, s, func(ctx context.Context, tx site.Tx) error { return claim(ctx, tx, "m1", "held") })

	// Another claims m2 meanwhile, and a configuration change goes through.
	if err := s.Update(ctx, func(tx site.Tx) error { return claim(ctx, tx, "m2", "other") }); err != nil {
		t.Fatalf("claim of another machine while m1 is held: %v", err)
	}
	if err := s.Update(ctx, func(tx site.Tx) error {
		m, err := tx.Machines().Get(ctx, "m1")
		if err != nil {
			return err
		}
		m.Maintenance = true
		return tx.Machines().Update(ctx, m)
	}); err != nil {
		t.Fatalf("configuration change of m1 while its status is held: %v", err)
	}

	// A claim of m1 waits for the first, then sees its count.
	second := make(chan error, 1)
	go func() { second <- s.Update(ctx, func(tx site.Tx) error { return claim(ctx, tx, "m1", "second") }) }()
	select {
	case err := <-second:
		t.Fatalf("a second claim of m1 did not wait for the first: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if err := s.View(ctx, func(tx site.Tx) error {
		st, err := tx.MachineStatus(ctx, "m1")
		if err == nil && st.Sessions != 2 {
			err = fmt.Errorf("m1 counts %d sessions, want 2", st.Sessions)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentClaimsCountEveryOne: read, check and write of one
// machine's status from many brokers at once loses no write.
func TestConcurrentClaimsCountEveryOne(t *testing.T) {
	ctx := context.Background()
	s, dsn := openBase(t)
	stores := []site.Store{s, MustOpen(t, dsn), MustOpen(t, dsn)} // three brokers
	const perStore = 20
	var wg sync.WaitGroup
	for i, st := range stores {
		wg.Go(func() {
			for j := range perStore {
				if err := st.Update(ctx, func(tx site.Tx) error { return claim(ctx, tx, "m1", fmt.Sprintf("s%d-%d", i, j)) }); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if err := s.View(ctx, func(tx site.Tx) error {
		st, err := tx.MachineStatus(ctx, "m1")
		if err == nil && st.Sessions != len(stores)*perStore {
			err = fmt.Errorf("m1 counts %d sessions, want %d", st.Sessions, len(stores)*perStore)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestMachineDeleteWaitsForSessionsBeingCreated: a machine's delete that
// starts while a session is being created on it counts that session.
func TestMachineDeleteWaitsForSessionsBeingCreated(t *testing.T) {
	ctx := context.Background()
	s, dsn := openBase(t)
	deleter := MustOpen(t, setting(t, dsn, "application_name", "usher-delete-waits"))
	release := holdUpdate(t, s, func(ctx context.Context, tx site.Tx) error { return claim(ctx, tx, "m1", "late") })
	deleted := make(chan error, 1)
	go func() {
		deleted <- deleter.Update(ctx, func(tx site.Tx) error { return tx.Machines().Delete(ctx, "m1") })
	}()
	waitForLockWait(t, dsn, "usher-delete-waits") // the delete started, and waits for the session's transaction
	if err := release(); err != nil {
		t.Fatal(err)
	}
	err := <-deleted
	if site.ErrorCode(err) != site.EConflict || !strings.Contains(site.ErrorMessage(err), "1 live session") {
		t.Fatalf("delete of a machine with a session committed meanwhile: %v, want a conflict counting 1 live session", err)
	}
}

// TestDeadlockIsUnavailable: two Updates that lock two machines in
// opposite orders deadlock; PostgreSQL breaks the cycle, and the Update
// it fails says that the database was busy.
func TestDeadlockIsUnavailable(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for PostgreSQL's deadlock timeout")
	}
	ctx := context.Background()
	s, _ := openBase(t)
	var first, second sync.WaitGroup
	first.Add(2)
	second.Add(2)
	errs := make(chan error, 2)
	for _, order := range [][2]string{{"m1", "m2"}, {"m2", "m1"}} {
		go func() {
			defer second.Done()
			errs <- s.Update(ctx, func(tx site.Tx) error {
				if _, err := tx.MachineStatus(ctx, order[0]); err != nil {
					first.Done()
					return err
				}
				first.Done()
				first.Wait() // both hold their first machine
				_, err := tx.MachineStatus(ctx, order[1])
				return err
			})
		}()
	}
	second.Wait()
	close(errs)
	var failed int
	for err := range errs {
		if err != nil {
			failed++
			if site.ErrorCode(err) != site.EUnavailable || !strings.Contains(site.ErrorMessage(err), "try again") {
				t.Errorf("deadlocked update: %v, want code %s asking to try again", err, site.EUnavailable)
			}
		}
	}
	if failed != 1 {
		t.Fatalf("%d updates failed, want 1", failed)
	}
}
