package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usher-vdi/usher/internal/site"
)

var _ site.SessionUpserter = (*tx)(nil)

// upsertSessions writes a batch of sessions in one statement: the rows
// whose references exist (or that the table holds already) are inserted,
// or update the row of their ID unless it has ended; the statement
// returns the IDs it left out. Machines are locked to share, as a
// session's creation does, so that none goes before the commit.
const upsertSessions = `WITH v AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
			$9::timestamptz[], $10::timestamptz[], $11::timestamptz[])
		AS v(id, user_name, resource, delivery_group, machine, state, client_name, client_address, created_at, updated_at, ended_at)),
	ok AS (SELECT v.* FROM v WHERE EXISTS (SELECT 1 FROM sessions s WHERE s.id = v.id) OR (
		EXISTS (SELECT 1 FROM users u WHERE u.name = v.user_name) AND
		EXISTS (SELECT 1 FROM resources r WHERE r.name = v.resource) AND
		EXISTS (SELECT 1 FROM machines m WHERE m.name = v.machine FOR KEY SHARE))),
	up AS (INSERT INTO sessions (` + sessionCols + `) SELECT ` + sessionCols + ` FROM ok ORDER BY id
		ON CONFLICT (id) DO UPDATE SET (user_name, resource, delivery_group, machine, state, client_name, client_address,
			created_at, updated_at, ended_at) = (EXCLUDED.user_name, EXCLUDED.resource, EXCLUDED.delivery_group, EXCLUDED.machine,
			EXCLUDED.state, EXCLUDED.client_name, EXCLUDED.client_address, EXCLUDED.created_at, EXCLUDED.updated_at, EXCLUDED.ended_at)
		WHERE sessions.state <> 'logged-off')
	SELECT id FROM v WHERE id NOT IN (SELECT id FROM ok)`

// UpsertSessions writes sessions by ID in one round trip
// (site.SessionUpserter).
func (t *tx) UpsertSessions(ctx context.Context, sessions []site.Session) ([]string, error) {
	if err := t.usable(true); err != nil {
		return nil, err
	}
	if len(sessions) == 0 {
		return nil, nil
	}
	cols := make([][]string, 8)
	times := make([][]*time.Time, 3)
	seen := make(map[string]bool, len(sessions))
	for _, s := range sessions {
		if err := validateSession(s); err != nil {
			return nil, err
		}
		if seen[s.ID] {
			return nil, site.Errorf(site.EInvalid, "session %q is in the batch twice", s.ID)
		}
		seen[s.ID] = true
		for i, v := range []string{s.ID, s.User, s.Resource, s.DeliveryGroup, s.Machine, string(s.State), s.ClientName, s.ClientAddress} {
			cols[i] = append(cols[i], v)
		}
		for i, v := range []time.Time{s.CreatedAt, s.UpdatedAt, s.EndedAt} {
			var p *time.Time
			if !v.IsZero() {
				p = &v
			}
			times[i] = append(times[i], p)
		}
	}
	args := make([]any, 0, 11)
	for _, c := range cols {
		args = append(args, c)
	}
	for _, c := range times {
		args = append(args, c)
	}
	var refused []string
	b := &pgx.Batch{}
	b.Queue(upsertSessions, args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			refused = append(refused, id)
		}
		return rows.Err()
	})
	t.wrote = true
	if err := t.send(ctx, b, false); err != nil {
		return nil, fmt.Errorf("upsert %d sessions: %w", len(sessions), err)
	}
	return refused, nil
}
