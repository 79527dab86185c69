package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

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

// migrateLockClass is the first key of the advisory lock that migrations
// hold ("ushr"); the second is a hash of the schema's name, so that
// brokers of one site migrate its schema one at a time, and sites in
// other schemas of the database do not wait for them.
const migrateLockClass = 0x75736872

// migrate applies the pending migrations and seeds the settings of a new
// site, all in one transaction under the advisory lock: brokers starting
// together against a new database wait for the first, and find the schema
// migrated.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	conn, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", s.dbErr(ctx, conn, err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	// The lock first: brokers starting together against a new database
	// must not race to create the table.
	var current int
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+strconv.Itoa(migrateLockClass)+`, hashtext(current_schema()));
		CREATE TABLE IF NOT EXISTS schema_migrations (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", s.dbErr(ctx, conn, err))
	}
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("read schema version: %w", s.dbErr(ctx, conn, err))
	}
	if current > len(ms) {
		return fmt.Errorf("%w: the database is at schema version %d, this usher knows up to %d; upgrade usher", ErrSchemaTooNew, current, len(ms))
	}
	for _, m := range ms[current:] {
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("migration %04d_%s: %w", m.version, m.name, s.dbErr(ctx, conn, err))
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
			return fmt.Errorf("migration %04d_%s: %w", m.version, m.name, s.dbErr(ctx, conn, err))
		}
	}
	// A new site starts with the default settings at version 1.
	def := site.DefaultSettings()
	if _, err := tx.Exec(ctx, `INSERT INTO settings (id, name, domain, trust_xml_requests, anonymous_app_data, server_data_credentials, config_version)
		VALUES (1, $1, $2, $3, $4, $5, 1) ON CONFLICT (id) DO NOTHING`,
		def.Name, def.Domain, def.TrustXMLRequests, def.AnonymousAppData, def.ServerDataCredentials); err != nil {
		return fmt.Errorf("seed settings: %w", s.dbErr(ctx, conn, err))
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate: commit: %w", s.dbErr(ctx, conn, err))
	}
	if current == 0 { // a new database logs one line; an upgrade, each step
		s.log.Info("created site database", logKeyVersion, len(ms))
		return nil
	}
	for _, m := range ms[current:] {
		s.log.Info("migrated site database", logKeyVersion, m.version, logKeyName, m.name)
	}
	return nil
}
