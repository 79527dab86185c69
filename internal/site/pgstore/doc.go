// Package pgstore is the site database on PostgreSQL, the implementation of
// site.Store for sites whose brokers share one database.
//
// A Store is a pgx connection pool. Its schema lives in the first schema of
// the connection's search_path and is migrated at Open, in one transaction
// under an advisory lock, so that brokers starting together migrate it
// once.
//
// Transactions: a View is one REPEATABLE READ READ ONLY transaction, one
// snapshot for its whole life. An Update is a READ COMMITTED transaction
// in which nothing waits for what it does not touch:
//
//   - its first read or write of the configuration (the settings, the
//     config version, any configuration collection) locks the settings
//     row, so that configuration reads and changes run one transaction at
//     a time, as on sqlitestore, and every later read sees the
//     configuration as it is while the lock is held;
//   - its reads of runtime rows (MachineStatus, MachineCredential, a
//     session, an admin) lock those rows (SELECT ... FOR UPDATE), so that a
//     read, check and write of one machine, session or account is atomic
//     without locking any other;
//   - a session being created locks its machine's row against deletion
//     (FOR KEY SHARE), and a machine's delete locks that row before it
//     counts the machine's live sessions.
//
// PostgreSQL reports a deadlock between two Updates (which only a cycle in
// the rows they lock makes) as an EUnavailable error; Update does not run
// fn again, since the site.Store contract does not say that fn may run
// twice.
//
// Round trips, which cost the latency between broker and database each:
// every call on a Tx costs at most one, its statements sent together in a
// pipeline; BEGIN, the configuration lock and, in a View, the settings row
// ride with the first call that needs them; a write of a row the
// transaction locked (a machine's status or credential, a session), which
// cannot miss it, waits and rides with the next call or the COMMIT; and a
// View, or an Update that wrote nothing, ends without waiting for the
// server. An Update that reads and locks a machine's status, sets it and
// creates a session costs three round trips; a heartbeat (read, set) two;
// LoadConfig ten, one per kind; a configuration change one per object it
// creates, updates or deletes, plus the commit. A statement's first use
// on a connection costs one more, to prepare it (none with
// default_query_exec_mode=exec in the DSN, which sends every statement
// unprepared).
//
// Placements: Store is a site.Placer. Place seats a launch in one round
// trip (BEGIN, a call of the place_session function that migration 0002
// creates, and COMMIT, sent together), with the results and errors of
// site.PlaceTx. The function's comment gives the order in which it takes
// its locks (the user's advisory lock, the configuration lock only to
// assign a machine, the machine's row to share, its status); it holds
// those of one candidate at a time, and deadlocks with no other
// transaction of the store.
//
// Errors: PostgreSQL errors become site errors (a lost connection, a lock
// not granted within Options.LockTimeout and a deadlock are EUnavailable);
// no error or log line carries the DSN's password. A server at its
// connection limit (SQLSTATE 53300: max_connections, or a role's or
// database's CONNECTION LIMIT) is busy, not lost: a transaction that
// needs a connection then waits for one (the pool's own, or one another
// client frees), bounded by its context (by AnswerTimeout when it has no
// deadline), and the refusals are counted (ConnLimitRefusals); one that
// waits in vain fails with an EUnavailable error that matches
// site.ErrConnLimit. (57P03, a server starting, stopping or in recovery,
// is unavailable.) SizePool fits a pool to what the server has left.
//
// It needs PostgreSQL 11 or later; it is tested on 15.
//
// Only the assembly (internal/server, cmd/usher) and tests open a Store;
// everything else sees a site.Store. It imports the domain (site) and pgx,
// which no other package imports but internal/pgadmin (the benches' and
// tests' administration of a PostgreSQL server) and internal/pgtest.
package pgstore
