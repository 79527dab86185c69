package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usher-vdi/usher/internal/site"
)

// history is a site.ChangeHistory on a transaction: Record holds the
// records until Update commits, which writes them, in its round trip,
// under the version it commits as.
type history struct{ t *tx }

func (t *tx) History() site.ChangeHistory { return history{t} }

func (h history) Record(ctx context.Context, recs ...site.ChangeRecord) error {
	if err := h.t.usable(true); err != nil {
		return err
	}
	recs, err := site.PrepareRecords(recs, time.Now())
	if err != nil {
		return err
	}
	for _, r := range recs {
		h.t.history = append(h.t.history, historyRow{At: r.Time, Actor: r.Actor, Op: string(r.Op),
			Kind: string(r.Kind), Name: r.Name, Fields: r.Fields})
	}
	if len(recs) > 0 {
		h.t.wrote = true
	}
	return nil
}

// historyRow is a record as historyQueries pass it to the database.
type historyRow struct {
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Op     string    `json:"op"`
	Kind   string    `json:"kind"`
	Name   string    `json:"name"`
	Fields []string  `json:"fields,omitempty"`
}

// historyQueries write the records held, under the configuration version
// as the transaction leaves it (after versionQueries), and forget what the
// history no longer keeps (Options.ChangeHistoryKeep,
// site.ChangeHistoryMaxAge).
func (t *tx) historyQueries() ([]*pgx.QueuedQuery, error) {
	rows, err := json.Marshal(t.history)
	if err != nil {
		return nil, err
	}
	return []*pgx.QueuedQuery{
		{SQL: `INSERT INTO change_history (version, at, actor, op, kind, name, fields)
			SELECT s.config_version, (r ->> 'at')::timestamptz, r ->> 'actor', r ->> 'op', r ->> 'kind', r ->> 'name', r -> 'fields'
			FROM settings s, jsonb_array_elements($1::jsonb) WITH ORDINALITY AS e (r, i) WHERE s.id = 1 ORDER BY e.i`,
			Arguments: []any{string(rows)}},
		{SQL: `DELETE FROM change_history WHERE seq <= (SELECT max(seq) FROM change_history) - $1::bigint`,
			Arguments: []any{int64(t.s.historyKeep)}},
		{SQL: `DELETE FROM change_history WHERE at < $1::timestamptz`,
			Arguments: []any{time.Now().Add(-site.ChangeHistoryMaxAge).UTC()}},
	}, nil
}

func (h history) List(ctx context.Context, f site.ChangeFilter, opts site.ListOptions) (site.Page[site.ChangeRecord], error) {
	page, err := h.list(ctx, f, opts)
	if err != nil {
		return site.Page[site.ChangeRecord]{}, fmt.Errorf("list changes: %w", err)
	}
	return page, nil
}

func (h history) list(ctx context.Context, f site.ChangeFilter, opts site.ListOptions) (site.Page[site.ChangeRecord], error) {
	var page site.Page[site.ChangeRecord]
	if err := h.t.usable(false); err != nil {
		return page, err
	}
	limit, err := sqlLimit(opts)
	if err != nil {
		return page, err
	}
	after := int64(1<<63 - 1) // every ID is below it
	if opts.After != "" {
		if after, err = strconv.ParseInt(opts.After, 10, 64); err != nil || after < 0 {
			return page, site.Errorf(site.EInvalid, "after %q is not the ID of a change record", opts.After)
		}
	}
	var conds []string
	var args []any
	for _, c := range []struct{ col, val string }{{"kind", string(f.Kind)}, {"name", f.Name}, {"actor", f.Actor}} {
		if c.val != "" {
			args = append(args, c.val)
			conds = append(conds, fmt.Sprintf("%s = $%d::text", c.col, len(args)))
		}
	}
	where := ""
	if len(conds) > 0 {
		where = " WHERE " + strings.Join(conds, " AND ")
	}
	pageConds := append(conds, fmt.Sprintf("seq < $%d::bigint", len(args)+1))
	query := `SELECT seq, version, at, actor, op, kind, name, fields FROM change_history WHERE ` + strings.Join(pageConds, " AND ") +
		fmt.Sprintf(" ORDER BY seq DESC LIMIT $%d::bigint", len(args)+2)
	b := &pgx.Batch{}
	b.Queue(query, append(args, after, limit)...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var r site.ChangeRecord
			var op, kind string
			var fields []byte
			if err := rows.Scan(&r.ID, &r.Version, &r.Time, &r.Actor, &op, &kind, &r.Name, &fields); err != nil {
				return err
			}
			r.Op, r.Kind, r.Time = site.Op(op), site.Kind(kind), r.Time.UTC()
			if fields != nil {
				if err := json.Unmarshal(fields, &r.Fields); err != nil {
					return fmt.Errorf("change %d: fields: %w", r.ID, err)
				}
			}
			page.Items = append(page.Items, r)
		}
		return rows.Err()
	})
	counted := countedPage(opts)
	if counted {
		b.Queue(`SELECT count(*) FROM change_history`+where, args...).QueryRow(func(r pgx.Row) error { return r.Scan(&page.Total) })
	}
	if err := h.t.send(ctx, b, false); err != nil {
		return page, err
	}
	finishPage(&page, opts, counted, func(r site.ChangeRecord) string { return strconv.FormatInt(r.ID, 10) })
	return page, nil
}
