package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// errReadOnly is returned by writes inside View.
var errReadOnly = errors.New("write in a read-only transaction")

// tx is a site.Tx on one SQLite transaction.
type tx struct {
	tx       *sql.Tx
	readOnly bool
	stmts    map[string]*sql.Stmt
	cache    *stmtCache // the pool's statements; nil: none
	queries  int        // statements run, for tests that guard against N+1 queries

	// configChanged is set by every successful configuration write; Update
	// then moves the configuration version once at commit, and logs the
	// objects written (changes) under the new version.
	configChanged bool
	changes       map[site.ConfigChange]bool
	// history holds the change records of History().Record, which
	// Update writes at commit, once the version has moved.
	history     []historyRow
	historyKeep int
	// pinVersion, when set, is the configuration version to leave at
	// commit (site.LocalCopy.SetConfigVersion).
	pinVersion int64
	// broken is the error of a write that failed halfway: Update refuses to
	// commit a transaction that holds part of a change.
	broken error
}

var _ site.Tx = (*tx)(nil)

func (t *tx) writable() error {
	if t.readOnly {
		return errReadOnly
	}
	return nil
}

// fail records that a write failed after it changed something.
func (t *tx) fail(err error) error {
	if t.broken == nil {
		t.broken = err
	}
	return err
}

// prepare returns query prepared in the transaction, on first use from
// the pool's statements when they have it (see stmtCache): loops of
// writes and lists reuse their statements.
func (t *tx) prepare(ctx context.Context, query string) (*sql.Stmt, error) {
	t.queries++
	if st := t.stmts[query]; st != nil {
		return st, nil
	}
	var st *sql.Stmt
	if ps := t.cache.get(query); ps != nil {
		st = t.tx.StmtContext(ctx, ps)
	} else {
		var err error
		if st, err = t.tx.PrepareContext(ctx, query); err != nil {
			return nil, dbErr(err)
		}
	}
	if t.stmts == nil {
		t.stmts = map[string]*sql.Stmt{}
	}
	t.stmts[query] = st
	return st, nil
}

func (t *tx) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := t.prepare(ctx, query)
	if err != nil {
		return nil, err
	}
	res, err := st.ExecContext(ctx, args...)
	return res, dbErr(err)
}

// execOne runs a statement that changes one row and reports whether it did.
func (t *tx) execOne(ctx context.Context, query string, args ...any) (bool, error) {
	res, err := t.exec(ctx, query, args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	return n > 0, nil
}

func (t *tx) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := t.prepare(ctx, query)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, args...)
	return rows, dbErr(err)
}

// scanOne runs a query for one row and scans it into dest. It returns
// sql.ErrNoRows when there is none.
func (t *tx) scanOne(ctx context.Context, query string, args []any, dest ...any) error {
	st, err := t.prepare(ctx, query)
	if err != nil {
		return err
	}
	return dbErr(st.QueryRowContext(ctx, args...).Scan(dest...))
}

