package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/usher-vdi/usher/internal/site"
)

// changeSessions applies a batch of session changes in one statement, as
// site.ChangeSessionsTx does with a transaction's calls. The statuses of
// the batch's machines are locked first (in name order: the InitPlan on
// st in s runs before s reads a row), then the sessions (in ID order), as
// every other transaction of the store takes them; the session updates
// and the machines' logon counts are data-modifying CTEs, which run to
// completion whether the final SELECT reads them or not. A logon changes
// no load index (broker.LoadOf does not count logons in it), so the
// counts are written relative to what the statuses hold.
const changeSessions = `
WITH e AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::boolean[], $6::text[], $7::timestamptz[])
		WITH ORDINALITY AS e(machine, id, next, client, check_cred, cred, at, n)
),
st AS MATERIALIZED (
	SELECT m.machine, m.registration, m.registered_credential FROM machine_status m
	WHERE m.machine IN (SELECT machine FROM e) ORDER BY m.machine FOR UPDATE
),
s AS MATERIALIZED (
	SELECT x.id, x.machine, x.state FROM sessions x
	WHERE x.id IN (SELECT id FROM e) AND (SELECT count(*) FROM st) >= 0 ORDER BY x.id FOR UPDATE
),
v AS MATERIALIZED (
	SELECT e.n, e.id, e.next, e.client, e.machine, e.at,
		CASE WHEN st.machine IS NULL THEN 'no-machine'
			WHEN s.id IS NULL THEN 'no-session'
			WHEN e.check_cred AND (st.registration <> 'registered' OR st.registered_credential <> e.cred) THEN 'not-registered'
			WHEN s.machine <> e.machine THEN 'other-machine'
			WHEN s.state = 'logged-off' OR s.state = e.next THEN 'unchanged'
			WHEN s.state = 'pending' THEN 'logged-on'
			ELSE 'changed' END AS verdict
	FROM e LEFT JOIN st ON st.machine = e.machine LEFT JOIN s ON s.id = e.id
),
u AS (
	UPDATE sessions x SET state = v.next, updated_at = v.at,
		client_name = CASE WHEN v.client <> '' THEN v.client ELSE x.client_name END
	FROM v WHERE x.id = v.id AND v.verdict IN ('logged-on', 'changed')
	RETURNING x.id
),
d AS (
	UPDATE machine_status m SET logons_in_progress = greatest(0, m.logons_in_progress - c.k)
	FROM (SELECT machine, count(*) AS k FROM v WHERE verdict = 'logged-on' GROUP BY machine) c
	WHERE m.machine = c.machine
	RETURNING m.machine
)
SELECT n, verdict FROM v ORDER BY n`

// ChangeSessions applies session changes in one round trip: BEGIN, the
// statement and COMMIT pipelined (see changeSessions). A batch whose
// connection turns out dead goes again on another only when its failure
// shows that nothing committed.
func (s *Store) ChangeSessions(ctx context.Context, changes []site.SessionChange) ([]site.SessionVerdict, error) {
	if err := site.SessionChanges(changes).Validate(); err != nil {
		return nil, err
	}
	n := len(changes)
	machines, ids, states, clients, creds := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	checks, ats := make([]bool, n), make([]pgtype.Timestamptz, n)
	for i, c := range changes {
		machines[i], ids[i], states[i], clients[i], checks[i], creds[i] = c.Machine, c.Session, string(c.State), c.ClientName, c.CheckCredential, c.Credential
		ats[i] = pgtype.Timestamptz{Time: c.At, Valid: !c.At.IsZero()}
	}
	verdicts, err := s.verdicts(ctx, n, changeSessions, machines, ids, states, clients, checks, creds, ats)
	if err != nil {
		return nil, fmt.Errorf("change %d sessions: %w", n, err)
	}
	out := make([]site.SessionVerdict, n)
	for i, v := range verdicts {
		out[i] = site.SessionVerdict(v)
	}
	return out, nil
}

// verdicts runs a batch statement that answers one row (ordinality,
// verdict) per item of its n, in one round trip with BEGIN and COMMIT,
// and returns the verdicts in item order.
func (s *Store) verdicts(ctx context.Context, n int, query string, args ...any) ([]string, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if n == 0 {
		return nil, nil
	}
	out := make([]string, n)
	b := &pgx.Batch{}
	b.Queue(query, args...).Query(func(rows pgx.Rows) error {
		got := 0
		for rows.Next() {
			var i int64
			var v string
			if err := rows.Scan(&i, &v); err != nil {
				return err
			}
			if i < 1 || i > int64(n) {
				return fmt.Errorf("verdict for item %d of %d", i, n)
			}
			out[i-1] = v
			got++
		}
		if got != n {
			return fmt.Errorf("%d verdicts for %d items", got, n)
		}
		return rows.Err()
	})
	b.QueuedQueries = append(b.QueuedQueries, commitQuery())
	t := &tx{s: s, update: true, commits: true}
	defer t.end()
	if err := t.send(ctx, b, false); err != nil {
		return nil, err
	}
	return out, nil
}
