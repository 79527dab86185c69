-- Network-boot targets (site.Target): a machine known by its MAC, bound
-- to an image of the image store, a version of it (NULL: the production
-- version at each boot) and a write-cache mode. MACs are unique in a
-- site, a rule between objects that site.Config.Validate checks (one
-- change may move a MAC from one target to another), so the index on
-- mac is not unique.
CREATE TABLE targets (
	name        TEXT PRIMARY KEY,
	mac         TEXT    NOT NULL,
	image       TEXT    NOT NULL,
	version     INTEGER,
	cache       TEXT    NOT NULL,
	ram         TEXT    NOT NULL DEFAULT '',
	description TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX targets_mac ON targets (mac);

-- The boot log (site.BootLog): one row per answer of the boot server to
-- a known target. Bounded as rows are written: the last
-- site.BootLogKeep rows of each target, none older than
-- site.BootLogMaxAge. Rows name their target without holding on to it:
-- they outlive its deletion, for history.
CREATE TABLE boot_records (
	seq     INTEGER PRIMARY KEY AUTOINCREMENT,
	at      TEXT    NOT NULL,
	target  TEXT    NOT NULL,
	mac     TEXT    NOT NULL,
	image   TEXT    NOT NULL,
	version INTEGER NOT NULL,
	cache   TEXT    NOT NULL,
	step    TEXT    NOT NULL,
	remote  TEXT    NOT NULL,
	error   TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX boot_records_target ON boot_records (target, seq);
CREATE INDEX boot_records_mac ON boot_records (mac, seq);
CREATE INDEX boot_records_at ON boot_records (at);
