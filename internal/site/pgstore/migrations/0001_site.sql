-- The site configuration, the machines' runtime status and credentials,
-- sessions and admin accounts.
--
-- Names are text in the "C" collation: they compare and sort byte by byte,
-- as Go strings do, whatever the database's locale, so that lists come in
-- the same order, and pages break at the same names, as on every store.
--
-- Configuration objects are keyed by name. References between them are
-- foreign keys that restrict deletes; rows of link tables belong to their
-- owner (the first column) and go with it, and keep the order of the list
-- they store in position. Sessions refer to users, resources and machines
-- by name only, so that session history survives configuration deletes.

CREATE TABLE settings (
	id                      smallint PRIMARY KEY CHECK (id = 1),
	name                    text     NOT NULL,
	domain                  text     NOT NULL,
	trust_xml_requests      boolean  NOT NULL DEFAULT false,
	anonymous_app_data      boolean  NOT NULL DEFAULT false,
	server_data_credentials boolean  NOT NULL DEFAULT false,
	-- Moves by one with every transaction that changes the configuration.
	-- Such a transaction locks this row first, so configuration changes
	-- commit one at a time.
	config_version          bigint   NOT NULL DEFAULT 1 CHECK (config_version >= 1)
);

CREATE TABLE zones (
	name        text COLLATE "C" PRIMARY KEY,
	description text    NOT NULL DEFAULT '',
	is_primary  boolean NOT NULL DEFAULT false
);

CREATE TABLE catalogs (
	name        text COLLATE "C" PRIMARY KEY,
	kind        text NOT NULL CHECK (kind IN ('multi-session', 'single-session-pooled', 'single-session-assigned')),
	zone        text COLLATE "C" NOT NULL REFERENCES zones (name) ON DELETE RESTRICT,
	description text NOT NULL DEFAULT ''
);
CREATE INDEX catalogs_zone ON catalogs (zone);

