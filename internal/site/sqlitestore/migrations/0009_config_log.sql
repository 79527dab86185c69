-- What each configuration change wrote: one row per object (kind and name
-- as written; 'settings' and 'secret' for those), under the version the
-- change committed as, so that a broker rereads only what changed. Only
-- the last few versions are kept (site.ConfigLogKeep); a broker that is
-- further behind reads the whole configuration.
CREATE TABLE config_log (
	version INTEGER NOT NULL,
	kind    TEXT    NOT NULL,
	name    TEXT    NOT NULL,
	PRIMARY KEY (version, kind, name)
) WITHOUT ROWID;
