package server

import (
	"context"
	"errors"
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

// StoreConfig says which site DB OpenStore opens: the PostgreSQL
// database DB names; else the SQLite file SQLite (a site outside any
// data directory, as a throwaway empty one); else the embedded SQLite
// file of the data directory Dir, or of the one at DataDir (made when
// missing).
type StoreConfig struct {
	DB      string
	SQLite  string
	Dir     *datadir.Dir
	DataDir string
	Logger  *slog.Logger // nil: the stores' default
}

// OpenStore opens the site DB cfg names (a PostgreSQL pool fitted to
// the room its server has: pgstore.SizePool fails, naming the numbers,
// when not even the floor fits), for usher serve (through
// Open), the one-shot commands (apply, export, admin) and the benches.
// where names it for logs and messages, never with a password. A DB
// that is no PostgreSQL URL or DSN is an error that says what --db
// takes (CheckDB).
func OpenStore(ctx context.Context, cfg StoreConfig) (store site.Store, where string, err error) {
	switch {
	case cfg.DB != "":
		if err := CheckDB(cfg.DB); err != nil {
			return nil, "", err
		}
		// The pool fits what the server has room for (the DSN's
		// pool_max_conns, else pgstore's default, at most), or the
		// command stops, saying what to change.
		pool, room, err := pgstore.SizePool(ctx, cfg.DB, 0)
		if err != nil {
			return nil, "", err
		}
		if cfg.Logger != nil {
			cfg.Logger.Info("site DB pool sized", "max_conns", pool, "room", room.Free, "max_connections", room.MaxConnections, "in_use", room.InUse)
		}
		st, err := pgstore.Open(ctx, cfg.DB, pgstore.Options{Logger: cfg.Logger, MaxConns: pool})
		if err != nil {
			return nil, "", err // pgstore's errors name the database without its password
		}
		return st, st.Target(), nil
	case cfg.SQLite != "":
		st, err := sqlitestore.Open(ctx, cfg.SQLite, sqlitestore.Options{Logger: cfg.Logger})
		if err != nil {
			return nil, "", err
		}
		return st, cfg.SQLite, nil
	}
	dir := cfg.Dir
	if dir == nil {
		if cfg.DataDir == "" {
			return nil, "", fmt.Errorf("open the site DB: no data directory")
		}
		if dir, err = datadir.Open(cfg.DataDir, false); err != nil {
			return nil, "", err
		}
	}
	st, err := dir.OpenStore(ctx, sqlitestore.Options{Logger: cfg.Logger})
	if err != nil {
		return nil, "", err
	}
	return st, dir.SiteDB(), nil
}

// ApplySite applies a site configuration to the site DB cfg names, as
// `usher apply` does (without pruning what it does not name), and
// closes it: how the benches give a new site its configuration before
// they Open it.
func ApplySite(ctx context.Context, cfg StoreConfig, sc *site.Config) error {
	st, _, err := OpenStore(ctx, cfg)
	if err != nil {
		return err
	}
	err = st.Update(ctx, func(tx site.Tx) error { _, err := site.ApplyConfig(ctx, tx, sc, false); return err })
	return errors.Join(err, st.Close())
}
