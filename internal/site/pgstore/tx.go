package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usher-vdi/usher/internal/site"
)

var (
	// errReadOnly is returned by writes inside View.
	errReadOnly = errors.New("write in a read-only transaction")
	// errTxDone is returned by a Tx used after its function returned.
	errTxDone = errors.New("site transaction used after its function returned")
)

// tx is a site.Tx on one PostgreSQL transaction. It takes a connection
// and begins at its first statement; a transaction that runs none costs
// nothing.
type tx struct {
	s *Store
	// ctx is the View's or Update's: when it ends, so do the round trips
	// under way and to come, whatever contexts their calls were given
	// (a caller's closure often passes its own). Nil for Place and
	// ChangeSessions, whose calls are the transaction.
	ctx    context.Context
	update bool
	// once runs each batch outside a transaction (ReadOnce): no BEGIN, no
	// ROLLBACK, each batch its own snapshot.
	once bool
	// bulk queues Creates with the pending writes (site.BulkWriter).
	bulk bool
	conn *pgxpool.Conn // nil until the first statement
	done bool          // fn returned

	// settings is the settings row, read once; in an Update, reading it
	// takes the configuration lock.
	settings *settingsRow
	// pending are writes waiting to be sent with the next statements:
	// they cannot fail for want of their row, which the transaction
	// holds locked (locked, by lockKey).
	pending []*pgx.QueuedQuery
	locked  map[string]bool

	// wrote is set by every write sent or pending: an Update that wrote
	// nothing has nothing to commit.
	wrote bool
	// configChanged is set by every successful configuration write; Update
	// then moves the configuration version once at commit, and logs the
	// objects written (changes) under the new version.
	configChanged bool
	changes       map[site.ConfigChange]bool
	// history holds the change records of History().Record, which commit
	// writes after the version moves.
	history []historyRow
	// broken is the error that aborted the transaction: PostgreSQL refuses
	// every statement after a failed one, and Update commits nothing.
	broken error
	// commits says that the first batch ends with COMMIT (Place): when its
	// connection turns out dead, it goes again only if its failure shows
	// that the server committed nothing.
	commits bool
	// roundTrips counts the batches sent, for tests.
	roundTrips int
}

var _ site.Tx = (*tx)(nil)

type settingsRow struct {
	site.Settings
	version int64
}

// usable returns the error of a call on a transaction that cannot take
// one, and errReadOnly for a write in a View.
func (t *tx) usable(write bool) error {
	switch {
	case t.done:
		return errTxDone
	case t.broken != nil:
		return fmt.Errorf("transaction aborted by an earlier error: %w", t.broken)
	case write && !t.update:
		return errReadOnly
	}
	return nil
}

// WriteInBulk makes the transaction's Creates go with later statements
// (site.BulkWriter), bulkFlush to a round trip.
func (t *tx) WriteInBulk() { t.bulk = true }

// bulkFlush is how many queued writes go to the database at once.
const bulkFlush = 2000

func (t *tx) beginSQL() string {
	if t.update {
		return "BEGIN ISOLATION LEVEL READ COMMITTED READ WRITE"
	}
	return "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
}

