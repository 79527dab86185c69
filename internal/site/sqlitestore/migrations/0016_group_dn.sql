-- A group may stand for a directory group by its DN (site.Group.DN);
-- empty: by name.
ALTER TABLE groups ADD COLUMN dn TEXT NOT NULL DEFAULT '';
