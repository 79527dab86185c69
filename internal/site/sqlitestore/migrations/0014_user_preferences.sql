-- Users' own preferences in the portal (site.Preferences): user data, not
-- configuration, one row per user with any, written whole. user_key is
-- the user's folded name (site.FoldName), with no reference to users: a
-- user may come from a directory. Deleting a user of the site deletes
-- the user's row (the trigger).
CREATE TABLE user_preferences (
	user_key   TEXT PRIMARY KEY,
	favourites TEXT NOT NULL, -- JSON array of resource names
	recent     TEXT NOT NULL, -- JSON array of {"resource", "at"}
	updated_at TEXT NOT NULL
) STRICT;

CREATE TRIGGER users_delete_preferences AFTER DELETE ON users BEGIN
	DELETE FROM user_preferences WHERE user_key = OLD.name_key;
END;