// send runs b's statements in one round trip, preceded by what must run
// first: BEGIN, when the transaction has not begun; the settings row, when
// settings is set (in an Update, reading it takes the configuration lock)
// or a View begins, unless the transaction has read it; and the pending
// writes. When the first statements of a transaction fail because their
// connection was dead (the server restarted, or closed it while it
// idled), nothing ran: they go again once, on another connection (for a
// batch that commits, only when its error shows that nothing committed).
func (t *tx) send(ctx context.Context, b *pgx.Batch, settings bool) error {
	if err := t.usable(false); err != nil {
		return err
	}
	var qs []*pgx.QueuedQuery
	first := t.conn == nil
	if first && !t.once {
		qs = append(qs, &pgx.QueuedQuery{SQL: t.beginSQL()})
	}
	// A View reads the settings row with its first statements, whether
	// it asks for them yet or not: the configuration version is what most
	// views ask for, and one more row in a round trip costs nothing.
	if t.settings == nil && (settings || first && !t.update && !t.once) {
		qs = append(qs, t.settingsQuery())
	}
	qs = append(qs, t.pending...)
	t.pending = nil
	if b != nil {
		qs = append(qs, b.QueuedQueries...)
	}
	err := t.roundTrip(ctx, qs)
	if err != nil && first && t.conn != nil && t.conn.Conn().IsClosed() && ctx.Err() == nil && (t.ctx == nil || t.ctx.Err() == nil) &&
		(!t.commits || uncommitted(err)) {
		t.s.log.Debug("site database connection lost before the transaction began; trying another", logKeyError, t.s.scrub(err))
		t.conn.Release()
		t.conn = nil
		err = t.roundTrip(ctx, qs)
	}
	if err != nil {
		t.broken = t.s.dbErr(ctx, t.conn, err)
		return t.broken
	}
	return nil
}

// uncommitted reports whether a batch's failure shows that the server
// committed nothing of it: nothing was sent, or the server answered with an
// error, which comes before the COMMIT's answer and aborts the transaction
// (a server shutting down ends its idle connections with one, FATAL).
func uncommitted(err error) bool {
	var pg *pgconn.PgError
	return pgconn.SafeToRetry(err) || errors.As(err, &pg)
}

// roundTrip sends queries in one batch and reads every result.
func (t *tx) roundTrip(ctx context.Context, queries []*pgx.QueuedQuery) (err error) {
	if t.ctx != nil && t.ctx != ctx {
		// The transaction's end cuts its round trips off.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer context.AfterFunc(t.ctx, cancel)()
		defer cancel()
		defer func() {
			if err != nil && t.ctx.Err() != nil {
				err = fmt.Errorf("%w: %w", unavailable("cut off"), t.ctx.Err())
			}
		}()
	}
	if t.conn == nil {
		conn, err := t.s.acquire(ctx)
		if err != nil {
			return err
		}
		t.conn = conn
	}
	// A batch is sent once: pgx records in its queries what it prepared on
	// the connection. Copies leave the originals ready for another.
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, len(queries))}
	for i, q := range queries {
		b.QueuedQueries[i] = &pgx.QueuedQuery{SQL: q.SQL, Arguments: q.Arguments, Fn: q.Fn}
	}
	t.roundTrips++
	actx, cancel := context.WithTimeout(ctx, t.s.answerTimeout)
	defer cancel()
	err = t.conn.SendBatch(actx, b).Close()
	if err != nil && ctx.Err() == nil && actx.Err() != nil {
		cause := fmt.Sprintf("no answer to a round trip in %s", t.s.answerTimeout)
		t.s.markLost(cause)
		return fmt.Errorf("%w: %s", unavailable("unavailable"), cause)
	}
	return err
}

// commit sends the pending writes, moves the configuration version when
// the transaction changed the configuration, and commits, in one round
// trip. An Update that wrote nothing commits nothing: end rolls it back
// without waiting.
func (t *tx) commit(ctx context.Context) error {
	if t.broken != nil {
		return fmt.Errorf("transaction rolled back after a failed statement: %w", t.broken)
	}
	if t.conn == nil && len(t.history) == 0 || !t.wrote {
		return nil
	}
	if t.bulk && len(t.pending) > 0 {
		// Creates in bulk report missing references and taken names in
		// their answers, which the server does not take for errors: they
		// are read before the COMMIT is sent.
		if err := t.send(ctx, nil, false); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
	}
	var qs []*pgx.QueuedQuery
	if t.conn == nil {
		// Only change records to write: the transaction begins here.
		qs = append(qs, &pgx.QueuedQuery{SQL: t.beginSQL()})
	}
	qs = append(qs, t.pending...)
	t.pending = nil
	if t.configChanged {
		qs = append(qs, t.versionQueries()...)
	}
	if len(t.history) > 0 {
		hq, err := t.historyQueries()
		if err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		qs = append(qs, hq...)
	}
	if err := t.roundTrip(ctx, append(qs, commitQuery())); err != nil {
		t.broken = t.s.dbErr(ctx, t.conn, err)
		return fmt.Errorf("commit: %w", t.broken)
	}
	t.conn.Release()
	t.conn = nil
	return nil
}

