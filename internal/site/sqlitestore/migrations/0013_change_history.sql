-- The change history (site.ChangeHistory): who changed what, when, one row
-- per object changed, in the order recorded (seq). Bounded as rows are
-- written: at most site.ChangeHistoryKeep rows (a store option), none
-- older than site.ChangeHistoryMaxAge. fields is a JSON array of the field
-- paths an update changed, NULL when none are known.
CREATE TABLE change_history (
	seq     INTEGER PRIMARY KEY AUTOINCREMENT,
	version INTEGER NOT NULL,
	at      TEXT    NOT NULL,
	actor   TEXT    NOT NULL,
	op      TEXT    NOT NULL,
	kind    TEXT    NOT NULL,
	name    TEXT    NOT NULL,
	fields  TEXT
) STRICT;
CREATE INDEX change_history_object ON change_history (kind, name, seq);
CREATE INDEX change_history_at ON change_history (at);
