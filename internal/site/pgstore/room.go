package pgstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/usher-vdi/usher/internal/site"
)

// DefaultPoolFloor is the smallest pool SizePool fits a Store to: fewer
// connections than this would keep a broker's transactions waiting on one
// another, so a server without room for them stops the command instead.
const DefaultPoolFloor = 4

// Room is what a PostgreSQL server has room for, for the role and
// database of a DSN, as SizePool read it.
type Room struct {
	// MaxConnections is the server's max_connections; Reserved, the
	// connections it keeps for superusers and roles with
	// pg_use_reserved_connections (superuser_reserved_connections plus
	// reserved_connections), which SizePool leaves to them; InUse, the
	// client connections open, besides SizePool's own.
	MaxConnections, Reserved, InUse int
	// Free is how many more connections the DSN's role may open: the
	// server's, the role's and the database's limits together. Bound
	// says which limit bounds it, and how to raise it.
	Free  int
	Bound string
}

// String names the numbers of the limit that bounds r.
func (r Room) String() string {
	return fmt.Sprintf("%d more connections: %s", r.Free, r.Bound)
}

// SizePool returns the size of the pool of a Store on dsn: want (0: the
// DSN's pool_max_conns, else DefaultMaxConns), or, when the server has
// less room than that, the room it has, as long as that is at least
// DefaultPoolFloor (want, when want is less). It reads the room with one
// connection of its own, closed before it returns. When even the floor
// does not fit it fails with an error that matches site.ErrConnLimit and
// names the numbers and what to change; a server that refuses the
// connection for its limit fails so too. Every command that opens a Store
// on a server it shares sizes its pool so, before Open (Options.MaxConns).
func SizePool(ctx context.Context, dsn string, want int) (int, Room, error) {
	cfg, err := parseDSN(dsn)
	if err != nil {
		return 0, Room{}, fmt.Errorf("size the site database's pool: %w", err)
	}
	if want <= 0 {
		want = DefaultMaxConns
		if strings.Contains(cfg.ConnString(), "pool_max_conns") {
			want = int(cfg.MaxConns)
		}
	}
	floor := min(DefaultPoolFloor, want)
	target := describe(cfg.ConnConfig)
	s := &Store{target: target, secret: secrets(cfg.ConnConfig)}
	cc := cfg.ConnConfig.Copy()
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = DefaultConnectTimeout
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		cerr := s.connectErr(err)
		if tooManyConnections(err) {
			return 0, Room{}, fmt.Errorf("%w: %s refuses even one more connection, and a pool needs %d at least: %w; "+
				"close other clients' connections, or raise the limit that refused it", site.ErrConnLimit, target, floor, cerr)
		}
		// As a transaction's connection attempt: EUnavailable, so that a
		// broker starting before its site DB tries again (--start-retry)
		// and the Local Host Cache starts from its copy.
		if ctx.Err() != nil {
			return 0, Room{}, fmt.Errorf("size the site database's pool: %w: %w: %w", unavailable("unavailable"), context.Cause(ctx), cerr)
		}
		return 0, Room{}, fmt.Errorf("size the site database's pool: %w: %w", unavailable("unavailable"), cerr)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	r, err := readRoom(ctx, conn)
	if err != nil {
		return 0, Room{}, fmt.Errorf("size the pool of site database %s: read its connection limits: %s", target, s.scrub(err))
	}
	switch {
	case r.Free >= want:
		return want, r, nil
	case r.Free >= floor:
		return r.Free, r, nil
	}
	return 0, r, fmt.Errorf("%w: %s has room for %s, fewer than the %d a pool needs at least (of the %d it would take)",
		site.ErrConnLimit, target, r, floor, want)
}

// readRoom reads the server's limits and the connections open, SizePool's
// own among them (it is closed before the pool opens).
func readRoom(ctx context.Context, conn *pgx.Conn) (Room, error) {
	var (
		r                      Room
		super                  bool
		roleLimit, dbLimit     int
		roleInUse, dbInUse     int
		superReserved, granted int
		role, db               string
	)
	err := conn.QueryRow(ctx, `SELECT current_setting('max_connections')::int,
		current_setting('superuser_reserved_connections')::int,
		coalesce(nullif(current_setting('reserved_connections', true), '')::int, 0),
		(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int,
		r.rolsuper, r.rolconnlimit, current_user::text,
		(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND usename = current_user)::int,
		d.datconnlimit, current_database()::text,
		(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND datname = current_database())::int
		FROM pg_roles r, pg_database d WHERE r.rolname = current_user AND d.datname = current_database()`).
		Scan(&r.MaxConnections, &superReserved, &granted, &r.InUse, &super, &roleLimit, &role, &roleInUse, &dbLimit, &db, &dbInUse)
	if err != nil {
		return Room{}, err
	}
	r.Reserved = superReserved + granted
	r.InUse-- // SizePool's own, closed before the pool opens
	r.Free = r.MaxConnections - r.Reserved - r.InUse
	r.Bound = fmt.Sprintf("max_connections %d, less %d reserved (superuser_reserved_connections, reserved_connections) and %d in use; "+
		"raise max_connections (postgresql.conf, then restart the server) or close other clients' connections "+
		"(a broker's pool is pool_max_conns in its --db, %d by default)", r.MaxConnections, r.Reserved, r.InUse, DefaultMaxConns)
	if super {
		r.Free = max(r.Free, 0)
		return r, nil // a superuser is held to no role's or database's limit
	}
	if roleLimit >= 0 {
		if free := roleLimit - (roleInUse - 1); free < r.Free {
			r.Free = free
			r.Bound = fmt.Sprintf("role %q's CONNECTION LIMIT %d, with %d in use; raise it (ALTER ROLE ... CONNECTION LIMIT) or close its other connections",
				role, roleLimit, roleInUse-1)
		}
	}
	if dbLimit >= 0 {
		if free := dbLimit - (dbInUse - 1); free < r.Free {
			r.Free = free
			r.Bound = fmt.Sprintf("database %q's CONNECTION LIMIT %d, with %d in use; raise it (ALTER DATABASE ... CONNECTION LIMIT) or close its other connections",
				db, dbLimit, dbInUse-1)
		}
	}
	r.Free = max(r.Free, 0)
	return r, nil
}
