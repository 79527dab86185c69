package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usher-vdi/usher/internal/site"
)

// Defaults for Options.
const (
	// DefaultMaxConns bounds the pool: every transaction holds a connection
	// for its round trips, so a broker far from the database needs more
	// than the CPU count that pgx would pick.
	DefaultMaxConns = 16
	// DefaultLockTimeout is how long a statement waits for a lock another
	// transaction holds before it fails with EUnavailable, as
	// sqlitestore's busy timeout.
	DefaultLockTimeout = 5 * time.Second
	// DefaultConnectTimeout bounds a connection attempt when the DSN sets
	// no connect_timeout: a database that does not answer is unavailable,
	// not a transaction that hangs.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultAnswerTimeout bounds the wait for the answer to one round
	// trip (longer than DefaultLockTimeout, so that a lock wait is not
	// taken for a lost database). A database that does not answer in
	// time is taken for lost: see Store.
	DefaultAnswerTimeout = 10 * time.Second
)

// probeInterval is how often a Store that lost its database tries it.
const probeInterval = time.Second

// Log attribute keys.
const (
	logKeyDatabase = "database"
	logKeyVersion  = "version"
	logKeyName     = "name"
	logKeyError    = "error"
)

// Options tune a Store. The zero value is ready to use.
type Options struct {
	// Logger receives migration and failure logs; nil discards them.
	Logger *slog.Logger
	// MaxConns is the most connections the Store opens; 0 means the DSN's
	// pool_max_conns when it sets one, else DefaultMaxConns.
	MaxConns int
	// LockTimeout is how long a statement waits for a lock; 0 means the
	// DSN's lock_timeout when it sets one, else DefaultLockTimeout.
	LockTimeout time.Duration
	// AnswerTimeout bounds the wait for the answer to one round trip; 0
	// means DefaultAnswerTimeout.
	AnswerTimeout time.Duration
	// ChangeHistoryKeep is the most change records kept (site.ChangeHistory);
	// 0 means site.ChangeHistoryKeep.
	ChangeHistoryKeep int
}

// Store is a site database in a PostgreSQL schema.
//
// A database that stops answering (a round trip unanswered for
// AnswerTimeout, or a connection attempt that times out) is taken for lost: from then
// on transactions fail at once with EUnavailable, instead of each waiting
// for its own timeout, while the Store tries the database every second;
// the first answer ends it.
type Store struct {
	pool   *pgxpool.Pool
	log    *slog.Logger
	target string   // the database, as messages and logs name it: no password
	secret []string // what no message may show
	closed atomic.Bool
	stop   chan struct{} // closed by Close

	answerTimeout time.Duration
	historyKeep   int
	lost          atomic.Pointer[lostDB] // nil while the database answers
	warnedFull    atomic.Int64           // when awaitSlot last logged, in Unix nanoseconds
	connLimit     atomic.Uint64          // ConnLimitRefusals

	mu     sync.Mutex     // orders ending.Add before Close's ending.Wait
	ending sync.WaitGroup // transactions ending in the background
}

var (
	_ site.Store         = (*Store)(nil)
	_ site.ConfigWatcher = (*Store)(nil)
)

// Open connects to the PostgreSQL database that dsn names (a URL or
// key=value string, as libpq takes) and migrates its schema. It refuses a
// schema that a newer usher migrated (ErrSchemaTooNew). The pool connects
// lazily after Open: a database that goes away later makes transactions
// fail with EUnavailable until it is back.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	cfg, err := parseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("open site database: %w", err)
	}
	return open(ctx, cfg, opts)
}

