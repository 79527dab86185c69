-- The site's directory settings (site.Directory: LDAP or Active
-- Directory servers, bind DN, base DNs, ...) as one JSON object in the
-- settings row: they are read and written whole, with the settings'
-- version. The bind password is not in it: it is a site secret, the
-- 'directory-bind-password' row of secrets.
ALTER TABLE settings ADD COLUMN directory TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(directory) AND json_type(directory) = 'object');
