-- Network-boot targets (site.Target): a machine known by its MAC, bound
-- to an image of the image store, a version of it (NULL: the production
-- version at each boot) and a write-cache mode. MACs are unique in a
-- site, a rule between objects that site.Config.Validate checks (one
-- change may move a MAC from one target to another), so the index on
-- mac is not unique.
CREATE TABLE targets (
	name        text COLLATE "C" PRIMARY KEY,
	mac         text COLLATE "C" NOT NULL,
	image       text COLLATE "C" NOT NULL,
	version     bigint,
	cache       text NOT NULL,
	ram         text NOT NULL DEFAULT '',
	description text NOT NULL DEFAULT ''
);
CREATE INDEX targets_mac ON targets (mac);

-- The boot log (site.BootLog): one row per answer of the boot server to
-- a known target. Bounded as rows are written: the last
-- site.BootLogKeep rows of each target, none older than
-- site.BootLogMaxAge. Rows name their target without holding on to it:
-- they outlive its deletion, for history.
CREATE TABLE boot_records (
	seq     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	at      timestamptz NOT NULL,
	target  text COLLATE "C" NOT NULL,
	mac     text COLLATE "C" NOT NULL,
	image   text COLLATE "C" NOT NULL,
	version bigint NOT NULL,
	cache   text NOT NULL,
	step    text NOT NULL,
	remote  text NOT NULL,
	error   text NOT NULL DEFAULT ''
);
CREATE INDEX boot_records_target ON boot_records (target, seq);
CREATE INDEX boot_records_mac ON boot_records (mac, seq);
CREATE INDEX boot_records_at ON boot_records (at);
