-- A delivery group's session timers (site.SessionTimers), in whole
-- seconds; 0: off.
ALTER TABLE delivery_groups
	ADD COLUMN idle_disconnect_seconds     bigint NOT NULL DEFAULT 0 CHECK (idle_disconnect_seconds >= 0),
	ADD COLUMN disconnected_logoff_seconds bigint NOT NULL DEFAULT 0 CHECK (disconnected_logoff_seconds >= 0),
	ADD COLUMN max_session_seconds         bigint NOT NULL DEFAULT 0 CHECK (max_session_seconds >= 0);
