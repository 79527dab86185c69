-- The site configuration, machine status, sessions and admin accounts.
--
-- Configuration objects are keyed by name. References between them are
-- foreign keys that restrict deletes; rows of link tables belong to their
-- owner (the first column) and go with it. Sessions refer to users,
-- resources and machines by name only, so that session history survives
-- configuration deletes.

CREATE TABLE settings (
	id                 INTEGER PRIMARY KEY CHECK (id = 1),
	name               TEXT    NOT NULL,
	domain             TEXT    NOT NULL,
	trust_xml_requests INTEGER NOT NULL DEFAULT 0,
	anonymous_app_data INTEGER NOT NULL DEFAULT 0,
	config_version     INTEGER NOT NULL DEFAULT 1
) STRICT;

CREATE TABLE zones (
	name        TEXT    PRIMARY KEY,
	description TEXT    NOT NULL DEFAULT '',
	is_primary  INTEGER NOT NULL DEFAULT 0
) STRICT, WITHOUT ROWID;

CREATE TABLE catalogs (
	name        TEXT PRIMARY KEY,
	kind        TEXT NOT NULL CHECK (kind IN ('multi-session', 'single-session-pooled', 'single-session-assigned')),
	zone        TEXT NOT NULL REFERENCES zones (name) ON DELETE RESTRICT,
	description TEXT NOT NULL DEFAULT ''
) STRICT, WITHOUT ROWID;
CREATE INDEX catalogs_zone ON catalogs (zone);

CREATE TABLE groups (
	name        TEXT PRIMARY KEY,
	description TEXT NOT NULL DEFAULT ''
) STRICT, WITHOUT ROWID;

CREATE TABLE users (
	name          TEXT    PRIMARY KEY,
	display_name  TEXT    NOT NULL DEFAULT '',
	disabled      INTEGER NOT NULL DEFAULT 0,
	password_hash TEXT    NOT NULL DEFAULT ''
) STRICT, WITHOUT ROWID;

CREATE TABLE user_groups (
	user_name  TEXT    NOT NULL REFERENCES users (name) ON DELETE CASCADE,
	group_name TEXT    NOT NULL REFERENCES groups (name) ON DELETE RESTRICT,
	position   INTEGER NOT NULL,
	PRIMARY KEY (user_name, group_name)
) STRICT, WITHOUT ROWID;
CREATE INDEX user_groups_group ON user_groups (group_name);

CREATE TABLE machines (
	name           TEXT    PRIMARY KEY,
	catalog        TEXT    NOT NULL REFERENCES catalogs (name) ON DELETE RESTRICT,
	address        TEXT    NOT NULL,
	max_sessions   INTEGER NOT NULL DEFAULT 0,
	maintenance    INTEGER NOT NULL DEFAULT 0,
	assigned_user  TEXT    REFERENCES users (name) ON DELETE RESTRICT, -- NULL when unassigned

	-- Runtime status, reported by the VDA.
	registration   TEXT    NOT NULL DEFAULT 'unregistered',
	last_heartbeat TEXT, -- UTC, NULL when never
	load_index     INTEGER NOT NULL DEFAULT 0,
	sessions       INTEGER NOT NULL DEFAULT 0,
	cpu_percent    REAL    NOT NULL DEFAULT 0,
	memory_percent REAL    NOT NULL DEFAULT 0
) STRICT, WITHOUT ROWID;
CREATE INDEX machines_catalog ON machines (catalog);
CREATE INDEX machines_assigned_user ON machines (assigned_user) WHERE assigned_user IS NOT NULL;

CREATE TABLE delivery_groups (
	name                   TEXT    PRIMARY KEY,
	description            TEXT    NOT NULL DEFAULT '',
	reconnect              TEXT    NOT NULL,
	zone_preference        TEXT    NOT NULL,
	home_zone              TEXT    REFERENCES zones (name) ON DELETE RESTRICT, -- NULL when none
	max_sessions_enabled   INTEGER NOT NULL DEFAULT 0,
	max_sessions_limit     INTEGER NOT NULL DEFAULT 0,
	cpu_enabled            INTEGER NOT NULL DEFAULT 0,
	cpu_full_percent       INTEGER NOT NULL DEFAULT 0,
	memory_enabled         INTEGER NOT NULL DEFAULT 0,
	memory_full_percent    INTEGER NOT NULL DEFAULT 0,
	memory_base_load_mb    INTEGER NOT NULL DEFAULT 0,
	logons_enabled         INTEGER NOT NULL DEFAULT 0,
	logons_tolerance       INTEGER NOT NULL DEFAULT 0,
	logons_hard            INTEGER NOT NULL DEFAULT 0
) STRICT, WITHOUT ROWID;
CREATE INDEX delivery_groups_home_zone ON delivery_groups (home_zone) WHERE home_zone IS NOT NULL;

