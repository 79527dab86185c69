-- A delivery group's session timers (site.SessionTimers), in whole
-- seconds; 0: off.
ALTER TABLE delivery_groups ADD COLUMN idle_disconnect_seconds     INTEGER NOT NULL DEFAULT 0 CHECK (idle_disconnect_seconds >= 0);
ALTER TABLE delivery_groups ADD COLUMN disconnected_logoff_seconds INTEGER NOT NULL DEFAULT 0 CHECK (disconnected_logoff_seconds >= 0);
ALTER TABLE delivery_groups ADD COLUMN max_session_seconds         INTEGER NOT NULL DEFAULT 0 CHECK (max_session_seconds >= 0);