// commitQuery is a COMMIT that fails unless the transaction committed: a
// COMMIT of a failed transaction rolls it back.
func commitQuery() *pgx.QueuedQuery {
	c := &pgx.QueuedQuery{SQL: "COMMIT"}
	c.Exec(func(ct pgconn.CommandTag) error {
		if ct.String() != "COMMIT" {
			return errors.New("the server rolled the transaction back")
		}
		return nil
	})
	return c
}

// end releases the transaction's connection once fn has returned. A
// transaction still open (a View, an Update that failed or wrote nothing)
// is rolled back in the background: nothing of it is to be kept, and its
// caller need not wait a round trip for that.
func (t *tx) end() {
	t.done = true
	conn := t.conn
	t.conn = nil
	if conn == nil {
		return
	}
	if conn.Conn().IsClosed() || conn.Conn().PgConn().TxStatus() == 'I' {
		conn.Release() // a closed connection leaves the pool
		return
	}
	t.s.background(func() {
		ctx, cancel := context.WithTimeout(context.Background(), t.s.answerTimeout)
		defer cancel()
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			t.s.log.Debug("roll back site database transaction", logKeyError, t.s.scrub(err))
		}
		conn.Release()
	})
}

// settingsQuery reads the settings row; in an Update it locks it.
func (t *tx) settingsQuery() *pgx.QueuedQuery {
	q := `SELECT name, domain, trust_xml_requests, anonymous_app_data, server_data_credentials, config_version FROM settings WHERE id = 1`
	if t.update {
		q += ` FOR UPDATE`
	}
	qq := &pgx.QueuedQuery{SQL: q}
	qq.QueryRow(func(r pgx.Row) error {
		var row settingsRow
		s := &row.Settings
		if err := r.Scan(&s.Name, &s.Domain, &s.TrustXMLRequests, &s.AnonymousAppData, &s.ServerDataCredentials, &row.version); err != nil {
			return fmt.Errorf("read settings: %w", err)
		}
		t.settings = &row
		return nil
	})
	return qq
}

func (t *tx) readSettings(ctx context.Context) (*settingsRow, error) {
	if t.settings == nil {
		if err := t.send(ctx, nil, true); err != nil {
			return nil, err
		}
	}
	return t.settings, nil
}

// ConfigVersion returns the version committed before this transaction
// changed anything: Update moves it only at commit. In an Update it is
// read with the configuration lock, so no other transaction moves it
// before this one ends.
func (t *tx) ConfigVersion(ctx context.Context) (int64, error) {
	s, err := t.readSettings(ctx)
	if err != nil {
		return 0, fmt.Errorf("config version: %w", err)
	}
	return s.version, nil
}

func (t *tx) Settings(ctx context.Context) (site.Settings, error) {
	s, err := t.readSettings(ctx)
	if err != nil {
		return site.Settings{}, fmt.Errorf("settings: %w", err)
	}
	return s.Settings, nil
}

func (t *tx) SetSettings(ctx context.Context, s site.Settings) error {
	if err := t.usable(true); err != nil {
		return err
	}
	if err := s.Validate(); err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(`UPDATE settings SET name = $1::text, domain = $2::text, trust_xml_requests = $3::boolean,
		anonymous_app_data = $4::boolean, server_data_credentials = $5::boolean WHERE id = 1`,
		s.Name, s.Domain, s.TrustXMLRequests, s.AnonymousAppData, s.ServerDataCredentials)
	t.wrote = true
	if err := t.send(ctx, b, true); err != nil {
		return fmt.Errorf("set settings: %w", err)
	}
	t.settings.Settings = s
	t.logChange(site.KindSettings, "")
	return nil
}

