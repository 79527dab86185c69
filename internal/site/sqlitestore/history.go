package sqlitestore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// history is a site.ChangeHistory on a transaction: Record holds the
// records until Update commits, which writes them under the version it
// commits as.
type history struct{ t *tx }

func (t *tx) History() site.ChangeHistory { return history{t} }

func (h history) Record(ctx context.Context, recs ...site.ChangeRecord) error {
	if err := h.t.writable(); err != nil {
		return err
	}
	recs, err := site.PrepareRecords(recs, time.Now())
	if err != nil {
		return err
	}
	for _, r := range recs {
		h.t.history = append(h.t.history, historyRow{At: r.Time.Format(timeFormat), Actor: r.Actor, Op: string(r.Op),
			Kind: string(r.Kind), Name: r.Name, Fields: r.Fields})
	}
	return nil
}

// historyRow is a record as writeHistory passes it to the database.
type historyRow struct {
	At     string   `json:"at"`
	Actor  string   `json:"actor"`
	Op     string   `json:"op"`
	Kind   string   `json:"kind"`
	Name   string   `json:"name"`
	Fields []string `json:"fields,omitempty"`
}

// writeHistory writes the records held, under the configuration version
// as the transaction leaves it, and forgets what the history no longer
// keeps (Options.ChangeHistoryKeep, site.ChangeHistoryMaxAge).
func (t *tx) writeHistory(ctx context.Context) error {
	rows, err := json.Marshal(t.history)
	if err != nil {
		return err
	}
	if _, err := t.exec(ctx, `INSERT INTO change_history (version, at, actor, op, kind, name, fields)
		SELECT s.config_version, r.value ->> 'at', r.value ->> 'actor', r.value ->> 'op', r.value ->> 'kind', r.value ->> 'name', r.value -> 'fields'
		FROM settings s, json_each(?1) r WHERE s.id = 1 ORDER BY r.key`, string(rows)); err != nil {
		return fmt.Errorf("record changes: %w", err)
	}
	if _, err := t.exec(ctx, `DELETE FROM change_history WHERE seq <= (SELECT max(seq) FROM change_history) - ?1`, t.historyKeep); err != nil {
		return fmt.Errorf("prune change history: %w", err)
	}
	cutoff := time.Now().Add(-site.ChangeHistoryMaxAge).UTC().Format(timeFormat)
	if _, err := t.exec(ctx, `DELETE FROM change_history WHERE at < ?1`, cutoff); err != nil {
		return fmt.Errorf("prune change history: %w", err)
	}
	return nil
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
	limit, err := sqlLimit(opts)
	if err != nil {
		return page, err
	}
	after, err := historyAfter(opts.After)
	if err != nil {
		return page, err
	}
	var conds []string
	var args []any
	for _, c := range []struct{ col, val string }{{"kind", string(f.Kind)}, {"name", f.Name}, {"actor", f.Actor}} {
		if c.val != "" {
			args = append(args, c.val)
			conds = append(conds, fmt.Sprintf("%s = ?%d", c.col, len(args)))
		}
	}
	where := ""
	if len(conds) > 0 {
		where = " WHERE " + strings.Join(conds, " AND ")
	}
	pageConds := append(conds, fmt.Sprintf("seq < ?%d", len(args)+1))
	rows, err := h.t.query(ctx, `SELECT seq, version, at, actor, op, kind, name, coalesce(fields, '') FROM change_history WHERE `+
		strings.Join(pageConds, " AND ")+fmt.Sprintf(" ORDER BY seq DESC LIMIT ?%d", len(args)+2), append(args, after, limit)...)
	if err != nil {
		return page, err
	}
	defer rows.Close()
	for rows.Next() {
		var r site.ChangeRecord
		var at, fields string
		if err := rows.Scan(&r.ID, &r.Version, &at, &r.Actor, &r.Op, &r.Kind, &r.Name, &fields); err != nil {
			return page, err
		}
		if r.Time, err = parseTime(at); err != nil {
			return page, err
		}
		if fields != "" {
			if err := json.Unmarshal([]byte(fields), &r.Fields); err != nil {
				return page, fmt.Errorf("change %d: fields: %w", r.ID, err)
			}
		}
		page.Items = append(page.Items, r)
	}
	if err := rows.Err(); err != nil {
		return page, dbErr(err)
	}
	more := opts.Limit > 0 && len(page.Items) > opts.Limit
	if more {
		page.Items = page.Items[:opts.Limit]
		page.Next = strconv.FormatInt(page.Items[len(page.Items)-1].ID, 10)
	}
	if opts.After == "" && !more {
		page.Total = len(page.Items)
	} else if err := h.t.scanOne(ctx, `SELECT count(*) FROM change_history`+where, args, &page.Total); err != nil {
		return page, err
	}
	return page, nil
}

// historyAfter reads a page's After: the ID of the last record of the
// previous page, or "" for the first page (every ID is below the
// greatest int64).
func historyAfter(after string) (int64, error) {
	if after == "" {
		return 1<<63 - 1, nil
	}
	id, err := strconv.ParseInt(after, 10, 64)
	if err != nil || id < 0 {
		return 0, site.Errorf(site.EInvalid, "after %q is not the ID of a change record", after)
	}
	return id, nil
}
