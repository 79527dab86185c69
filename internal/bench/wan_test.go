package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usher-vdi/usher/internal/pgadmin"
	"github.com/usher-vdi/usher/internal/pgtest"
)

// TestDBTapCountsRoundTrips: pgx through the tap, with its default
// statement cache: connecting is a round trip, a statement's first use
// prepares it in one more, a batch goes in one.
func TestDBTapCountsRoundTrips(t *testing.T) {
	dsn := pgtest.DSN(t)
	network, server, err := pgadmin.Server(dsn)
	if err != nil {
		t.Fatal(err)
	}
	tap, err := StartDBTap(network, server, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	via, err := pgadmin.Via(dsn, tap.Addr())
	if err == nil {
		via, err = pgadmin.With(via, "sslmode", "disable")
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, via)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	step := func(what string, want int64, fn func() error) DBTraffic {
		t.Helper()
		before := tap.Mark()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		d := tap.Mark().Sub(before)
		if d.RoundTrips != want {
			t.Errorf("%s: %d round trips (%v), want %d", what, d.RoundTrips, d.ByKind, want)
		}
		return d
	}
	if got := tap.Read(); got.RoundTrips < 1 || got.ByKind[KindStartup] != 1 || got.Opened != 1 || got.Open != 1 {
		t.Errorf("connecting: %+v", got)
	}
	q := func(sql string, args ...any) func() error {
		return func() error { _, err := conn.Exec(ctx, sql, args...); return err }
	}
	d := step("first use", 2, q("SELECT $1::int", 1))
	if d.ByKind["prepare: SELECT $1::int"] != 1 || d.ByKind["SELECT $1::int"] != 1 {
		t.Errorf("first use: %v", d.ByKind)
	}
	step("second use", 1, q("SELECT $1::int", 2))
	batch := func() error {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue("SELECT $1::int", 3)
		b.Queue("SELECT $1::int", 4)
		b.Queue("COMMIT")
		return conn.SendBatch(ctx, b).Close()
	}
	d = step("a batch, first sent", 2, batch)
	if d.ByKind["prepare: BEGIN; COMMIT"] != 1 || d.ByKind["BEGIN; SELECT $1::int; SELECT $1::int; COMMIT"] != 1 {
		t.Errorf("a batch, first sent: %v", d.ByKind)
	}
	step("a batch", 1, batch)
	step("a simple query", 1, func() error {
		_, err := conn.Exec(ctx, "SELECT pg_sleep(0.05)", pgx.QueryExecModeSimpleProtocol)
		return err
	})
	if w := tap.Read().Waiting; w < 50*time.Millisecond {
		t.Errorf("waiting %v, want at least the 50 ms of pg_sleep", w)
	}
	long := "SELECT '" + strings.Repeat("x", 100) + "'"
	d = step("a long statement", 1, func() error {
		_, err := conn.Exec(ctx, long, pgx.QueryExecModeSimpleProtocol)
		return err
	})
	for k := range d.ByKind {
		if !strings.HasSuffix(k, "…") || len([]rune(k)) != 57 {
			t.Errorf("a long statement's kind: %q", k)
		}
	}
}
