package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

var targets = newSpec(spec[site.Target]{
	kind:  site.KindTarget,
	table: "targets",
	cols:  []string{"name", "mac", "image", "version", "cache", "ram", "description"},
	args: func(t site.Target) []any {
		var v any
		if t.Version != nil {
			v = *t.Version
		}
		return []any{t.Name, t.MAC, t.Image, v, string(t.Cache), t.RAM, t.Description}
	},
	// A target's MAC is stored as Normalize spells it, and a missing
	// cache mode takes the default, as in a whole configuration.
	prepare: func(t *site.Target) error {
		if m, err := site.NormalizeMAC(t.MAC); err == nil {
			t.MAC = m
		}
		if t.Cache == "" {
			t.Cache = site.DefaultCacheMode
		}
		return nil
	},
	sel: "name, mac, image, version, cache, ram, description",
	scan: func(r scanner) (t site.Target, err error) {
		var v sql.NullInt64
		err = r.Scan(&t.Name, &t.MAC, &t.Image, &v, &t.Cache, &t.RAM, &t.Description)
		if v.Valid {
			n := int(v.Int64)
			t.Version = &n
		}
		return t, err
	},
	name:   func(t site.Target) string { return t.Name },
	config: true,
})

func (t *tx) Targets() site.Collection[site.Target] {
	return collection[site.Target]{t, targets}
}

// boots is the site.BootLog of a transaction.
type boots struct{ t *tx }

func (t *tx) Boots() site.BootLog { return boots{t} }

func (b boots) Record(ctx context.Context, r site.BootRecord) error {
	if err := b.t.writable(); err != nil {
		return err
	}
	if err := r.Validate(); err != nil {
		return err
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	if _, err := b.t.exec(ctx, `INSERT INTO boot_records (at, target, mac, image, version, cache, step, remote, error)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)`,
		r.Time.UTC().Format(timeFormat), r.Target, r.MAC, r.Image, r.Version, string(r.Cache), string(r.Step), r.Remote, r.Error); err != nil {
		return fmt.Errorf("record boot of %q: %w", r.Target, err)
	}
	if _, err := b.t.exec(ctx, `DELETE FROM boot_records WHERE target = ?1 AND seq <= coalesce(
		(SELECT seq FROM boot_records WHERE target = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2), 0)`, r.Target, site.BootLogKeep); err != nil {
		return fmt.Errorf("prune boot log: %w", err)
	}
	cutoff := time.Now().Add(-site.BootLogMaxAge).UTC().Format(timeFormat)
	if _, err := b.t.exec(ctx, `DELETE FROM boot_records WHERE at < ?1`, cutoff); err != nil {
		return fmt.Errorf("prune boot log: %w", err)
	}
	return nil
}

func (b boots) List(ctx context.Context, f site.BootFilter, opts site.ListOptions) (site.Page[site.BootRecord], error) {
	page, err := b.list(ctx, f, opts)
	if err != nil {
		return site.Page[site.BootRecord]{}, fmt.Errorf("list boots: %w", err)
	}
	return page, nil
}

func (b boots) list(ctx context.Context, f site.BootFilter, opts site.ListOptions) (site.Page[site.BootRecord], error) {
	var page site.Page[site.BootRecord]
	limit, err := sqlLimit(opts)
	if err != nil {
		return page, err
	}
	after, err := bootAfter(opts.After)
	if err != nil {
		return page, err
	}
	var conds []string
	var args []any
	for _, c := range []struct{ col, val string }{{"target", f.Target}, {"mac", f.MAC}} {
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
	rows, err := b.t.query(ctx, `SELECT seq, at, target, mac, image, version, cache, step, remote, error FROM boot_records WHERE `+
		strings.Join(pageConds, " AND ")+fmt.Sprintf(" ORDER BY seq DESC LIMIT ?%d", len(args)+2), append(args, after, limit)...)
	if err != nil {
		return page, err
	}
	defer rows.Close()
	for rows.Next() {
		var r site.BootRecord
		var at string
		if err := rows.Scan(&r.ID, &at, &r.Target, &r.MAC, &r.Image, &r.Version, &r.Cache, &r.Step, &r.Remote, &r.Error); err != nil {
			return page, err
		}
		if r.Time, err = parseTime(at); err != nil {
			return page, err
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
	} else if err := b.t.scanOne(ctx, `SELECT count(*) FROM boot_records`+where, args, &page.Total); err != nil {
		return page, err
	}
	return page, nil
}

// bootAfter reads a page's After: the ID of the last record of the
// previous page, or "" for the first page.
func bootAfter(after string) (int64, error) {
	if after == "" {
		return 1<<63 - 1, nil
	}
	id, err := strconv.ParseInt(after, 10, 64)
	if err != nil || id < 0 {
		return 0, site.Errorf(site.EInvalid, "after %q is not the ID of a boot record", after)
	}
	return id, nil
}
