-- A user's home zone (for user-home zone preferences), and whether a
-- satellite zone's VDAs may fall back to the primary zone's brokers.
ALTER TABLE users ADD COLUMN home_zone text COLLATE "C" REFERENCES zones (name) ON DELETE RESTRICT; -- NULL when none
CREATE INDEX users_home_zone ON users (home_zone) WHERE home_zone IS NOT NULL;
ALTER TABLE zones ADD COLUMN primary_fallback boolean NOT NULL DEFAULT false;