// open opens a Store on a parsed configuration, which tests adjust.
func open(ctx context.Context, cfg *pgxpool.Config, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = int32(opts.MaxConns)
	} else if !strings.Contains(cfg.ConnString(), "pool_max_conns") {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	params := cfg.ConnConfig.RuntimeParams
	if _, set := params["application_name"]; !set {
		params["application_name"] = "usher"
	}
	if opts.LockTimeout > 0 {
		params["lock_timeout"] = strconv.FormatInt(opts.LockTimeout.Milliseconds(), 10)
	} else if _, set := params["lock_timeout"]; !set {
		params["lock_timeout"] = strconv.FormatInt(DefaultLockTimeout.Milliseconds(), 10)
	}
	// pgxpool pings a connection idle for a second before handing it out:
	// a round trip on most transactions of a quiet broker. The first
	// statements of a transaction are sent again on a new connection when
	// the one they went out on turns out dead instead (tx.send).
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }

	s := &Store{target: describe(cfg.ConnConfig), secret: secrets(cfg.ConnConfig), stop: make(chan struct{}),
		answerTimeout: cmp.Or(max(opts.AnswerTimeout, 0), DefaultAnswerTimeout),
		historyKeep:   cmp.Or(max(opts.ChangeHistoryKeep, 0), site.ChangeHistoryKeep)}
	s.log = opts.Logger.With(logKeyDatabase, s.target)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open site database %s: %s", s.target, s.scrub(err))
	}
	s.pool = pool
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		if ce := (*connectError)(nil); errors.As(err, &ce) {
			// A server that answers and refuses usher's role or password,
			// or has no such database, will not change its mind: that is
			// no database that does not answer (EUnavailable), which
			// serve --db-retry would try again for as long as it may.
			if refusal := refusedLogon(err); refusal != "" {
				return nil, fmt.Errorf("open site database: %w: %w", site.Errorf(site.EUnauthorized,
					"the server %s (check the user, the password and the database name of --db)", refusal), ce)
			}
			return nil, fmt.Errorf("open site database: %w", err) // it names the database
		}
		return nil, fmt.Errorf("open site database %s: %w", s.target, err)
	}
	return s, nil
}

// Target returns the database the Store uses, as a URL without password.
func (s *Store) Target() string { return s.target }

// Close closes the pool, once every transaction has ended. Transactions
// after Close fail with EUnavailable. Closing twice is harmless.
func (s *Store) Close() error {
	s.mu.Lock()
	closed := s.closed.Swap(true)
	s.mu.Unlock()
	if closed {
		return nil
	}
	close(s.stop)
	s.ending.Wait()
	s.pool.Close()
	return nil
}

var errClosed = site.Errorf(site.EUnavailable, "site database is closed")

// View runs fn in a read-only transaction on one snapshot of the database.
func (s *Store) View(ctx context.Context, fn func(site.Tx) error) error {
	if s.closed.Load() {
		return errClosed
	}
	t := &tx{s: s, ctx: ctx}
	defer t.end()
	return fn(t)
}

// ReadOnce runs fn's reads outside a transaction (site.OnceReader): each
// round trip is its own snapshot, and none is begun or rolled back, which
// saves a read of one round trip a second one in the background.
func (s *Store) ReadOnce(ctx context.Context, fn func(site.Tx) error) error {
	if s.closed.Load() {
		return errClosed
	}
	t := &tx{s: s, once: true, ctx: ctx}
	defer t.end()
	return fn(t)
}

// Update runs fn in a read-write transaction and commits it when fn returns
// nil. A transaction that changed the configuration moves the configuration
// version by one. fn runs once: a transaction that fails (a deadlock, a
// lost connection) returns an error and is not tried again.
func (s *Store) Update(ctx context.Context, fn func(site.Tx) error) error {
	if s.closed.Load() {
		return errClosed
	}
	t := &tx{s: s, update: true, ctx: ctx}
	defer t.end()
	if err := fn(t); err != nil {
		return err
	}
	return t.commit(ctx)
}

// background runs fn in a goroutine that Close waits for, or, once Close
// has begun, before it returns.
func (s *Store) background(fn func()) {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		fn()
		return
	}
	s.ending.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.ending.Done()
		fn()
	}()
}

// unavailable is the client-safe error of a database that cannot serve.
func unavailable(reason string) *site.Error {
	return site.Errorf(site.EUnavailable, "site database is %s", reason)
}

