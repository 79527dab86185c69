-- Brokering reads a user's and a machine's live sessions on every launch
-- and registration; these indexes keep history out of those reads.
CREATE INDEX sessions_user_live ON sessions (user_name, id) WHERE state <> 'logged-off';
CREATE INDEX sessions_machine_live ON sessions (machine, id) WHERE state <> 'logged-off';
