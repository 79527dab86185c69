package pgcluster

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/usher-vdi/usher/internal/pgadmin"
)

// TestCluster starts a throwaway cluster, crashes it, starts it again
// and stops it: its data survive the crash, and its directory does not
// survive Stop.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster")
	}
	if _, err := binDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	c, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := pgadmin.Exec(ctx, c.DSN(), "CREATE TABLE t (x int); INSERT INTO t VALUES (1)"); err != nil {
		c.Stop()
		t.Fatal(err)
	}
	if err := c.Crash(); err != nil {
		c.Stop()
		t.Fatal(err)
	}
	if err := pgadmin.Exec(ctx, c.DSN(), "SELECT 1"); err == nil {
		c.Stop()
		t.Fatal("a crashed cluster answered")
	}
	if err := c.Start(); err != nil {
		c.Stop()
		t.Fatal(err)
	}
	if err := pgadmin.Exec(ctx, c.DSN(), "DO $$ BEGIN IF (SELECT count(*) FROM t) <> 1 THEN RAISE 'lost'; END IF; END $$"); err != nil {
		c.Stop()
		t.Fatalf("after the crash: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the cluster's directory is left: %v", err)
	}
}
