-- Users' own preferences in the portal (site.Preferences): user data, not
-- configuration, one row per user with any, written whole. user_key is
-- the user's folded name (site.FoldName), with no reference to users: a
-- user may come from a directory. Deleting a user of the site deletes
-- the user's row (the trigger).
CREATE TABLE user_preferences (
	user_key   text COLLATE "C" PRIMARY KEY,
	favourites jsonb NOT NULL CHECK (jsonb_typeof(favourites) = 'array'),
	recent     jsonb NOT NULL CHECK (jsonb_typeof(recent) = 'array'),
	updated_at timestamptz NOT NULL
);

CREATE FUNCTION users_delete_preferences() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
	DELETE FROM user_preferences WHERE user_key = OLD.name_key;
	RETURN NULL;
END
$$;
CREATE TRIGGER users_delete_preferences AFTER DELETE ON users
	FOR EACH ROW EXECUTE FUNCTION users_delete_preferences();