-- Account names (users', groups', admins') match as Windows matches them:
-- case-insensitively, in any Unicode normal form. name_key holds the
-- folded name (site.FoldName); its unique index refuses a second account
-- whose name differs from one only in case or form, and lookups by any
-- spelling go through it.
CREATE TABLE groups (
	name        text COLLATE "C" PRIMARY KEY,
	name_key    text COLLATE "C" NOT NULL UNIQUE,
	description text NOT NULL DEFAULT ''
);

CREATE TABLE users (
	name          text COLLATE "C" PRIMARY KEY,
	name_key      text COLLATE "C" NOT NULL UNIQUE,
	display_name  text    NOT NULL DEFAULT '',
	disabled      boolean NOT NULL DEFAULT false,
	password_hash text    NOT NULL DEFAULT '' -- PHC string, '' for no password
);

CREATE TABLE user_groups (
	user_name  text COLLATE "C" NOT NULL REFERENCES users (name) ON DELETE CASCADE,
	group_name text COLLATE "C" NOT NULL REFERENCES groups (name) ON DELETE RESTRICT,
	position   integer NOT NULL,
	PRIMARY KEY (user_name, group_name)
);
CREATE INDEX user_groups_group ON user_groups (group_name);

CREATE TABLE machines (
	name          text COLLATE "C" PRIMARY KEY,
	catalog       text COLLATE "C" NOT NULL REFERENCES catalogs (name) ON DELETE RESTRICT,
	address       text    NOT NULL,
	max_sessions  bigint  NOT NULL DEFAULT 0,
	maintenance   boolean NOT NULL DEFAULT false,
	assigned_user text COLLATE "C" REFERENCES users (name) ON DELETE RESTRICT -- NULL when unassigned
);
CREATE INDEX machines_catalog ON machines (catalog);
CREATE INDEX machines_assigned_user ON machines (assigned_user) WHERE assigned_user IS NOT NULL;

-- A machine's runtime state: what its VDA registered and reports, and the
-- sessions the brokers count on it. One row per machine, created and
-- deleted with it. Brokers update it on every heartbeat and launch, each
-- locking only its machine's row; the spare room in each page lets those
-- updates stay on the page (HOT) without touching an index.
CREATE TABLE machine_status (
	machine                  text COLLATE "C" PRIMARY KEY REFERENCES machines (name) ON DELETE CASCADE,
	registration             text   NOT NULL DEFAULT 'unregistered',
	last_heartbeat           timestamptz, -- NULL when never
	load_index               bigint NOT NULL DEFAULT 0,
	sessions                 bigint NOT NULL DEFAULT 0,
	logons_in_progress       bigint NOT NULL DEFAULT 0,
	cpu_percent              double precision NOT NULL DEFAULT 0,
	memory_percent           double precision NOT NULL DEFAULT 0,
	memory_used_mb           bigint NOT NULL DEFAULT 0,
	memory_total_mb          bigint NOT NULL DEFAULT 0,
	registered_address       text   NOT NULL DEFAULT '',
	protocol                 text   NOT NULL DEFAULT '',
	control_url              text   NOT NULL DEFAULT '',
	control_token            text   NOT NULL DEFAULT '',
	agent_version            text   NOT NULL DEFAULT '',
	-- The credential whose VDA holds the live registration, and the last
	-- registration another VDA tried while that one was live.
	registered_credential    text   NOT NULL DEFAULT '',
	registration_conflict    text   NOT NULL DEFAULT '',
	registration_conflict_at timestamptz
) WITH (fillfactor = 70);

-- Machine credentials, revocable one by one: a VDA's token carries the ID
-- of its machine's current credential, which enrolling again replaces and
-- an admin clears. secret_fingerprint ties a credential enrolled with the
-- site's enrolment secret to that secret; bound machines enrol only with a
-- single-use machine enrolment token, kept as its SHA-256. One row per
-- machine, created and deleted with it: a machine created again starts
-- with no credential.
CREATE TABLE machine_credentials (
	machine                 text COLLATE "C" PRIMARY KEY REFERENCES machines (name) ON DELETE CASCADE,
	credential_id           text    NOT NULL DEFAULT '',
	issued_at               timestamptz,
	secret_fingerprint      text    NOT NULL DEFAULT '',
	bound                   boolean NOT NULL DEFAULT false,
	enrolment_token_hash    text    NOT NULL DEFAULT '',
	enrolment_token_expires timestamptz
);

CREATE TABLE delivery_groups (
	name            text COLLATE "C" PRIMARY KEY,
	description     text  NOT NULL DEFAULT '',
	reconnect       text  NOT NULL,
	zone_preference text  NOT NULL,
	home_zone       text COLLATE "C" REFERENCES zones (name) ON DELETE RESTRICT, -- NULL when none
	-- site.LoadRules as JSON: read and written whole, with the rules'
	-- own field names.
	load_rules      jsonb NOT NULL CHECK (jsonb_typeof(load_rules) = 'object')
);
CREATE INDEX delivery_groups_home_zone ON delivery_groups (home_zone) WHERE home_zone IS NOT NULL;

CREATE TABLE delivery_group_catalogs (
	delivery_group text COLLATE "C" NOT NULL REFERENCES delivery_groups (name) ON DELETE CASCADE,
	catalog        text COLLATE "C" NOT NULL REFERENCES catalogs (name) ON DELETE RESTRICT,
	position       integer NOT NULL,
	PRIMARY KEY (delivery_group, catalog)
);
CREATE INDEX delivery_group_catalogs_catalog ON delivery_group_catalogs (catalog);

-- Applications and desktops share one namespace.
CREATE TABLE resources (
	name         text COLLATE "C" PRIMARY KEY,
	kind         text    NOT NULL CHECK (kind IN ('application', 'desktop')),
	display_name text    NOT NULL,
	folder       text    NOT NULL DEFAULT '',
	description  text    NOT NULL DEFAULT '',
	command_line text    NOT NULL DEFAULT '',
	icon         text    NOT NULL DEFAULT '',
	disabled     boolean NOT NULL DEFAULT false
);
CREATE INDEX resources_kind ON resources (kind, name);

CREATE TABLE resource_delivery_groups (
	resource       text COLLATE "C" NOT NULL REFERENCES resources (name) ON DELETE CASCADE,
	delivery_group text COLLATE "C" NOT NULL REFERENCES delivery_groups (name) ON DELETE RESTRICT,
	position       integer NOT NULL,
	PRIMARY KEY (resource, delivery_group)
);
CREATE INDEX resource_delivery_groups_delivery_group ON resource_delivery_groups (delivery_group);

CREATE TABLE entitlements (
	name           text COLLATE "C" PRIMARY KEY,
	delivery_group text COLLATE "C" NOT NULL REFERENCES delivery_groups (name) ON DELETE RESTRICT
);
CREATE INDEX entitlements_delivery_group ON entitlements (delivery_group);

CREATE TABLE entitlement_resources (
	entitlement text COLLATE "C" NOT NULL REFERENCES entitlements (name) ON DELETE CASCADE,
	resource    text COLLATE "C" NOT NULL REFERENCES resources (name) ON DELETE RESTRICT,
	position    integer NOT NULL,
	PRIMARY KEY (entitlement, resource)
);
CREATE INDEX entitlement_resources_resource ON entitlement_resources (resource);

CREATE TABLE entitlement_users (
	entitlement text COLLATE "C" NOT NULL REFERENCES entitlements (name) ON DELETE CASCADE,
	user_name   text COLLATE "C" NOT NULL REFERENCES users (name) ON DELETE RESTRICT,
	position    integer NOT NULL,
	PRIMARY KEY (entitlement, user_name)
);
CREATE INDEX entitlement_users_user ON entitlement_users (user_name);

CREATE TABLE entitlement_groups (
	entitlement text COLLATE "C" NOT NULL REFERENCES entitlements (name) ON DELETE CASCADE,
	group_name  text COLLATE "C" NOT NULL REFERENCES groups (name) ON DELETE RESTRICT,
	position    integer NOT NULL,
	PRIMARY KEY (entitlement, group_name)
);
CREATE INDEX entitlement_groups_group ON entitlement_groups (group_name);

-- Sessions name their user, resource, delivery group and machine as plain
-- text, without foreign keys: history outlives the configuration.
CREATE TABLE sessions (
	id             text COLLATE "C" PRIMARY KEY,
	user_name      text COLLATE "C" NOT NULL,
	resource       text COLLATE "C" NOT NULL,
	delivery_group text COLLATE "C" NOT NULL,
	machine        text COLLATE "C" NOT NULL,
	state          text NOT NULL CHECK (state IN ('pending', 'active', 'disconnected', 'logged-off')),
	client_name    text NOT NULL DEFAULT '',
	client_address text NOT NULL DEFAULT '',
	created_at     timestamptz, -- NULL when unset
	updated_at     timestamptz,
	ended_at       timestamptz
);
CREATE INDEX sessions_user ON sessions (user_name, id);
CREATE INDEX sessions_machine ON sessions (machine, id);
CREATE INDEX sessions_state ON sessions (state, id);
-- Brokering reads a user's and a machine's live sessions on every launch
-- and registration; these indexes keep history out of those reads.
CREATE INDEX sessions_user_live ON sessions (user_name, id) WHERE state <> 'logged-off';
CREATE INDEX sessions_machine_live ON sessions (machine, id) WHERE state <> 'logged-off';

-- A machine with live sessions cannot go: its sessions would be left on a
-- machine that does not exist. End them first. The store checks this
-- before it deletes (a session being created locks its machine's row, and
-- a delete locks it before it counts); the trigger keeps every other
-- writer to it too.
CREATE FUNCTION machines_refuse_live_sessions() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM sessions WHERE machine = OLD.name AND state <> 'logged-off') THEN
		RAISE EXCEPTION 'machine % has live sessions', OLD.name USING ERRCODE = 'restrict_violation';
	END IF;
	RETURN OLD;
END
$$;
CREATE TRIGGER machines_live_sessions BEFORE DELETE ON machines
	FOR EACH ROW EXECUTE FUNCTION machines_refuse_live_sessions();

CREATE TABLE admins (
	name          text COLLATE "C" PRIMARY KEY,
	name_key      text COLLATE "C" NOT NULL UNIQUE,
	password_hash text NOT NULL,
	created_at    timestamptz -- NULL when unset
);
