-- Site secrets every broker shares: the token signing key, the enrolment
-- secret. Not configuration: neither exported nor applied.
CREATE TABLE secrets (
	name  text COLLATE "C" PRIMARY KEY,
	value bytea NOT NULL
);
