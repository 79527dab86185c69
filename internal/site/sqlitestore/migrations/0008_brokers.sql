-- The brokers of the site, as each last reported itself (runtime state).
CREATE TABLE brokers (
	name       TEXT PRIMARY KEY,
	zone       TEXT NOT NULL DEFAULT '',
	address    TEXT NOT NULL DEFAULT '',
	instance   TEXT NOT NULL,
	started_at TEXT,
	last_seen  TEXT
);