func (t *tx) Zones() site.Collection[site.Zone] {
	return collection[site.Zone]{t, zones}
}

func (t *tx) Catalogs() site.Collection[site.Catalog] {
	return collection[site.Catalog]{t, catalogs}
}

func (t *tx) Groups() site.Collection[site.Group] {
	return collection[site.Group]{t, groups}
}

func (t *tx) Users() site.Collection[site.User] {
	return collection[site.User]{t, users}
}

func (t *tx) Machines() site.Collection[site.Machine] {
	return collection[site.Machine]{t, machines}
}

func (t *tx) DeliveryGroups() site.Collection[site.DeliveryGroup] {
	return collection[site.DeliveryGroup]{t, deliveryGroups}
}

func (t *tx) Applications() site.Collection[site.Resource] {
	return collection[site.Resource]{t, applications}
}

func (t *tx) Desktops() site.Collection[site.Resource] {
	return collection[site.Resource]{t, desktops}
}

func (t *tx) Entitlements() site.Collection[site.Entitlement] {
	return collection[site.Entitlement]{t, entitlements}
}

func (t *tx) Admins() site.Collection[site.Admin] {
	return collection[site.Admin]{t, admins}
}

func (t *tx) Sessions() site.Sessions { return sessions{t} }

func (t *tx) Brokers() site.Collection[site.BrokerRecord] {
	return collection[site.BrokerRecord]{t, brokers}
}

// forUpdate is the locking clause of a read of runtime rows: in an Update
// the rows stay locked until it ends.
func (t *tx) forUpdate() string {
	if t.update {
		return " FOR UPDATE"
	}
	return ""
}

func lockKey(table, name string) string { return table + "\x00" + name }

func (t *tx) lock(table, name string) {
	if t.locked == nil {
		t.locked = map[string]bool{}
	}
	t.locked[lockKey(table, name)] = true
}

func (t *tx) unlock(table, name string) { delete(t.locked, lockKey(table, name)) }

// write sends a write of one row of table, or, when the transaction holds
// that row locked, queues it for the next round trip: it cannot miss. It
// reports whether the row exists.
func (t *tx) write(ctx context.Context, table, name, what, query string, args ...any) (bool, error) {
	if t.locked[lockKey(table, name)] {
		qq := &pgx.QueuedQuery{SQL: query, Arguments: args}
		qq.Fn = func(br pgx.BatchResults) error {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("%s %q: %w", what, name, err)
			}
			return nil
		}
		t.pending = append(t.pending, qq)
		t.wrote = true
		return true, nil
	}
	var n int64
	b := &pgx.Batch{}
	b.Queue(query, args...).Exec(func(ct pgconn.CommandTag) error { n = ct.RowsAffected(); return nil })
	t.wrote = true
	if err := t.send(ctx, b, false); err != nil {
		return false, fmt.Errorf("%s %q: %w", what, name, err)
	}
	return n > 0, nil
}

const statusCols = `registration, last_heartbeat, load_index, sessions, cpu_percent, memory_percent,
	logons_in_progress, memory_used_mb, memory_total_mb, registered_address, protocol, control_url, control_token,
	agent_version, registration_conflict, registration_conflict_at, registered_credential, control_pin`

// statusDest returns the destinations of statusCols.
func statusDest(st *site.MachineStatus) []any {
	return []any{&st.Registration, timeDest{&st.LastHeartbeat}, &st.LoadIndex, &st.Sessions, &st.CPUPercent, &st.MemoryPercent,
		&st.LogonsInProgress, &st.MemoryUsedMB, &st.MemoryTotalMB, &st.RegisteredAddress, &st.Protocol,
		&st.ControlURL, &st.ControlToken, &st.AgentVersion, &st.Conflict, timeDest{&st.ConflictAt}, &st.Credential, &st.ControlPin}
}

