-- What a VDA registers and the logons the brokers count on it.
ALTER TABLE machines ADD COLUMN logons_in_progress INTEGER NOT NULL DEFAULT 0;
ALTER TABLE machines ADD COLUMN memory_used_mb     INTEGER NOT NULL DEFAULT 0;
ALTER TABLE machines ADD COLUMN memory_total_mb    INTEGER NOT NULL DEFAULT 0;
ALTER TABLE machines ADD COLUMN registered_address TEXT    NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN protocol           TEXT    NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN control_url        TEXT    NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN control_token      TEXT    NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN agent_version      TEXT    NOT NULL DEFAULT '';
