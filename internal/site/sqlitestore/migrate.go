package sqlitestore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// ErrSchemaTooNew is returned by Open for a database that a newer usher
// has migrated: this binary does not know its schema.
var ErrSchemaTooNew = errors.New("site database schema is newer than this usher")

// migration is one schema change, from migrations/NNNN_name.sql.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in version order.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		num, name, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("migration %s: name is not NNNN_name.sql", e.Name())
		}
		b, err := migrationFiles.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: name, sql: string(b)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %04d_%s: want version %d", m.version, m.name, i+1)
		}
	}
	return ms, nil
}

// SchemaVersion is the schema version this binary migrates to.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil {
		panic(err) // the embedded files are checked by tests
	}
	return len(ms)
}

// migrate applies the pending migrations on the write connection, each in
// its own transaction, and seeds the settings of a new site.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	if _, err := s.write.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at TEXT NOT NULL
	) STRICT`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", dbErr(err))
	}
	var current int
	if err := s.write.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("read schema version: %w", dbErr(err))
	}
	if err := tooNew(current, len(ms)); err != nil {
		return err
	}
	// A new database logs one line; an upgrade, each step.
	level := slog.LevelInfo
	if current == 0 {
		level = slog.LevelDebug
	}
	for _, m := range ms[current:] {
		if err := s.apply(ctx, m, len(ms), level); err != nil {
			return err
		}
	}
	if current == 0 {
		s.log.Info("created site database", logKeyVersion, len(ms))
	}
	// A new site starts with the default settings at version 1.
	def := site.DefaultSettings()
	if _, err := s.write.ExecContext(ctx, `INSERT INTO settings (id, name, domain, trust_xml_requests, anonymous_app_data, server_data_credentials, config_version)
		SELECT 1, ?, ?, ?, ?, ?, 1 WHERE NOT EXISTS (SELECT 1 FROM settings)`,
		def.Name, def.Domain, def.TrustXMLRequests, def.AnonymousAppData, def.ServerDataCredentials); err != nil {
		return fmt.Errorf("seed settings: %w", dbErr(err))
	}
	return nil
}

// apply applies m unless the database has it already. It reads the
// version inside the write transaction, so that two processes opening one
// new database do not both apply it.
func (s *Store) apply(ctx context.Context, m migration, latest int, level slog.Level) error {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", dbErr(err))
	}
	defer tx.Rollback()
	var current int
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("migrate: %w", dbErr(err))
	}
	if err := tooNew(current, latest); err != nil {
		return err
	}
	if current >= m.version { // another process applied it meanwhile
		return nil
	}
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return fmt.Errorf("migration %04d_%s: %w", m.version, m.name, dbErr(err))
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		m.version, m.name, time.Now().UTC().Format(timeFormat)); err != nil {
		return fmt.Errorf("migration %04d_%s: %w", m.version, m.name, dbErr(err))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migration %04d_%s: commit: %w", m.version, m.name, dbErr(err))
	}
	s.log.Log(ctx, level, "migrated site database", logKeyVersion, m.version, logKeyName, m.name)
	return nil
}

func tooNew(current, latest int) error {
	if current > latest {
		return fmt.Errorf("%w: the database is at schema version %d, this usher knows up to %d; upgrade usher", ErrSchemaTooNew, current, latest)
	}
	return nil
}
