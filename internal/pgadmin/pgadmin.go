// Package pgadmin is the adapter through which tools and benches, not
// the site DB itself (internal/site/pgstore), talk to a PostgreSQL server:
// a schema of its own per run, one statement on a connection of its own,
// DSNs edited in their own form (URL or key=value), and a sampler of what
// the server says the backends of one application are doing. (A
// throwaway cluster that a bench or a test may crash is
// internal/pgcluster's.)
package pgadmin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is a schema of its own, with a random name, in the database
// of a DSN: one run's site DB.
type Schema struct {
	admin string // the database's DSN
	name  string
}

// CreateSchema creates a new schema in the database that admin names.
func CreateSchema(ctx context.Context, admin string) (*Schema, error) {
	b := make([]byte, 8)
	rand.Read(b)
	s := &Schema{admin: admin, name: "usher_bench_" + hex.EncodeToString(b)}
	if err := Exec(ctx, admin, "CREATE SCHEMA "+pgx.Identifier{s.name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create schema %s: %w", s.name, err)
	}
	return s, nil
}

// Drop drops the schema and everything in it.
func (s *Schema) Drop(ctx context.Context) error {
	if err := Exec(ctx, s.admin, "DROP SCHEMA "+pgx.Identifier{s.name}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", s.name, err)
	}
	return nil
}

// Name returns the schema's name.
func (s *Schema) Name() string { return s.name }

// DSN returns the admin DSN with the schema alone on its search_path.
func (s *Schema) DSN() (string, error) {
	return With(s.admin, "search_path", s.name)
}

// Exec runs one statement on a connection of its own.
func Exec(ctx context.Context, dsn, sql string) error {
	conn, err := connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// With returns dsn with settings (key, value, key, value...) set, in
// the DSN's own form (URL or key=value).
func With(dsn string, kv ...string) (string, error) {
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", errors.New("the DSN is not a valid URL")
		}
		q := u.Query()
		for i := 0; i+1 < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	// In a key=value DSN a later setting replaces an earlier one.
	for i := 0; i+1 < len(kv); i += 2 {
		dsn += " " + kv[i] + "='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(kv[i+1]) + "'"
	}
	return dsn, nil
}

// Via returns dsn pointed at addr (host:port) instead of its server.
func Via(dsn, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", errors.New("the DSN is not a valid URL")
		}
		u.Host = addr
		q := u.Query()
		q.Del("host")
		q.Del("port")
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	return With(dsn, "host", host, "port", port)
}

// Server returns the network ("tcp" or "unix") and address of the
// server a DSN names.
func Server(dsn string) (network, address string, err error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", "", errors.New("cannot parse the DSN") // pgx's message may show a password
	}
	port := strconv.Itoa(int(cfg.Port))
	if strings.HasPrefix(cfg.Host, "/") {
		return "unix", filepath.Join(cfg.Host, ".s.PGSQL."+port), nil
	}
	return "tcp", net.JoinHostPort(cfg.Host, port), nil
}

// Sets reports whether a DSN sets key.
func Sets(dsn, key string) bool {
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		return err == nil && u.Query().Has(key)
	}
	for _, f := range strings.Fields(dsn) {
		if strings.HasPrefix(f, key+"=") {
			return true
		}
	}
	return false
}

// ActivitySampler samples, on a connection of its own, what the server says
// its backends of one application_name are doing: running, waiting for a
// lock, or idle inside a transaction (a transaction open across the
// client's round trips).
type ActivitySampler struct {
	conn *pgx.Conn
	app  string
	stop chan struct{}
	done chan struct{}

	mu sync.Mutex
	a  Activity
}

// Activity is what ActivitySampler saw: sums over its samples (divide by
// Samples for the mean) and the most at once since the last Mark.
type Activity struct {
	Samples                                       int
	Backends, Active, LockWaits, IdleInTx         int
	MaxBackends, MaxActive, MaxLockWaits, MaxIdle int
}

// Sub returns the sums between an earlier reading o and a (maxima are a's).
func (a Activity) Sub(o Activity) Activity {
	d := a
	d.Samples -= o.Samples
	d.Backends -= o.Backends
	d.Active -= o.Active
	d.LockWaits -= o.LockWaits
	d.IdleInTx -= o.IdleInTx
	return d
}

// Mean returns a sum's mean over the samples.
func (a Activity) Mean(sum int) float64 {
	if a.Samples == 0 {
		return 0
	}
	return float64(sum) / float64(a.Samples)
}

// activityQuery counts the backends of an application_name by what they do.
const activityQuery = `SELECT count(*),
	count(*) FILTER (WHERE state = 'active'),
	count(*) FILTER (WHERE wait_event_type = 'Lock'),
	count(*) FILTER (WHERE state LIKE 'idle in transaction%')
FROM pg_stat_activity WHERE application_name = $1 AND backend_type = 'client backend'`

// StartActivity samples every interval until Close.
func StartActivity(ctx context.Context, dsn, app string, interval time.Duration) (*ActivitySampler, error) {
	conn, err := connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	d := &ActivitySampler{conn: conn, app: app, stop: make(chan struct{}), done: make(chan struct{})}
	go d.run(interval)
	return d, nil
}

func (d *ActivitySampler) run(interval time.Duration) {
	defer close(d.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var n, active, locks, idle int
		err := d.conn.QueryRow(ctx, activityQuery, d.app).Scan(&n, &active, &locks, &idle)
		cancel()
		if err != nil {
			continue
		}
		d.mu.Lock()
		a := &d.a
		a.Samples++
		a.Backends += n
		a.Active += active
		a.LockWaits += locks
		a.IdleInTx += idle
		a.MaxBackends, a.MaxActive = max(a.MaxBackends, n), max(a.MaxActive, active)
		a.MaxLockWaits, a.MaxIdle = max(a.MaxLockWaits, locks), max(a.MaxIdle, idle)
		d.mu.Unlock()
	}
}

// Mark returns the sums so far and starts the maxima again.
func (d *ActivitySampler) Mark() Activity {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.a
	d.a.MaxBackends, d.a.MaxActive, d.a.MaxLockWaits, d.a.MaxIdle = 0, 0, 0, 0
	return a
}

// Close stops sampling and closes the connection.
func (d *ActivitySampler) Close() {
	close(d.stop)
	<-d.done
	d.conn.Close(context.Background())
}

// connect opens one connection to the server a DSN names, ignoring the
// settings of a pool (pool_max_conns, ...), which the site DB's DSN may
// carry and a single connection would send the server as parameters.
func connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, errors.New("cannot parse the DSN") // pgx's message may show a password
	}
	return pgx.ConnectConfig(ctx, cfg.ConnConfig)
}
