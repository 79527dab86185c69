package pgtest

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func TestWithSetting(t *testing.T) {
	for _, c := range []struct{ dsn, want string }{
		{"postgres://u@h:5432/db", "postgres://u@h:5432/db?search_path=s"},
		{"postgres://u@h/db?sslmode=disable", "postgres://u@h/db?search_path=s&sslmode=disable"},
		{"host=/tmp/x port=5432 user=postgres", "host=/tmp/x port=5432 user=postgres search_path='s'"},
	} {
		if got, err := withSetting(c.dsn, "search_path", "s"); err != nil || got != c.want {
			t.Errorf("withSetting(%q) = %q, %v; want %q", c.dsn, got, err, c.want)
		}
	}
}

// TestDSNIsAnEmptySchema: a test gets a schema of its own, empty, first
// on its search path, and dropped when it ends.
func TestDSNIsAnEmptySchema(t *testing.T) {
	ctx := context.Background()
	var schemas [2]string
	for i := range schemas {
		t.Run("", func(t *testing.T) {
			conn, err := pgx.Connect(ctx, DSN(t))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var tables int
			if err := conn.QueryRow(ctx, `SELECT current_schema(), (SELECT count(*) FROM pg_tables WHERE schemaname = current_schema())`).Scan(&schemas[i], &tables); err != nil {
				t.Fatal(err)
			}
			if tables != 0 {
				t.Fatalf("schema %s holds %d tables", schemas[i], tables)
			}
			if _, err := conn.Exec(ctx, `CREATE TABLE mine (x int)`); err != nil {
				t.Fatal(err)
			}
		})
	}
	if schemas[0] == schemas[1] || schemas[0] == "" {
		t.Fatalf("two tests got schemas %q and %q", schemas[0], schemas[1])
	}
	conn, err := pgx.Connect(ctx, Admin(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = ANY ($1)`, schemas[:]).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d schemas left after their tests, %v", left, err)
	}
}
