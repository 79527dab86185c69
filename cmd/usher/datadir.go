package main

import (
	"flag"

	"github.com/usher-vdi/usher/internal/datadir"
)

// dbFlag registers --db, the PostgreSQL site DB, with its default:
// $USHER_DB, else none (the data directory's embedded SQLite).
func (m *Main) dbFlag(fs *flag.FlagSet) *string {
	return fs.String("db", m.Getenv("USHER_DB"), "site DB: a PostgreSQL URL, postgres://user@host:5432/dbname (env USHER_DB); default: the data directory's embedded SQLite")
}

// dataFlag registers --data with its default: $USHER_DATA, else
// $XDG_STATE_HOME/usher, else ~/.local/state/usher.
func (m *Main) dataFlag(fs *flag.FlagSet) *string {
	return fs.String("data", datadir.Default(m.Getenv), "data directory holding the site DB (env USHER_DATA)")
}
