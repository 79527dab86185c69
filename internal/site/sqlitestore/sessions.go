package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/usher-vdi/usher/internal/site"
)

// sessions is site.Sessions in a transaction. Sessions are runtime state:
// they do not move the configuration version, and they name their user,
// resource and machine without foreign keys.
type sessions struct{ t *tx }

const sessionCols = `id, user_name, resource, delivery_group, machine, state, client_name, client_address,
	coalesce(created_at, ''), coalesce(updated_at, ''), coalesce(ended_at, '')`

func scanSession(r scanner) (site.Session, error) {
	var s site.Session
	var created, updated, ended string
	if err := r.Scan(&s.ID, &s.User, &s.Resource, &s.DeliveryGroup, &s.Machine, &s.State,
		&s.ClientName, &s.ClientAddress, &created, &updated, &ended); err != nil {
		return s, err
	}
	var err1, err2, err3 error
	s.CreatedAt, err1 = parseTime(created)
	s.UpdatedAt, err2 = parseTime(updated)
	s.EndedAt, err3 = parseTime(ended)
	return s, errors.Join(err1, err2, err3)
}

func sessionArgs(s site.Session) []any {
	return []any{s.ID, s.User, s.Resource, s.DeliveryGroup, s.Machine, string(s.State),
		s.ClientName, s.ClientAddress, timeArg(s.CreatedAt), timeArg(s.UpdatedAt), timeArg(s.EndedAt)}
}

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
	s, err := scanSession(ss.t.row(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = ?1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return site.Session{}, site.NotFound(site.KindSession, id)
	}
	if err != nil {
		return site.Session{}, fmt.Errorf("get session %q: %w", id, err)
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
			conds = append(conds, fmt.Sprintf("%s = ?%d", c.col, len(args)))
		}
	}
	if f.Group != "" {
		args = append(args, f.Group)
		conds = append(conds, fmt.Sprintf("user_name IN (SELECT user_name FROM user_groups WHERE group_name = ?%d)", len(args)))
	}
	if f.Live {
		conds = append(conds, "state <> 'logged-off'")
	}
	where := ""
	if len(conds) > 0 {
		where = " WHERE " + strings.Join(conds, " AND ")
	}
	pageConds := append(conds, fmt.Sprintf("id > ?%d", len(args)+1))
	query := `SELECT ` + sessionCols + ` FROM sessions WHERE ` + strings.Join(pageConds, " AND ") +
		fmt.Sprintf(" ORDER BY id LIMIT ?%d", len(args)+2)
	rows, err := ss.t.query(ctx, query, append(args, opts.After, limit)...)
	if err != nil {
		return page, err
	}
	defer rows.Close()
	for rows.Next() {
		s, err := scanSession(rows)
		if err != nil {
			return page, err
		}
		page.Items = append(page.Items, s)
	}
	if err := rows.Err(); err != nil {
		return page, dbErr(err)
	}
	more := opts.Limit > 0 && len(page.Items) > opts.Limit
	if more {
		page.Items = page.Items[:opts.Limit]
		page.Next = page.Items[len(page.Items)-1].ID
	}
	if opts.After == "" && !more {
		page.Total = len(page.Items)
	} else if err := ss.t.scanOne(ctx, `SELECT count(*) FROM sessions`+where, args, &page.Total); err != nil {
		return page, err
	}
	return page, nil
}

func (ss sessions) Create(ctx context.Context, s site.Session) error {
	t := ss.t
	if err := t.writable(); err != nil {
		return err
	}
	if err := validateSession(s); err != nil {
		return err
	}
	// The user is a name only: a directory's users are not in the site DB.
	for _, ref := range []site.Ref{
		{Field: "resource", Kind: site.KindApplication, Name: s.Resource},
		{Field: "machine", Kind: site.KindMachine, Name: s.Machine},
	} {
		q := refQueries[ref.Kind]
		if ref.Kind == site.KindApplication {
			q = anyResource
		}
		found, err := t.exists(ctx, q, ref.Name)
		if err != nil {
			return fmt.Errorf("create session %q: %w", s.ID, err)
		}
		if !found {
			if ref.Kind == site.KindApplication {
				return site.Errorf(site.EInvalid, "session %q: resource %q does not exist", s.ID, s.Resource)
			}
			return site.MissingRef(site.KindSession, s.ID, ref)
		}
	}
	_, err := t.exec(ctx, `INSERT INTO sessions (id, user_name, resource, delivery_group, machine, state,
		client_name, client_address, created_at, updated_at, ended_at)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)`, sessionArgs(s)...)
	if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		return site.Conflict(site.KindSession, s.ID)
	}
	if err != nil {
		return fmt.Errorf("create session %q: %w", s.ID, err)
	}
	return nil
}

func (ss sessions) Update(ctx context.Context, s site.Session) error {
	if err := ss.t.writable(); err != nil {
		return err
	}
	if err := validateSession(s); err != nil {
		return err
	}
	ok, err := ss.t.execOne(ctx, `UPDATE sessions SET user_name = ?2, resource = ?3, delivery_group = ?4, machine = ?5,
		state = ?6, client_name = ?7, client_address = ?8, created_at = ?9, updated_at = ?10, ended_at = ?11
		WHERE id = ?1`, sessionArgs(s)...)
	if err != nil {
		return fmt.Errorf("update session %q: %w", s.ID, err)
	}
	if !ok {
		return site.NotFound(site.KindSession, s.ID)
	}
	return nil
}

func (ss sessions) Delete(ctx context.Context, id string) error {
	if err := ss.t.writable(); err != nil {
		return err
	}
	ok, err := ss.t.execOne(ctx, `DELETE FROM sessions WHERE id = ?1`, id)
	if err != nil {
		return fmt.Errorf("delete session %q: %w", id, err)
	}
	if !ok {
		return site.NotFound(site.KindSession, id)
	}
	return nil
}
