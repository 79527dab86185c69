-- Account names (users', groups', admins') match as Windows matches them:
-- case-insensitively, in any Unicode normal form. name_key holds the
-- folded name (site.FoldName, registered as usher_fold_name); its unique
-- index refuses a second account whose name differs from one only in case
-- or form, and lookups by any spelling go through it.
ALTER TABLE users ADD COLUMN name_key TEXT NOT NULL DEFAULT '';
UPDATE users SET name_key = usher_fold_name(name);
CREATE UNIQUE INDEX users_name_key ON users (name_key);

ALTER TABLE groups ADD COLUMN name_key TEXT NOT NULL DEFAULT '';
UPDATE groups SET name_key = usher_fold_name(name);
CREATE UNIQUE INDEX groups_name_key ON groups (name_key);

ALTER TABLE admins ADD COLUMN name_key TEXT NOT NULL DEFAULT '';
UPDATE admins SET name_key = usher_fold_name(name);
CREATE UNIQUE INDEX admins_name_key ON admins (name_key);