CREATE TABLE delivery_group_catalogs (
	delivery_group TEXT    NOT NULL REFERENCES delivery_groups (name) ON DELETE CASCADE,
	catalog        TEXT    NOT NULL REFERENCES catalogs (name) ON DELETE RESTRICT,
	position       INTEGER NOT NULL,
	PRIMARY KEY (delivery_group, catalog)
) STRICT, WITHOUT ROWID;
CREATE INDEX delivery_group_catalogs_catalog ON delivery_group_catalogs (catalog);

-- Applications and desktops share one namespace.
CREATE TABLE resources (
	name         TEXT    PRIMARY KEY,
	kind         TEXT    NOT NULL CHECK (kind IN ('application', 'desktop')),
	display_name TEXT    NOT NULL,
	folder       TEXT    NOT NULL DEFAULT '',
	description  TEXT    NOT NULL DEFAULT '',
	command_line TEXT    NOT NULL DEFAULT '',
	icon         TEXT    NOT NULL DEFAULT '',
	disabled     INTEGER NOT NULL DEFAULT 0
) STRICT, WITHOUT ROWID;
CREATE INDEX resources_kind ON resources (kind, name);

CREATE TABLE resource_delivery_groups (
	resource       TEXT    NOT NULL REFERENCES resources (name) ON DELETE CASCADE,
	delivery_group TEXT    NOT NULL REFERENCES delivery_groups (name) ON DELETE RESTRICT,
	position       INTEGER NOT NULL,
	PRIMARY KEY (resource, delivery_group)
) STRICT, WITHOUT ROWID;
CREATE INDEX resource_delivery_groups_delivery_group ON resource_delivery_groups (delivery_group);

CREATE TABLE entitlements (
	name           TEXT PRIMARY KEY,
	delivery_group TEXT NOT NULL REFERENCES delivery_groups (name) ON DELETE RESTRICT
) STRICT, WITHOUT ROWID;
CREATE INDEX entitlements_delivery_group ON entitlements (delivery_group);

CREATE TABLE entitlement_resources (
	entitlement TEXT    NOT NULL REFERENCES entitlements (name) ON DELETE CASCADE,
	resource    TEXT    NOT NULL REFERENCES resources (name) ON DELETE RESTRICT,
	position    INTEGER NOT NULL,
	PRIMARY KEY (entitlement, resource)
) STRICT, WITHOUT ROWID;
CREATE INDEX entitlement_resources_resource ON entitlement_resources (resource);

CREATE TABLE entitlement_users (
	entitlement TEXT    NOT NULL REFERENCES entitlements (name) ON DELETE CASCADE,
	user_name   TEXT    NOT NULL REFERENCES users (name) ON DELETE RESTRICT,
	position    INTEGER NOT NULL,
	PRIMARY KEY (entitlement, user_name)
) STRICT, WITHOUT ROWID;
CREATE INDEX entitlement_users_user ON entitlement_users (user_name);

CREATE TABLE entitlement_groups (
	entitlement TEXT    NOT NULL REFERENCES entitlements (name) ON DELETE CASCADE,
	group_name  TEXT    NOT NULL REFERENCES groups (name) ON DELETE RESTRICT,
	position    INTEGER NOT NULL,
	PRIMARY KEY (entitlement, group_name)
) STRICT, WITHOUT ROWID;
CREATE INDEX entitlement_groups_group ON entitlement_groups (group_name);

-- Sessions name their user, resource, delivery group and machine as plain
-- text, without foreign keys: history outlives the configuration.
CREATE TABLE sessions (
	id             TEXT PRIMARY KEY,
	user_name      TEXT NOT NULL,
	resource       TEXT NOT NULL,
	delivery_group TEXT NOT NULL,
	machine        TEXT NOT NULL,
	state          TEXT NOT NULL CHECK (state IN ('pending', 'active', 'disconnected', 'logged-off')),
	client_name    TEXT NOT NULL DEFAULT '',
	client_address TEXT NOT NULL DEFAULT '',
	created_at     TEXT, -- UTC, NULL when unset
	updated_at     TEXT,
	ended_at       TEXT
) STRICT, WITHOUT ROWID;
CREATE INDEX sessions_user ON sessions (user_name, id);
CREATE INDEX sessions_machine ON sessions (machine, id);
CREATE INDEX sessions_state ON sessions (state, id);

CREATE TABLE admins (
	name          TEXT PRIMARY KEY,
	password_hash TEXT NOT NULL,
	created_at    TEXT -- UTC, NULL when unset
) STRICT, WITHOUT ROWID;
