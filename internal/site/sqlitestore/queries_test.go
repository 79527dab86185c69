package sqlitestore

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/storetest"
)

// TestLoadConfigQueriesDoNotGrowWithSize guards against N+1 queries: the
// whole configuration loads with a fixed number of statements, one or two
// per table, however many objects there are.
func TestLoadConfigQueriesDoNotGrowWithSize(t *testing.T) {
	ctx := context.Background()
	count := func(size storetest.Sizes) int {
		s, err := Open(ctx, filepath.Join(t.TempDir(), "site.db"), Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Update(ctx, func(tx site.Tx) error {
			_, err := site.ApplyConfig(ctx, tx, storetest.GenerateConfig(size), false)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := s.View(ctx, func(stx site.Tx) error {
			if _, err := site.LoadConfig(ctx, stx); err != nil {
				return err
			}
			n = stx.(*tx).queries
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	small, demo := count(storetest.MidSize), count(storetest.DemoSize)
	if small != demo || demo > 20 {
		t.Fatalf("LoadConfig ran %d statements for the mid-size site and %d for the demo site; want the same few", small, demo)
	}
	t.Logf("LoadConfig: %d statements", demo)
}

// TestStatementsPreparedOncePerConnection: a query a transaction meets
// first is prepared on the pool once the transaction ends, and later
// transactions take it from there, on both pools, with the same results.
func TestStatementsPreparedOncePerConnection(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "site.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cfg := storetest.GenerateConfig(storetest.MidSize)
	apply := func() {
		t.Helper()
		if err := s.Update(ctx, func(tx site.Tx) error { _, err := site.ApplyConfig(ctx, tx, cfg, false); return err }); err != nil {
			t.Fatal(err)
		}
	}
	load := func() *site.Config {
		t.Helper()
		var c *site.Config
		if err := s.View(ctx, func(tx site.Tx) error { var err error; c, err = site.LoadConfig(ctx, tx); return err }); err != nil {
			t.Fatal(err)
		}
		return c
	}
	apply()
	first := load()
	s.writeStmts.running.Wait()
	s.readStmts.running.Wait()
	if s.writeStmts.hits.Load() != 0 || len(s.readStmts.stmts) == 0 || len(s.writeStmts.stmts) == 0 {
		t.Fatalf("after the first transactions: %d write hits, %d read and %d write statements cached",
			s.writeStmts.hits.Load(), len(s.readStmts.stmts), len(s.writeStmts.stmts))
	}
	apply()
	second := load()
	if s.writeStmts.hits.Load() == 0 || s.readStmts.hits.Load() == 0 {
		t.Fatalf("later transactions prepared every statement again: %d write and %d read hits", s.writeStmts.hits.Load(), s.readStmts.hits.Load())
	}
	if len(first.Users) != len(second.Users) || len(first.Applications) != len(second.Applications) || len(second.Users) == 0 {
		t.Fatalf("the cached statements load %d users and %d applications, the first %d and %d",
			len(second.Users), len(second.Applications), len(first.Users), len(first.Applications))
	}
}
