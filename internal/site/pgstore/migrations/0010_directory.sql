-- The site's directory settings (site.Directory: LDAP or Active
-- Directory servers, bind DN, base DNs, ...) as one JSON object in the
-- settings row: they are read and written whole, with the settings'
-- version and lock. The bind password is not in it: it is a site
-- secret, the 'directory-bind-password' row of secrets. The settings
-- query that every transaction runs does not read the column (a CA
-- bundle may run to kilobytes): Directory reads it on its own.
ALTER TABLE settings ADD COLUMN directory jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(directory) = 'object');
