package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"
)

// A PostgreSQL site DB across a simulated WAN: a schema of its own for
// the run, toxiproxy in this process adding latency, and what the bench
// reads from the server about the site's connections.

// pgSchema is a schema of its own, with a random name, in the database
// of a DSN: one run's site DB.
type pgSchema struct {
	admin string // the database's DSN
	name  string
}

// createSchema creates a new schema in the database that admin names.
func createSchema(ctx context.Context, admin string) (*pgSchema, error) {
	b := make([]byte, 8)
	rand.Read(b)
	s := &pgSchema{admin: admin, name: "usher_bench_" + hex.EncodeToString(b)}
	if err := execOnce(ctx, admin, "CREATE SCHEMA "+pgx.Identifier{s.name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create schema %s: %w", s.name, err)
	}
	return s, nil
}

// Drop drops the schema and everything in it.
func (s *pgSchema) Drop(ctx context.Context) error {
	if err := execOnce(ctx, s.admin, "DROP SCHEMA "+pgx.Identifier{s.name}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", s.name, err)
	}
	return nil
}

// DSN returns the admin DSN with the schema alone on its search_path.
func (s *pgSchema) DSN() (string, error) {
	return dsnWith(s.admin, "search_path", s.name)
}

// execOnce runs one statement on a connection of its own.
func execOnce(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// dsnWith returns dsn with settings (key, value, key, value...) set, in
// the DSN's own form (URL or key=value).
func dsnWith(dsn string, kv ...string) (string, error) {
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

// dsnVia returns dsn pointed at addr (host:port) instead of its server.
func dsnVia(dsn, addr string) (string, error) {
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
	return dsnWith(dsn, "host", host, "port", port)
}

// dsnServer returns the network ("tcp" or "unix") and address of the
// server a DSN names.
func dsnServer(dsn string) (network, address string, err error) {
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

// dsnSets reports whether a DSN sets key.
func dsnSets(dsn, key string) bool {
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

// WAN is toxiproxy, run in this process as a library, between a loopback
// port and a server: a latency toxic of half the round-trip time on each
// direction.
type WAN struct {
	proxy *toxiproxy.Proxy
	rtt   time.Duration
}

// Names of WAN's toxics.
const (
	wanUp   = "wan_upstream"
	wanDown = "wan_downstream"
)

// StartWAN starts a proxy to upstream (host:port) with no latency.
func StartWAN(upstream string) (*WAN, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "usher-bench-site-db", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("toxiproxy: %w", err)
	}
	return &WAN{proxy: p}, nil
}

// Addr is where the proxy listens, host:port.
func (w *WAN) Addr() string { return w.proxy.Listen }

// RTT is the round-trip time the toxics add.
func (w *WAN) RTT() time.Duration { return w.rtt }

// SetRTT makes the toxics add rtt (whole milliseconds, as toxiproxy's
// latency toxic counts them) to every round trip: the upstream toxic
// holds each chunk for half of it, rounded up, the downstream one for the
// rest. Connections stay open; data in flight is let through at once.
//
// toxiproxy's UpdateToxicJson decodes the new latency into the toxic that
// the connections' pipes are reading, without a lock: the toxics are
// removed and added again instead.
func (w *WAN) SetRTT(rtt time.Duration) error {
	if rtt < 0 || rtt%time.Millisecond != 0 {
		return fmt.Errorf("RTT %s is not a whole number of milliseconds", rtt)
	}
	if rtt == w.rtt {
		return nil
	}
	ctx := context.Background()
	for _, name := range []string{wanUp, wanDown} {
		if err := w.proxy.Toxics.RemoveToxic(ctx, name); err != nil && !errors.Is(err, toxiproxy.ErrToxicNotFound) {
			return fmt.Errorf("toxiproxy: remove %s: %w", name, err)
		}
	}
	w.rtt = 0
	if rtt == 0 {
		return nil
	}
	ms := rtt.Milliseconds()
	for _, t := range []struct {
		name, stream string
		ms           int64
	}{{wanUp, "upstream", ms - ms/2}, {wanDown, "downstream", ms / 2}} {
		b, err := json.Marshal(map[string]any{"name": t.name, "type": "latency", "stream": t.stream, "toxicity": 1,
			"attributes": map[string]any{"latency": t.ms}})
		if err != nil {
			return err
		}
		if _, err := w.proxy.Toxics.AddToxicJson(bytes.NewReader(b)); err != nil {
			return fmt.Errorf("toxiproxy: add %s: %w", t.name, err)
		}
	}
	w.rtt = rtt
	return nil
}

// Close stops the proxy and closes its connections.
func (w *WAN) Close() { w.proxy.Stop() }

// dbActivity samples, on a connection of its own, what the server says
// its backends of one application_name are doing: running, waiting for a
// lock, or idle inside a transaction (a transaction open across the
// client's round trips).
type dbActivity struct {
	conn *pgx.Conn
	app  string
	stop chan struct{}
	done chan struct{}

	mu sync.Mutex
	a  Activity
}

// Activity is what dbActivity saw: sums over its samples (divide by
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

// startActivity samples every interval until Close.
func startActivity(ctx context.Context, dsn, app string, interval time.Duration) (*dbActivity, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	d := &dbActivity{conn: conn, app: app, stop: make(chan struct{}), done: make(chan struct{})}
	go d.run(interval)
	return d, nil
}

func (d *dbActivity) run(interval time.Duration) {
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
func (d *dbActivity) Mark() Activity {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.a
	d.a.MaxBackends, d.a.MaxActive, d.a.MaxLockWaits, d.a.MaxIdle = 0, 0, 0, 0
	return a
}

// Close stops sampling and closes the connection.
func (d *dbActivity) Close() {
	close(d.stop)
	<-d.done
	d.conn.Close(context.Background())
}
