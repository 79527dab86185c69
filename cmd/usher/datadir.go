package main

import (
	"flag"

	"github.com/usher-vdi/usher/internal/datadir"
)

// dataFlag registers --data with its default: $USHER_DATA, else
// $XDG_STATE_HOME/usher, else ~/.local/state/usher.
func (m *Main) dataFlag(fs *flag.FlagSet) *string {
	return fs.String("data", datadir.Default(m.Getenv), "data directory holding the site DB (env USHER_DATA)")
}
