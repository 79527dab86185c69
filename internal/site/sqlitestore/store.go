package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/usher-vdi/usher/internal/site"
)

// Defaults for Options.
const (
	DefaultReadConns   = 4
	DefaultBusyTimeout = 5 * time.Second
)

// Log attribute keys.
const (
	logKeyPath    = "path"
	logKeyVersion = "version"
	logKeyName    = "name"
	logKeyError   = "error"
)

// Options tune a Store. The zero value is ready to use.
type Options struct {
	// Logger receives migration and failure logs; nil discards them.
	Logger *slog.Logger
	// ReadConns is the size of the read pool; 0 means DefaultReadConns.
	ReadConns int
	// BusyTimeout is how long a statement waits for a lock another process
	// holds before it fails with EUnavailable; 0 means DefaultBusyTimeout.
	BusyTimeout time.Duration
	// ChangeHistoryKeep is the most change records kept (site.ChangeHistory);
	// 0 means site.ChangeHistoryKeep.
	ChangeHistoryKeep int
}

// Store is a site database in one SQLite file.
type Store struct {
	path   string
	log    *slog.Logger
	write  *sql.DB // one connection; every Update
	read   *sql.DB // a pool; every View
	closed atomic.Bool

	writeStmts, readStmts *stmtCache
	historyKeep           int
}

var _ site.Store = (*Store)(nil)

// Open opens the SQLite database at path, creating it when it does not
// exist, and migrates its schema. It refuses a database whose schema is
// newer than this binary knows (ErrSchemaTooNew).
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("open site database: path is empty")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = DefaultReadConns
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = DefaultBusyTimeout
	}
	s := &Store{
		path: path,
		log:  opts.Logger.With(logKeyPath, path),

		historyKeep: cmp.Or(max(opts.ChangeHistoryKeep, 0), site.ChangeHistoryKeep),
	}

	if err := ownerOnly(path); err != nil {
		return nil, fmt.Errorf("open site database %s: %w", path, err)
	}
	var err error
	s.write, err = sql.Open("sqlite", dsn(path, opts.BusyTimeout, true))
	if err != nil {
		return nil, fmt.Errorf("open site database %s: %w", path, err)
	}
	s.write.SetMaxOpenConns(1)
	s.write.SetMaxIdleConns(1)
	s.write.SetConnMaxLifetime(0)
	s.write.SetConnMaxIdleTime(0)
	if err := s.migrate(ctx); err != nil {
		s.write.Close()
		return nil, fmt.Errorf("open site database %s: %w", path, err)
	}

	s.read, err = sql.Open("sqlite", dsn(path, opts.BusyTimeout, false))
	if err != nil {
		s.write.Close()
		return nil, fmt.Errorf("open site database %s: %w", path, err)
	}
	s.read.SetMaxOpenConns(opts.ReadConns)
	s.read.SetMaxIdleConns(opts.ReadConns)
	s.read.SetConnMaxLifetime(0)
	s.read.SetConnMaxIdleTime(0)
	if err := s.read.PingContext(ctx); err != nil {
		s.read.Close()
		s.write.Close()
		return nil, fmt.Errorf("open site database %s: %w", path, err)
	}
	if err := ownerOnly(path); err != nil {
		s.Close()
		return nil, fmt.Errorf("open site database %s: %w", path, err)
	}
	s.writeStmts, s.readStmts = newStmtCache(s.write), newStmtCache(s.read)
	return s, nil
}

// ownerOnly creates the database file when it does not exist and makes it
// and its WAL and shared-memory files readable and writable by their owner
// alone (0600), whatever the umask or an earlier mode. SQLite gives the
// -wal and -shm files it creates the database file's mode, so creating the
// database 0600 first keeps them private from the start; the chmods cover
// files an earlier usher left wider.
func ownerOnly(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// dsn returns the data source name of a write connection (WAL, BEGIN
// IMMEDIATE, foreign keys) or of a read connection (query only).
func dsn(path string, busy time.Duration, write bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(busy.Milliseconds(), 10)+")")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	if write {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Set("_txlock", "immediate")
	} else {
		q.Add("_pragma", "query_only(1)")
		q.Set("_txlock", "deferred")
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	p := filepath.ToSlash(path)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // a Windows drive: file:///C:/site.db
	}
	u := url.URL{Scheme: "file", Path: p, RawQuery: q.Encode()}
	return u.String()
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Close closes the database. Transactions after Close fail with
// EUnavailable. Closing twice is harmless.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.writeStmts != nil {
		s.writeStmts.close()
		s.readStmts.close()
	}
	return errors.Join(s.read.Close(), s.write.Close())
}

var errClosed = site.Errorf(site.EUnavailable, "site database is closed")

