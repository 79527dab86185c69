package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/usher-vdi/usher/internal/datadir"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/pgstore"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
)

// IsPostgres reports whether db names a PostgreSQL site DB: a postgres://
// or postgresql:// URL, or a key=value DSN naming a host or a database.
func IsPostgres(db string) bool {
	if strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") {
		return true
	}
	for _, f := range strings.Fields(db) {
		if strings.HasPrefix(f, "host=") || strings.HasPrefix(f, "dbname=") {
			return true
		}
	}
	return false
}

// CheckDB checks the form of a --db value: empty (the data directory's
// embedded SQLite) or a PostgreSQL URL.
func CheckDB(db string) error {
	if db != "" && !IsPostgres(db) {
		return fmt.Errorf("--db takes a PostgreSQL URL (postgres://user@host:5432/dbname) or key=value DSN (host=... dbname=...); " +
			"without it the site DB is the embedded SQLite file of the data directory")
	}
	return nil
}

// OpenSiteDB opens a site DB: the PostgreSQL database db names, its pool
// fitted to the room its server has (pgstore.SizePool: it fails, naming
// the numbers, when not even the floor fits), or, when db is empty, the
// embedded SQLite file of dir. where names it for logs and messages,
// never with a password.
func OpenSiteDB(ctx context.Context, db string, dir *datadir.Dir, log *slog.Logger) (store site.Store, where string, err error) {
	if err := CheckDB(db); err != nil {
		return nil, "", err
	}
	if db == "" {
		st, err := dir.OpenStore(ctx, sqlitestore.Options{Logger: log})
		if err != nil {
			return nil, "", err
		}
		return st, dir.SiteDB(), nil
	}
	// The pool fits what the server has room for (the DSN's
	// pool_max_conns, else pgstore's default, at most), or the command
	// stops, saying what to change.
	pool, room, err := pgstore.SizePool(ctx, db, 0)
	if err != nil {
		return nil, "", err // pgstore's errors name the database without its password
	}
	if log != nil {
		log.Info("site DB pool sized", "max_conns", pool, "room", room.Free, "max_connections", room.MaxConnections, "in_use", room.InUse)
	}
	st, err := pgstore.Open(ctx, db, pgstore.Options{Logger: log, MaxConns: pool})
	if err != nil {
		return nil, "", err
	}
	return st, st.Target(), nil
}