// dbErr turns a failed statement's error into a site error where one
// fits, keeping the cause in the chain for logs.
func (s *Store) dbErr(ctx context.Context, conn *pgxpool.Conn, err error) error {
	if err == nil {
		return nil
	}
	var se *site.Error
	if errors.As(err, &se) {
		return err
	}
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err)) {
		return fmt.Errorf("%w: %w", context.Cause(ctx), err)
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case pg.Code == "40001" || pg.Code == "40P01": // serialization failure, deadlock
			return fmt.Errorf("%w: %w", site.Errorf(site.EUnavailable,
				"site database is busy: the transaction conflicted with a concurrent one; try again"), err)
		case pg.Code == "55P03": // lock not available: lock_timeout
			return fmt.Errorf("%w: %w", unavailable("busy"), err)
		case pg.Code == "25006": // read-only transaction
			return fmt.Errorf("%w: %w", errReadOnly, err)
		case pg.Code == "22021" || pg.Code == "22P05": // a NUL byte, invalid UTF-8
			return fmt.Errorf("%w: %w", site.Errorf(site.EInvalid, "text with a NUL byte or invalid UTF-8 cannot be stored"), err)
		case pg.Code == "57014", // query canceled: statement_timeout
			pg.Code[:2] == "08", // connection exception
			pg.Code[:2] == "53", // insufficient resources
			pg.Code[:2] == "57", // operator intervention: shutdown, crash recovery
			pg.Code[:2] == "58": // system error: I/O
			return fmt.Errorf("%w: %w", unavailable("unavailable"), err)
		}
		return err
	}
	if conn == nil || conn.Conn().IsClosed() {
		return fmt.Errorf("%w: %s", unavailable("unavailable"), s.scrub(err))
	}
	return err
}

// acquire takes a connection from the pool, or fails at once while the
// database is lost. A server at its connection limit is waited for
// (awaitSlot), never taken for lost; the error of a wait that runs out
// matches site.ErrConnLimit.
func (s *Store) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if l := s.lost.Load(); l != nil {
		return nil, l.err()
	}
	conn, err := s.pool.Acquire(ctx)
	if err == nil {
		return conn, nil
	}
	if tooManyConnections(err) {
		if conn, err = s.awaitSlot(ctx, err); err == nil {
			return conn, nil
		}
	}
	if s.closed.Load() {
		return nil, errClosed
	}
	cerr := s.connectErr(err)
	if tooManyConnections(err) {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w: %w", unavailable("at its connection limit: retry shortly"), context.Cause(ctx), cerr)
		}
		return nil, fmt.Errorf("%w: %w", unavailable("at its connection limit: retry shortly"), cerr)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%w: connect to %s: %s", context.Cause(ctx), s.target, s.scrub(err))
	}
	if timedOut(err) {
		// A refusal comes at once; a database that does not answer
		// would keep every transaction waiting for the connect timeout.
		s.markLost(cerr.Error())
	}
	return nil, fmt.Errorf("%w: %w", unavailable("unavailable"), cerr)
}

// ownPoll is how often awaitSlot looks for a connection of the pool's
// own to come free; slotRetryMin and slotRetryMax bound the wait between
// its attempts at a new connection, which doubles from one to the next.
const (
	ownPoll      = 2 * time.Millisecond
	slotRetryMin = 10 * time.Millisecond
	slotRetryMax = 250 * time.Millisecond
)