// View runs fn in a read-only transaction on a snapshot of the database.
func (s *Store) View(ctx context.Context, fn func(site.Tx) error) error {
	if s.closed.Load() {
		return errClosed
	}
	sqlTx, err := s.read.BeginTx(ctx, nil)
	if err != nil {
		return s.beginErr(err)
	}
	tx := &tx{tx: sqlTx, readOnly: true, cache: s.readStmts}
	defer s.readStmts.prepareWanted()
	defer sqlTx.Rollback()
	return fn(tx)
}

// Update runs fn in a read-write transaction and commits it when fn returns
// nil. A transaction that changed the configuration moves the configuration
// version by one. Updates run one at a time; fn must not call Update.
func (s *Store) Update(ctx context.Context, fn func(site.Tx) error) error {
	if s.closed.Load() {
		return errClosed
	}
	sqlTx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return s.beginErr(err)
	}
	tx := &tx{tx: sqlTx, cache: s.writeStmts, historyKeep: s.historyKeep}
	committed := false
	defer s.writeStmts.prepareWanted() // after the rollback below: the connection is free
	defer func() {
		if !committed {
			if rerr := sqlTx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
				s.log.Error("roll back site database transaction", logKeyError, rerr)
			}
		}
	}()

	if err := fn(tx); err != nil {
		return err
	}
	if tx.broken != nil {
		return fmt.Errorf("transaction rolled back after a failed write: %w", tx.broken)
	}
	if tx.configChanged {
		if err := tx.moveVersion(ctx); err != nil {
			return err
		}
	}
	if len(tx.history) > 0 {
		if err := tx.writeHistory(ctx); err != nil {
			return err
		}
	}
	if tx.pinVersion > 0 {
		if err := tx.pin(ctx); err != nil {
			return err
		}
	}
	if err := sqlTx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", dbErr(err))
	}
	committed = true
	return nil
}

func (s *Store) beginErr(err error) error {
	if s.closed.Load() {
		return errClosed
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %w", site.Errorf(site.EUnavailable, "site database is unavailable"), err)
}

// dbErr turns the errors of a busy, locked or unreachable database into
// EUnavailable errors, keeping the cause in the chain for logs.
func dbErr(err error) error {
	if err == nil {
		return nil
	}
	var se *site.Error
	if errors.As(err, &se) {
		return err
	}
	var e *sqlite.Error
	if errors.As(err, &e) {
		switch e.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return fmt.Errorf("%w: %w", site.Errorf(site.EUnavailable, "site database is busy"), err)
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY:
			return fmt.Errorf("%w: %w", site.Errorf(site.EUnavailable, "site database is unavailable"), err)
		}
	}
	if errors.Is(err, sql.ErrConnDone) {
		return fmt.Errorf("%w: %w", site.Errorf(site.EUnavailable, "site database is unavailable"), err)
	}
	return err
}

// isConstraint reports whether err is an SQLite constraint violation of
// the given extended code (SQLITE_CONSTRAINT_UNIQUE, ...).
func isConstraint(err error, code int) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code() == code
}

// usher_fold_name(name) is site.FoldName in SQL, for migrations that key
// account names by their folded form.
func init() {
	sqlite.MustRegisterDeterministicScalarFunction("usher_fold_name", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		s, ok := args[0].(string)
		if !ok {
			return nil, fmt.Errorf("usher_fold_name: argument is %T, not text", args[0])
		}
		return site.FoldName(s), nil
	})
}

var _ site.Placer = (*Store)(nil)

// Place seats a launch with site.PlaceTx in one Update: on a local file,
// round trips cost nothing.
// RecordHeartbeats records heartbeats with site.RecordHeartbeatsTx.
func (s *Store) RecordHeartbeats(ctx context.Context, hbs []site.Heartbeat) ([]site.HeartbeatVerdict, error) {
	var out []site.HeartbeatVerdict
	err := s.Update(ctx, func(tx site.Tx) (err error) {
		out, err = site.RecordHeartbeatsTx(ctx, tx, hbs)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ChangeSessions applies session changes with site.ChangeSessionsTx.
func (s *Store) ChangeSessions(ctx context.Context, changes []site.SessionChange) ([]site.SessionVerdict, error) {
	var out []site.SessionVerdict
	err := s.Update(ctx, func(tx site.Tx) (err error) {
		out, err = site.ChangeSessionsTx(ctx, tx, changes)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Store) Place(ctx context.Context, p site.Placement) (site.Placed, error) {
	if err := p.Validate(); err != nil {
		return site.Placed{}, err
	}
	var out site.Placed
	err := s.Update(ctx, func(tx site.Tx) error {
		var err error
		out, err = site.PlaceTx(ctx, tx, p)
		return err
	})
	if err != nil {
		return site.Placed{}, err
	}
	return out, nil
}
