-- Site-wide lock-out state of accounts (site.AccountLock): runtime state,
-- one row per account with failed or pending password checks or a lock.
CREATE TABLE account_locks (
	account       TEXT PRIMARY KEY,
	window_start  TEXT,
	failures      INTEGER NOT NULL DEFAULT 0,
	pending       INTEGER NOT NULL DEFAULT 0,
	pending_since TEXT,
	locked_until  TEXT
);