func (t *tx) MachineStatus(ctx context.Context, machine string) (site.MachineStatus, error) {
	if err := t.usable(false); err != nil {
		return site.MachineStatus{}, err
	}
	var st site.MachineStatus
	found := false
	b := &pgx.Batch{}
	queueOne(b, &found, `SELECT `+statusCols+` FROM machine_status WHERE machine = $1::text`+t.forUpdate(), []any{machine},
		statusDest(&st)...)
	if err := t.send(ctx, b, false); err != nil {
		return site.MachineStatus{}, fmt.Errorf("machine status %q: %w", machine, err)
	}
	if !found {
		return site.MachineStatus{}, site.NotFound(site.KindMachine, machine)
	}
	if t.update {
		t.lock("machine_status", machine)
	}
	return st, nil
}

func (t *tx) MachineSessions(ctx context.Context, machines, ids []string) (map[string]site.MachineStatus, map[string]site.Session, error) {
	if err := t.usable(false); err != nil {
		return nil, nil, err
	}
	sts := make(map[string]site.MachineStatus, len(machines))
	sess := make(map[string]site.Session, len(ids))
	b := &pgx.Batch{}
	b.Queue(`SELECT machine, `+statusCols+` FROM machine_status WHERE machine = ANY ($1::text[]) ORDER BY machine`+t.forUpdate(), machines).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var name string
			var st site.MachineStatus
			if err := rows.Scan(append([]any{&name}, statusDest(&st)...)...); err != nil {
				return err
			}
			sts[name] = st
		}
		return rows.Err()
	})
	b.Queue(`SELECT `+sessionCols+` FROM sessions WHERE id = ANY ($1::text[]) ORDER BY id`+t.forUpdate(), ids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var s site.Session
			if err := rows.Scan(sessionDest(&s)...); err != nil {
				return err
			}
			sess[s.ID] = s
		}
		return rows.Err()
	})
	if err := t.send(ctx, b, false); err != nil {
		return nil, nil, fmt.Errorf("machine statuses and sessions: %w", err)
	}
	if t.update {
		for m := range sts {
			t.lock("machine_status", m)
		}
		for id := range sess {
			t.lock("sessions", id)
		}
	}
	return sts, sess, nil
}

func (t *tx) MachineStatuses(ctx context.Context) (map[string]site.MachineStatus, error) {
	if err := t.usable(false); err != nil {
		return nil, err
	}
	out := map[string]site.MachineStatus{}
	b := &pgx.Batch{}
	b.Queue(`SELECT machine, ` + statusCols + ` FROM machine_status`).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var name string
			var st site.MachineStatus
			if err := rows.Scan(append([]any{&name}, statusDest(&st)...)...); err != nil {
				return err
			}
			out[name] = st
		}
		return rows.Err()
	})
	if err := t.send(ctx, b, false); err != nil {
		return nil, fmt.Errorf("machine statuses: %w", err)
	}
	return out, nil
}

func (t *tx) SetMachineStatus(ctx context.Context, machine string, st site.MachineStatus) error {
	if err := t.usable(true); err != nil {
		return err
	}
	ok, err := t.write(ctx, "machine_status", machine, "set machine status",
		`UPDATE machine_status SET registration = $2::text, last_heartbeat = $3::timestamptz, load_index = $4::bigint,
		sessions = $5::bigint, cpu_percent = $6::double precision, memory_percent = $7::double precision,
		logons_in_progress = $8::bigint, memory_used_mb = $9::bigint, memory_total_mb = $10::bigint,
		registered_address = $11::text, protocol = $12::text, control_url = $13::text, control_token = $14::text,
		agent_version = $15::text, registration_conflict = $16::text, registration_conflict_at = $17::timestamptz,
		registered_credential = $18::text, control_pin = $19::text WHERE machine = $1::text`,
		machine, string(st.Registration), timeArg(st.LastHeartbeat), st.LoadIndex, st.Sessions, st.CPUPercent, st.MemoryPercent,
		st.LogonsInProgress, st.MemoryUsedMB, st.MemoryTotalMB, st.RegisteredAddress, st.Protocol, st.ControlURL,
		st.ControlToken, st.AgentVersion, st.Conflict, timeArg(st.ConflictAt), st.Credential, st.ControlPin)
	if err != nil {
		return err
	}
	if !ok {
		return site.NotFound(site.KindMachine, machine)
	}
	return nil
}