// exists reports whether query returns a row.
func (t *tx) exists(ctx context.Context, query string, args ...any) (bool, error) {
	var one int
	err := t.scanOne(ctx, query, args, &one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// ConfigVersion returns the version committed before this transaction:
// Update moves it only at commit.
func (t *tx) ConfigVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := t.scanOne(ctx, `SELECT config_version FROM settings WHERE id = 1`, nil, &v); err != nil {
		return 0, fmt.Errorf("config version: %w", err)
	}
	return v, nil
}

func (t *tx) Settings(ctx context.Context) (site.Settings, error) {
	var s site.Settings
	err := t.scanOne(ctx, `SELECT name, domain, trust_xml_requests, anonymous_app_data, server_data_credentials FROM settings WHERE id = 1`, nil,
		&s.Name, &s.Domain, &s.TrustXMLRequests, &s.AnonymousAppData, &s.ServerDataCredentials)
	if err != nil {
		return site.Settings{}, fmt.Errorf("settings: %w", err)
	}
	return s, nil
}

func (t *tx) SetSettings(ctx context.Context, s site.Settings) error {
	if err := t.writable(); err != nil {
		return err
	}
	if err := s.Validate(); err != nil {
		return err
	}
	_, err := t.exec(ctx, `UPDATE settings SET name = ?, domain = ?, trust_xml_requests = ?, anonymous_app_data = ?, server_data_credentials = ? WHERE id = 1`,
		s.Name, s.Domain, s.TrustXMLRequests, s.AnonymousAppData, s.ServerDataCredentials)
	if err != nil {
		return fmt.Errorf("set settings: %w", err)
	}
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

func (t *tx) MachineStatus(ctx context.Context, machine string) (site.MachineStatus, error) {
	st, err := scanStatus(func(dest ...any) error {
		return t.scanOne(ctx, `SELECT `+statusCols+` FROM machines WHERE name = ?`, []any{machine}, dest...)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return site.MachineStatus{}, site.NotFound(site.KindMachine, machine)
	}
	if err != nil {
		return site.MachineStatus{}, fmt.Errorf("machine status %q: %w", machine, err)
	}
	return st, nil
}

// statusCols are the columns of a machine's status, as scanStatus reads
// them.
const statusCols = `registration, coalesce(last_heartbeat, ''), load_index, sessions, cpu_percent, memory_percent,
	logons_in_progress, memory_used_mb, memory_total_mb, registered_address, protocol, control_url, control_token, agent_version,
	registration_conflict, coalesce(registration_conflict_at, ''), registered_credential, control_pin`

// scanStatus reads statusCols, after the destinations in first, with scan.
func scanStatus(scan func(dest ...any) error, first ...any) (site.MachineStatus, error) {
	var st site.MachineStatus
	var heartbeat, conflictAt string
	dest := append(first, &st.Registration, &heartbeat, &st.LoadIndex, &st.Sessions, &st.CPUPercent, &st.MemoryPercent,
		&st.LogonsInProgress, &st.MemoryUsedMB, &st.MemoryTotalMB, &st.RegisteredAddress, &st.Protocol,
		&st.ControlURL, &st.ControlToken, &st.AgentVersion, &st.Conflict, &conflictAt, &st.Credential, &st.ControlPin)
	err := scan(dest...)
	if err == nil {
		st.LastHeartbeat, err = parseTime(heartbeat)
	}
	if err == nil {
		st.ConflictAt, err = parseTime(conflictAt)
	}
	return st, err
}

func (t *tx) MachineSessions(ctx context.Context, machines, ids []string) (map[string]site.MachineStatus, map[string]site.Session, error) {
	sts := make(map[string]site.MachineStatus, len(machines))
	sess := make(map[string]site.Session, len(ids))
	for _, m := range machines {
		st, err := t.MachineStatus(ctx, m)
		switch {
		case site.ErrorCode(err) == site.ENotFound:
		case err != nil:
			return nil, nil, err
		default:
			sts[m] = st
		}
	}
	for _, id := range ids {
		s, err := t.Sessions().Get(ctx, id)
		switch {
		case site.ErrorCode(err) == site.ENotFound:
		case err != nil:
			return nil, nil, err
		default:
			sess[id] = s
		}
	}
	return sts, sess, nil
}

func (t *tx) MachineStatuses(ctx context.Context) (map[string]site.MachineStatus, error) {
	rows, err := t.query(ctx, `SELECT name, `+statusCols+` FROM machines`)
	if err != nil {
		return nil, fmt.Errorf("machine statuses: %w", err)
	}
	defer rows.Close()
	out := map[string]site.MachineStatus{}
	for rows.Next() {
		var name string
		st, err := scanStatus(rows.Scan, &name)
		if err != nil {
			return nil, fmt.Errorf("machine statuses: %w", err)
		}
		out[name] = st
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("machine statuses: %w", dbErr(err))
	}
	return out, nil
}

func (t *tx) SetMachineStatus(ctx context.Context, machine string, st site.MachineStatus) error {
	if err := t.writable(); err != nil {
		return err
	}
	ok, err := t.execOne(ctx, `UPDATE machines SET registration = ?2, last_heartbeat = ?3, load_index = ?4,
		sessions = ?5, cpu_percent = ?6, memory_percent = ?7, logons_in_progress = ?8, memory_used_mb = ?9,
		memory_total_mb = ?10, registered_address = ?11, protocol = ?12, control_url = ?13, control_token = ?14,
		agent_version = ?15, registration_conflict = ?16, registration_conflict_at = ?17,
		registered_credential = ?18, control_pin = ?19 WHERE name = ?1`,
		machine, string(st.Registration), timeArg(st.LastHeartbeat), st.LoadIndex, st.Sessions, st.CPUPercent, st.MemoryPercent,
		st.LogonsInProgress, st.MemoryUsedMB, st.MemoryTotalMB, st.RegisteredAddress, st.Protocol, st.ControlURL,
		st.ControlToken, st.AgentVersion, st.Conflict, timeArg(st.ConflictAt), st.Credential, st.ControlPin)
	if err != nil {
		return fmt.Errorf("set machine status %q: %w", machine, err)
	}
	if !ok {
		return site.NotFound(site.KindMachine, machine)
	}
	return nil
}

func (t *tx) MachineCredential(ctx context.Context, machine string) (site.MachineCredential, error) {
	var c site.MachineCredential
	var issued, expires string
	err := t.scanOne(ctx, `SELECT credential_id, coalesce(credential_issued_at, ''), credential_secret, credential_bound,
		enrolment_token_hash, coalesce(enrolment_token_expires, '') FROM machines WHERE name = ?`, []any{machine},
		&c.ID, &issued, &c.SecretFingerprint, &c.Bound, &c.EnrolmentTokenHash, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return site.MachineCredential{}, site.NotFound(site.KindMachine, machine)
	}
	if err == nil {
		c.IssuedAt, err = parseTime(issued)
	}
	if err == nil {
		c.EnrolmentTokenExpires, err = parseTime(expires)
	}
	if err != nil {
		return site.MachineCredential{}, fmt.Errorf("machine credential %q: %w", machine, err)
	}
	return c, nil
}

func (t *tx) SetMachineCredential(ctx context.Context, machine string, c site.MachineCredential) error {
	if err := t.writable(); err != nil {
		return err
	}
	ok, err := t.execOne(ctx, `UPDATE machines SET credential_id = ?2, credential_issued_at = ?3, credential_secret = ?4,
		credential_bound = ?5, enrolment_token_hash = ?6, enrolment_token_expires = ?7 WHERE name = ?1`,
		machine, c.ID, timeArg(c.IssuedAt), c.SecretFingerprint, c.Bound, c.EnrolmentTokenHash, timeArg(c.EnrolmentTokenExpires))
	if err != nil {
		return fmt.Errorf("set machine credential %q: %w", machine, err)
	}
	if !ok {
		return site.NotFound(site.KindMachine, machine)
	}
	return nil
}

// Times are stored as fixed-width UTC text, which sorts in time order and
// keeps nanoseconds; the zero time is NULL.
const timeFormat = "2006-01-02T15:04:05.000000000Z"

func timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(timeFormat)
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(timeFormat, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse time %q: %w", s, err)
	}
	return t, nil
}

// nullIfEmpty stores an empty optional reference as NULL, which foreign
// keys ignore.
func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (t *tx) Secret(ctx context.Context, name string) ([]byte, error) {
	var v []byte
	err := t.scanOne(ctx, `SELECT value FROM secrets WHERE name = ?`, []any{name}, &v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, site.Errorf(site.ENotFound, "secret %q is not set", name)
	}
	if err != nil {
		return nil, fmt.Errorf("secret %q: %w", name, err)
	}
	return v, nil
}

func (t *tx) SetSecret(ctx context.Context, name string, value []byte) error {
	if err := t.writable(); err != nil {
		return err
	}
	if name == "" || len(value) == 0 {
		return site.Errorf(site.EInvalid, "a secret needs a name and a value")
	}
	if name == site.SecretDirectoryBindPassword {
		return site.Errorf(site.EInvalid, "secret %q is set with the directory settings", name)
	}
	if _, err := t.exec(ctx, `INSERT INTO secrets (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET value = excluded.value`,
		name, value); err != nil {
		return fmt.Errorf("set secret %q: %w", name, err)
	}
	t.logChange(site.KindSecret, name)
	return nil
}

const accountLockCols = `account, coalesce(window_start, ''), failures, pending, coalesce(pending_since, ''), coalesce(locked_until, '')`

func scanAccountLock(scan func(dest ...any) error) (site.AccountLock, error) {
	var l site.AccountLock
	var ws, ps, lu string
	if err := scan(&l.Account, &ws, &l.Failures, &l.Pending, &ps, &lu); err != nil {
		return l, err
	}
	var err error
	if l.WindowStart, err = parseTime(ws); err == nil {
		if l.PendingSince, err = parseTime(ps); err == nil {
			l.LockedUntil, err = parseTime(lu)
		}
	}
	return l, err
}

func (t *tx) AccountLock(ctx context.Context, account string) (site.AccountLock, error) {
	st, err := t.prepare(ctx, `SELECT `+accountLockCols+` FROM account_locks WHERE account = ?`)
	if err != nil {
		return site.AccountLock{}, err
	}
	l, err := scanAccountLock(st.QueryRowContext(ctx, account).Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return site.AccountLock{Account: account}, nil
	}
	if err != nil {
		return site.AccountLock{}, dbErr(err)
	}
	return l, nil
}

func (t *tx) SetAccountLock(ctx context.Context, l site.AccountLock) error {
	if err := t.writable(); err != nil {
		return err
	}
	var err error
	if l.Clear() {
		_, err = t.exec(ctx, `DELETE FROM account_locks WHERE account = ?`, l.Account)
	} else {
		_, err = t.exec(ctx, `INSERT INTO account_locks (account, window_start, failures, pending, pending_since, locked_until)
			VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (account) DO UPDATE SET window_start = excluded.window_start,
			failures = excluded.failures, pending = excluded.pending, pending_since = excluded.pending_since, locked_until = excluded.locked_until`,
			l.Account, timeArg(l.WindowStart), l.Failures, l.Pending, timeArg(l.PendingSince), timeArg(l.LockedUntil))
	}
	if err != nil {
		return fmt.Errorf("set lock-out of %q: %w", l.Account, err)
	}
	return nil
}

func (t *tx) AccountLocks(ctx context.Context) ([]site.AccountLock, error) {
	rows, err := t.query(ctx, `SELECT `+accountLockCols+` FROM account_locks ORDER BY account`)
	if err != nil {
		return nil, fmt.Errorf("lock-outs: %w", err)
	}
	defer rows.Close()
	var out []site.AccountLock
	for rows.Next() {
		l, err := scanAccountLock(rows.Scan)
		if err != nil {
			return nil, fmt.Errorf("lock-outs: %w", err)
		}
		out = append(out, l)
	}
	return out, dbErr(rows.Err())
}
