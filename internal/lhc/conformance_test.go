package lhc

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
	"github.com/usher-vdi/usher/internal/site/storetest"
)

// openOver opens a Store over primary, running its monitor until the
// test ends.
func openOver(t *testing.T, primary site.Store) *Store {
	t.Helper()
	s, err := Open(t.Context(), Options{Open: func(context.Context) (site.Store, error) { return primary, nil }, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; s.Close() })
	return s
}

// TestConformanceNormal runs the store conformance suite over the Store
// in normal mode, serving from an SQLite site DB.
func TestConformanceNormal(t *testing.T) {
	storetest.Run(t, func(t *testing.T) site.Store {
		db, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "site.db"), sqlitestore.Options{})
		if err != nil {
			t.Fatalf("open the site DB: %v", err)
		}
		return openOver(t, db)
	})
}
