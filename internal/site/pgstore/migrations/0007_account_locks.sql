-- Site-wide lock-out state of accounts (site.AccountLock): runtime state,
-- one row per account with failed or pending password checks or a lock.
CREATE TABLE account_locks (
	account       text COLLATE "C" PRIMARY KEY,
	window_start  timestamptz,
	failures      bigint NOT NULL DEFAULT 0,
	pending       bigint NOT NULL DEFAULT 0,
	pending_since timestamptz,
	locked_until  timestamptz
);
