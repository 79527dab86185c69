-- The brokers of the site, as each last reported itself (runtime state).
CREATE TABLE brokers (
	name       text COLLATE "C" PRIMARY KEY,
	zone       text NOT NULL DEFAULT '',
	address    text NOT NULL DEFAULT '',
	instance   text NOT NULL,
	started_at timestamptz,
	last_seen  timestamptz
);
