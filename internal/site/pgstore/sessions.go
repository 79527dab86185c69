package pgstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/usher-vdi/usher/internal/site"
)

// sessions is site.Sessions in a transaction. Sessions are runtime state:
// they do not move the configuration version, they name their user,
// resource and machine without foreign keys, and an Update locks the
// sessions it reads.
type sessions struct{ t *tx }

const sessionCols = `id, user_name, resource, delivery_group, machine, state, client_name, client_address,
	created_at, updated_at, ended_at`

func sessionDest(s *site.Session) []any {
	return []any{&s.ID, &s.User, &s.Resource, &s.DeliveryGroup, &s.Machine, &s.State,
		&s.ClientName, &s.ClientAddress, timeDest{&s.CreatedAt}, timeDest{&s.UpdatedAt}, timeDest{&s.EndedAt}}
}

func sessionArgs(s site.Session) []any {
	return []any{s.ID, s.User, s.Resource, s.DeliveryGroup, s.Machine, string(s.State),
		s.ClientName, s.ClientAddress, timeArg(s.CreatedAt), timeArg(s.UpdatedAt), timeArg(s.EndedAt)}
}

// The parameters of sessionArgs.
const sessionParams = `$1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text,
	$9::timestamptz, $10::timestamptz, $11::timestamptz`

func validateSession(s site.Session) error {
	if s.ID == "" {
		return site.Errorf(site.EInvalid, "session id is empty")
	}
	switch s.State {
	case site.SessionPending, site.SessionActive, site.SessionDisconnected, site.SessionLoggedOff:
	default:
		return site.Errorf(site.EInvalid, "session %q: state %q is not one of %s, %s, %s, %s", s.ID, s.State,
			site.SessionPending, site.SessionActive, site.SessionDisconnected, site.SessionLoggedOff)
	}
	return nil
}

func (ss sessions) Get(ctx context.Context, id string) (site.Session, error) {
	var s site.Session
	if err := ss.t.usable(false); err != nil {
		return s, err
	}
	found := false
	b := &pgx.Batch{}
	queueOne(b, &found, `SELECT `+sessionCols+` FROM sessions WHERE id = $1::text`+ss.t.forUpdate(), []any{id}, sessionDest(&s)...)
	if err := ss.t.send(ctx, b, false); err != nil {
		return site.Session{}, fmt.Errorf("get session %q: %w", id, err)
	}
	if !found {
		return site.Session{}, site.NotFound(site.KindSession, id)
	}
	if ss.t.update {
		ss.t.lock("sessions", id)
	}
	return s, nil
}

func (ss sessions) List(ctx context.Context, f site.SessionFilter, opts site.ListOptions) (site.Page[site.Session], error) {
	page, err := ss.list(ctx, f, opts)
	if err != nil {
		return site.Page[site.Session]{}, fmt.Errorf("list sessions: %w", err)
	}
	return page, nil
}

func (ss sessions) list(ctx context.Context, f site.SessionFilter, opts site.ListOptions) (site.Page[site.Session], error) {
	var page site.Page[site.Session]
	if err := ss.t.usable(false); err != nil {
		return page, err
	}
	limit, err := sqlLimit(opts)
	if err != nil {
		return page, err
	}
	// The filter is spelled out so that each form uses its index.
	var conds []string
	var args []any
	for _, c := range []struct{ col, val string }{{"user_name", f.User}, {"machine", f.Machine}, {"state", string(f.State)}} {
		if c.val != "" {
			args = append(args, c.val)
			conds = append(conds, fmt.Sprintf("%s = $%d::text", c.col, len(args)))
		}
	}
	if f.Group != "" {
		args = append(args, f.Group)
		conds = append(conds, fmt.Sprintf("user_name IN (SELECT user_name FROM user_groups WHERE group_name = $%d::text)", len(args)))
	}
	if f.Live {
		conds = append(conds, "state <> 'logged-off'")
	}
	where := ""
	if len(conds) > 0 {
		where = " WHERE " + strings.Join(conds, " AND ")
	}
	pageConds := append(conds, fmt.Sprintf("id > $%d::text", len(args)+1))
	query := `SELECT ` + sessionCols + ` FROM sessions WHERE ` + strings.Join(pageConds, " AND ") +
		fmt.Sprintf(" ORDER BY id LIMIT $%d::bigint", len(args)+2) + ss.t.forUpdate()
	b := &pgx.Batch{}
	b.Queue(query, append(args, opts.After, limit)...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var s site.Session
			if err := rows.Scan(sessionDest(&s)...); err != nil {
				return err
			}
			page.Items = append(page.Items, s)
		}
		return nil
	})
	counted := countedPage(opts)
	if counted {
		b.Queue(`SELECT count(*) FROM sessions`+where, args...).QueryRow(func(r pgx.Row) error { return r.Scan(&page.Total) })
	}
	if err := ss.t.send(ctx, b, false); err != nil {
		return page, err
	}
	finishPage(&page, opts, counted, func(s site.Session) string { return s.ID })
	return page, nil
}

