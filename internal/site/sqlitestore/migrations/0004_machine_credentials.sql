-- Machine credentials, revocable one by one: a VDA's token carries the ID
-- of its machine's current credential, which enrolling again replaces and
-- an admin clears. secret_fingerprint ties a credential enrolled with the
-- site's enrolment secret to that secret; bound machines enrol only with a
-- single-use machine enrolment token, kept as its SHA-256.
ALTER TABLE machines ADD COLUMN credential_id             TEXT    NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN credential_issued_at      TEXT;
ALTER TABLE machines ADD COLUMN credential_secret         TEXT    NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN credential_bound          INTEGER NOT NULL DEFAULT 0;
ALTER TABLE machines ADD COLUMN enrolment_token_hash      TEXT    NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN enrolment_token_expires   TEXT;

-- The credential whose VDA holds the live registration, and a
-- registration another VDA tried while that one was live.
ALTER TABLE machines ADD COLUMN registered_credential     TEXT    NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN registration_conflict     TEXT    NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN registration_conflict_at  TEXT;

-- A machine with live sessions cannot go: its sessions would be left on a
-- machine that does not exist. End them first.
CREATE TRIGGER machines_delete_live_sessions BEFORE DELETE ON machines
WHEN EXISTS (SELECT 1 FROM sessions WHERE machine = OLD.name AND state <> 'logged-off')
BEGIN
	SELECT RAISE(ABORT, 'machine has live sessions');
END;