// awaitSlot waits for a connection when the server refused a new one for
// being at its connection limit (max_connections, or the role's or the
// database's CONNECTION LIMIT): the database answers and is busy, and
// connections, the pool's own or other clients', come free in moments.
// It takes one of the pool's own as soon as one is idle, and tries a new
// one now and then (each attempt costs the server a process, so they
// back off from slotRetryMin to slotRetryMax), until ctx ends, or, for a
// ctx without a deadline, for AnswerTimeout. It returns the last refusal
// when no connection came, or the error of an attempt that failed
// otherwise. Every refusal counts in ConnLimitRefusals.
func (s *Store) awaitSlot(ctx context.Context, refused error) (*pgxpool.Conn, error) {
	s.connLimit.Add(1)
	if last := s.warnedFull.Load(); time.Since(time.Unix(0, last)) > time.Minute &&
		s.warnedFull.CompareAndSwap(last, time.Now().UnixNano()) {
		s.log.Warn("site database refuses new connections (at its connection limit): transactions wait for a connection",
			logKeyDatabase, s.target, "open", s.pool.Stat().TotalConns(), logKeyError, s.connectErr(refused))
	}
	wctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, s.answerTimeout)
		defer cancel()
	}
	wait := slotRetryMin
	next := time.Now().Add(wait)
	tick := time.NewTicker(ownPoll)
	defer tick.Stop()
	for {
		select {
		case <-wctx.Done():
			return nil, refused
		case <-s.stop:
			return nil, refused
		case <-tick.C:
		}
		if s.pool.Stat().IdleConns() == 0 && time.Now().Before(next) {
			continue
		}
		conn, err := s.pool.Acquire(wctx)
		switch {
		case err == nil:
			return conn, nil
		case tooManyConnections(err):
			s.connLimit.Add(1)
			refused = err
			wait = min(2*wait, slotRetryMax)
			next = time.Now().Add(wait/2 + rand.N(wait/2+1))
		case wctx.Err() != nil:
			return nil, refused // the wait ran out while it tried
		default:
			return nil, err
		}
	}
}

// ConnLimitRefusals counts the connections the server refused the Store
// for being at its connection limit since Open: what the assembly
// exports as usher_sitedb_conn_limit_total.
func (s *Store) ConnLimitRefusals() uint64 { return s.connLimit.Load() }

// codeTooManyConnections is the SQLSTATE of a server, role or database
// at its connection limit. (57P03, cannot_connect_now, is a server
// starting, stopping or in recovery: unavailable, not busy. 53400,
// configuration_limit_exceeded, is no connection limit.)
const codeTooManyConnections = "53300"

// tooManyConnections reports whether err is the server's refusal of a
// connection for being at its limit (SQLSTATE 53300).
func tooManyConnections(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == codeTooManyConnections
}

// refusedLogon says how a server refused a connection for its
// credentials or database name (SQLSTATE class 28, invalid
// authorization, or 3D000, no such database), or "" for any other error.
func refusedLogon(err error) string {
	var pg *pgconn.PgError
	switch {
	case !errors.As(err, &pg):
		return ""
	case strings.HasPrefix(pg.Code, "28"):
		return "refused the logon"
	case pg.Code == "3D000":
		return "has no such database"
	}
	return ""
}

// timedOut reports whether err is a wait that ran out of time.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) || errors.As(err, &ne) && ne.Timeout()
}

// lostDB is when and why the Store took its database for lost.
type lostDB struct {
	since time.Time
	cause string // without the DSN's password
}

func (l *lostDB) err() error {
	return site.Errorf(site.EUnavailable, "site database is unavailable (since %s, %s ago: %s); usher tries it every second",
		l.since.UTC().Format(time.RFC3339), time.Since(l.since).Round(time.Second), l.cause)
}

// markLost takes the database for lost, unless it is already, and tries
// it every probeInterval until it answers.
func (s *Store) markLost(cause string) {
	if !s.lost.CompareAndSwap(nil, &lostDB{since: time.Now(), cause: cause}) {
		return
	}
	s.log.Error("site database lost: transactions fail at once until it answers again", logKeyError, cause)
	s.background(s.probe)
}

// probe tries the database every probeInterval until it answers or the
// Store closes.
func (s *Store) probe() {
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.answerTimeout)
		err := s.ping(ctx)
		cancel()
		if err == nil {
			l := s.lost.Swap(nil)
			s.log.Info("site database answers again", "lost_for", time.Since(l.since).Round(time.Millisecond))
			return
		}
		s.log.Debug("site database still lost", logKeyError, s.scrub(err))
	}
}

// ping runs one statement on a connection of the pool: one that does not
// answer is closed (pgx closes a connection whose statement is cut off),
// so that the pool drops it.
func (s *Store) ping(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	_, err = conn.Exec(ctx, "SELECT 1")
	return err
}
