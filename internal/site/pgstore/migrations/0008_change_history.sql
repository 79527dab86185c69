-- The change history (site.ChangeHistory): who changed what, when, one row
-- per object changed, in the order recorded (seq). Bounded as rows are
-- written: at most site.ChangeHistoryKeep rows (a store option), none
-- older than site.ChangeHistoryMaxAge. fields is a JSON array of the field
-- paths an update changed, NULL when none are known.
CREATE TABLE change_history (
	seq     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	version bigint      NOT NULL,
	at      timestamptz NOT NULL,
	actor   text COLLATE "C" NOT NULL,
	op      text        NOT NULL,
	kind    text COLLATE "C" NOT NULL,
	name    text COLLATE "C" NOT NULL,
	fields  jsonb CHECK (jsonb_typeof(fields) = 'array')
);
CREATE INDEX change_history_object ON change_history (kind, name, seq);
CREATE INDEX change_history_at ON change_history (at);
