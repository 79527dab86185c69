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