// createSession inserts a session unless its user, resource or machine
// does not exist or its ID is taken, and returns which. It locks the
// machine's row to share until the transaction ends: the machine cannot
// be deleted before the session is committed and counted.
// createSession inserts a session whose resource and machine exist. Its
// user is a name only: a directory's users are not in the site DB.
const createSession = `WITH r AS (SELECT 1 FROM resources WHERE name = $3::text),
	m AS (SELECT 1 FROM machines WHERE name = $5::text FOR KEY SHARE),
	ins AS (INSERT INTO sessions (` + sessionCols + `) SELECT ` + sessionParams + `
		WHERE EXISTS (SELECT 1 FROM r) AND EXISTS (SELECT 1 FROM m)
		ON CONFLICT (id) DO NOTHING RETURNING id)
	SELECT EXISTS (SELECT 1 FROM r), EXISTS (SELECT 1 FROM m), EXISTS (SELECT 1 FROM ins)`

func (ss sessions) Create(ctx context.Context, s site.Session) error {
	t := ss.t
	if err := t.usable(true); err != nil {
		return err
	}
	if err := validateSession(s); err != nil {
		return err
	}
	var resource, machine, inserted bool
	b := &pgx.Batch{}
	b.Queue(createSession, sessionArgs(s)...).QueryRow(func(r pgx.Row) error { return r.Scan(&resource, &machine, &inserted) })
	t.wrote = true
	if err := t.send(ctx, b, false); err != nil {
		return fmt.Errorf("create session %q: %w", s.ID, err)
	}
	switch {
	case !resource:
		return site.Errorf(site.EInvalid, "session %q: resource %q does not exist", s.ID, s.Resource)
	case !machine:
		return site.MissingRef(site.KindSession, s.ID, site.Ref{Field: "machine", Kind: site.KindMachine, Name: s.Machine})
	case !inserted:
		return site.Conflict(site.KindSession, s.ID)
	}
	return nil
}

func (ss sessions) Update(ctx context.Context, s site.Session) error {
	if err := ss.t.usable(true); err != nil {
		return err
	}
	if err := validateSession(s); err != nil {
		return err
	}
	ok, err := ss.t.write(ctx, "sessions", s.ID, "update session",
		`UPDATE sessions SET (`+sessionCols+`) = (`+sessionParams+`) WHERE id = $1::text`, sessionArgs(s)...)
	if err != nil {
		return err
	}
	if !ok {
		return site.NotFound(site.KindSession, s.ID)
	}
	return nil
}

func (ss sessions) Delete(ctx context.Context, id string) error {
	if err := ss.t.usable(true); err != nil {
		return err
	}
	ok, err := ss.t.write(ctx, "sessions", id, "delete session", `DELETE FROM sessions WHERE id = $1::text`, id)
	if err != nil {
		return err
	}
	ss.t.unlock("sessions", id) // a second delete finds nothing
	if !ok {
		return site.NotFound(site.KindSession, id)
	}
	return nil
}
