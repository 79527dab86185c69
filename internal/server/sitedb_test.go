package server_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/datadir"
	"github.com/usher-vdi/usher/internal/pgtest"
	"github.com/usher-vdi/usher/internal/server"
	"github.com/usher-vdi/usher/internal/site"
)

// TestOpenStore: OpenStore opens each site DB a StoreConfig names, and
// ApplySite gives it a configuration the next opening sees; a --db
// that is no PostgreSQL one, or no site DB named at all, is refused.
func TestOpenStore(t *testing.T) {
	ctx := context.Background()
	cfg := &site.Config{Settings: site.Settings{Name: "test", Domain: "TEST"}, Zones: []site.Zone{{Name: "primary", Primary: true}}}
	data := filepath.Join(t.TempDir(), "data")
	for _, tc := range []struct {
		name  string
		cfg   server.StoreConfig
		where string // a part of where
	}{
		{"data directory", server.StoreConfig{DataDir: data}, filepath.Join(data, datadir.SiteDBFile)},
		{"SQLite file", server.StoreConfig{SQLite: filepath.Join(t.TempDir(), "site.db")}, "site.db"},
		{"PostgreSQL", server.StoreConfig{DB: pgtest.DSN(t)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := server.ApplySite(ctx, tc.cfg, cfg); err != nil {
				t.Fatal(err)
			}
			st, where, err := server.OpenStore(ctx, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if !strings.Contains(where, tc.where) || where == "" {
				t.Fatalf("where %q does not name %q", where, tc.where)
			}
			if err := st.View(ctx, func(tx site.Tx) error { _, err := tx.Zones().Get(ctx, "primary"); return err }); err != nil {
				t.Fatalf("the zone ApplySite applied: %v", err)
			}
		})
	}
	if _, _, err := server.OpenStore(ctx, server.StoreConfig{DB: "site.db"}); err == nil || !strings.Contains(err.Error(), "--db takes a PostgreSQL URL") {
		t.Fatalf("a --db that is a file: %v", err)
	}
	if _, _, err := server.OpenStore(ctx, server.StoreConfig{}); err == nil || !strings.Contains(err.Error(), "no data directory") {
		t.Fatalf("no site DB named: %v", err)
	}
}