func (t *tx) MachineCredential(ctx context.Context, machine string) (site.MachineCredential, error) {
	if err := t.usable(false); err != nil {
		return site.MachineCredential{}, err
	}
	var c site.MachineCredential
	found := false
	b := &pgx.Batch{}
	queueOne(b, &found, `SELECT credential_id, issued_at, secret_fingerprint, bound, enrolment_token_hash, enrolment_token_expires
		FROM machine_credentials WHERE machine = $1::text`+t.forUpdate(), []any{machine},
		&c.ID, timeDest{&c.IssuedAt}, &c.SecretFingerprint, &c.Bound, &c.EnrolmentTokenHash, timeDest{&c.EnrolmentTokenExpires})
	if err := t.send(ctx, b, false); err != nil {
		return site.MachineCredential{}, fmt.Errorf("machine credential %q: %w", machine, err)
	}
	if !found {
		return site.MachineCredential{}, site.NotFound(site.KindMachine, machine)
	}
	if t.update {
		t.lock("machine_credentials", machine)
	}
	return c, nil
}

func (t *tx) SetMachineCredential(ctx context.Context, machine string, c site.MachineCredential) error {
	if err := t.usable(true); err != nil {
		return err
	}
	ok, err := t.write(ctx, "machine_credentials", machine, "set machine credential",
		`UPDATE machine_credentials SET credential_id = $2::text, issued_at = $3::timestamptz, secret_fingerprint = $4::text,
		bound = $5::boolean, enrolment_token_hash = $6::text, enrolment_token_expires = $7::timestamptz WHERE machine = $1::text`,
		machine, c.ID, timeArg(c.IssuedAt), c.SecretFingerprint, c.Bound, c.EnrolmentTokenHash, timeArg(c.EnrolmentTokenExpires))
	if err != nil {
		return err
	}
	if !ok {
		return site.NotFound(site.KindMachine, machine)
	}
	return nil
}

// queueOne queues a query for at most one row, scanned into dest; found
// reports whether there was one.
func queueOne(b *pgx.Batch, found *bool, query string, args []any, dest ...any) {
	b.Queue(query, args...).Query(func(rows pgx.Rows) error {
		if rows.Next() {
			*found = true
			return rows.Scan(dest...)
		}
		return nil
	})
}

// Times are timestamptz, which keeps microseconds; the zero time is NULL.
func timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// timeDest scans a timestamptz into a time.Time, in UTC, the zero time for
// NULL.
type timeDest struct{ t *time.Time }

func (d timeDest) ScanTimestamptz(v pgtype.Timestamptz) error {
	if !v.Valid || v.InfinityModifier != pgtype.Finite {
		*d.t = time.Time{}
		return nil
	}
	*d.t = v.Time.UTC()
	return nil
}

