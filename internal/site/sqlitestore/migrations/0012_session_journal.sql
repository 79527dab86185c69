-- The sessions a broker's local copy of the site (the Local Host Cache)
-- wrote while the site DB was down, to write back when it returns
-- (site.LocalCopy). Empty in a site DB.
CREATE TABLE session_journal (
	session_id TEXT PRIMARY KEY
) WITHOUT ROWID;
