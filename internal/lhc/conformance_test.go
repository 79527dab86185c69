package lhc

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/pgtest"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/pgstore"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
	"github.com/usher-vdi/usher/internal/site/storetest"
)

// openOver opens a Store over primary with opts, running its monitor
// until the test ends.
func openOver(t *testing.T, primary site.Store, opts Options) *Store {
	t.Helper()
	opts.Open = func(context.Context) (site.Store, error) { return primary, nil }
	opts.Dir = t.TempDir()
	s, err := Open(t.Context(), opts)
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
		return openOver(t, db, Options{})
	})
}

// TestConformanceNormalPostgres runs the suite over the Store in normal
// mode, serving from a PostgreSQL site DB, as a broker of a PostgreSQL
// site does.
func TestConformanceNormalPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("the suite runs over an SQLite site DB in -short")
	}
	storetest.Run(t, func(t *testing.T) site.Store {
		db, err := pgstore.Open(t.Context(), pgtest.DSN(t), pgstore.Options{})
		if err != nil {
			t.Fatalf("open the site DB: %v", err)
		}
		return openOver(t, db, Options{})
	})
}

// TestConformanceOutage runs the store conformance suite over the Store
// in outage mode, serving from its local copy: the parts of the contract
// that a copy of a site holds (the suite skips the others, saying why),
// its fixtures written into the copy as a copy of the site DB would hold
// them.
func TestConformanceOutage(t *testing.T) {
	storetest.RunWith(t, func(t *testing.T) site.Store {
		db, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "site.db"), sqlitestore.Options{})
		if err != nil {
			t.Fatalf("open the site DB: %v", err)
		}
		// A copy is of a site a broker serves, which has its token key.
		if _, err := site.EnsureSecret(t.Context(), db, site.SecretTokenKey, func() ([]byte, error) { return []byte(strings.Repeat("k", 32)), nil }); err != nil {
			t.Fatal(err)
		}
		// Past its TakeoverWindow, in which, by design, a launch that
		// would go back to a session on a machine not registered here is
		// told to retry shortly (awaitTakeover), a copy places as the
		// site DB does.
		s := openOver(t, db, Options{TakeoverWindow: time.Nanosecond})
		if _, err := s.Force(t.Context(), true); err != nil {
			t.Fatalf("force outage mode: %v", err)
		}
		if !s.InOutage() {
			t.Fatal("forced outage: not in outage mode")
		}
		return s
	}, storetest.Capabilities{Seed: func(ctx context.Context, st site.Store, fn func(site.Tx) error) error {
		s := st.(*Store)
		s.gate.RLock()
		defer s.gate.RUnlock()
		if s.served() == nil {
			return errors.New("not in outage mode")
		}
		return s.local.Update(ctx, fn)
	}})
}