// nullIfEmpty stores an empty optional reference as NULL, which foreign
// keys ignore.
func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Secret reads a secret; in an Update, with the configuration lock (see
// site.Tx).
func (t *tx) Secret(ctx context.Context, name string) ([]byte, error) {
	if err := t.usable(false); err != nil {
		return nil, err
	}
	var v []byte
	found := false
	b := &pgx.Batch{}
	queueOne(b, &found, `SELECT value FROM secrets WHERE name = $1::text`, []any{name}, &v)
	if err := t.send(ctx, b, t.update); err != nil {
		return nil, fmt.Errorf("secret %q: %w", name, err)
	}
	if !found {
		return nil, site.Errorf(site.ENotFound, "secret %q is not set", name)
	}
	return v, nil
}

func (t *tx) SetSecret(ctx context.Context, name string, value []byte) error {
	if err := t.usable(true); err != nil {
		return err
	}
	if name == "" || len(value) == 0 {
		return site.Errorf(site.EInvalid, "a secret needs a name and a value")
	}
	if name == site.SecretDirectoryBindPassword {
		return site.Errorf(site.EInvalid, "secret %q is set with the directory settings", name)
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO secrets (name, value) VALUES ($1::text, $2::bytea) ON CONFLICT (name) DO UPDATE SET value = excluded.value`, name, value)
	t.wrote = true
	if err := t.send(ctx, b, true); err != nil {
		return fmt.Errorf("set secret %q: %w", name, err)
	}
	t.logChange(site.KindSecret, name)
	return nil
}

const accountLockCols = `account, window_start, failures, pending, pending_since, locked_until`

func accountLockDest(l *site.AccountLock) []any {
	return []any{&l.Account, timeDest{&l.WindowStart}, &l.Failures, &l.Pending, timeDest{&l.PendingSince}, timeDest{&l.LockedUntil}}
}

// AccountLock reads an account's lock-out state; in an Update it makes
// the row first when there is none, so that the read can lock it.
func (t *tx) AccountLock(ctx context.Context, account string) (site.AccountLock, error) {
	if err := t.usable(false); err != nil {
		return site.AccountLock{}, err
	}
	l := site.AccountLock{Account: account}
	found := false
	b := &pgx.Batch{}
	if t.update {
		b.Queue(`INSERT INTO account_locks (account) VALUES ($1::text) ON CONFLICT (account) DO NOTHING`, account)
		t.wrote = true
	}
	queueOne(b, &found, `SELECT `+accountLockCols+` FROM account_locks WHERE account = $1::text`+t.forUpdate(), []any{account}, accountLockDest(&l)...)
	if err := t.send(ctx, b, false); err != nil {
		return site.AccountLock{}, err
	}
	if t.update {
		t.lock("account_locks", account)
	}
	return l, nil
}

func (t *tx) SetAccountLock(ctx context.Context, l site.AccountLock) error {
	if err := t.usable(true); err != nil {
		return err
	}
	b := &pgx.Batch{}
	if l.Clear() {
		b.Queue(`DELETE FROM account_locks WHERE account = $1::text`, l.Account)
	} else {
		b.Queue(`INSERT INTO account_locks (account, window_start, failures, pending, pending_since, locked_until)
			VALUES ($1::text, $2::timestamptz, $3::bigint, $4::bigint, $5::timestamptz, $6::timestamptz)
			ON CONFLICT (account) DO UPDATE SET window_start = excluded.window_start, failures = excluded.failures,
			pending = excluded.pending, pending_since = excluded.pending_since, locked_until = excluded.locked_until`,
			l.Account, timeArg(l.WindowStart), l.Failures, l.Pending, timeArg(l.PendingSince), timeArg(l.LockedUntil))
	}
	t.wrote = true
	if t.locked[lockKey("account_locks", l.Account)] {
		// The row is locked: the write cannot fail for want of it, and
		// goes with the next round trip (the commit).
		t.pending = append(t.pending, b.QueuedQueries...)
		return nil
	}
	if err := t.send(ctx, b, false); err != nil {
		return fmt.Errorf("set lock-out of %q: %w", l.Account, err)
	}
	return nil
}

func (t *tx) AccountLocks(ctx context.Context) ([]site.AccountLock, error) {
	if err := t.usable(false); err != nil {
		return nil, err
	}
	var out []site.AccountLock
	b := &pgx.Batch{}
	b.Queue(`SELECT ` + accountLockCols + ` FROM account_locks WHERE failures > 0 OR pending > 0 OR locked_until IS NOT NULL ORDER BY account`).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var l site.AccountLock
			if err := rows.Scan(accountLockDest(&l)...); err != nil {
				return err
			}
			out = append(out, l)
		}
		return rows.Err()
	})
	if err := t.send(ctx, b, false); err != nil {
		return nil, fmt.Errorf("lock-outs: %w", err)
	}
	return out, nil
}
