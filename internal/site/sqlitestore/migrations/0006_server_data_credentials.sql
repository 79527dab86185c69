-- The NFuse RequestServerData answers only valid credentials when on.
ALTER TABLE settings ADD COLUMN server_data_credentials INTEGER NOT NULL DEFAULT 0;
