package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usher-vdi/usher/internal/site"
)

var targets = newSpec(spec[site.Target]{
	kind:  site.KindTarget,
	table: "targets",
	cols: []column{nameCol, col("mac", tText), col("image", tText), col("version", tInt), col("cache", tText),
		col("ram", tText), col("description", tText)},
	args: func(t site.Target) []any {
		var v *int64
		if t.Version != nil {
			n := int64(*t.Version)
			v = &n
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
	sel: "t.name, t.mac, t.image, t.version, t.cache, t.ram, t.description",
	dest: func(t *site.Target) []any {
		return []any{&t.Name, &t.MAC, &t.Image, &t.Version, &t.Cache, &t.RAM, &t.Description}
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
	if err := b.t.usable(true); err != nil {
		return err
	}
	if err := r.Validate(); err != nil {
		return err
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	batch := &pgx.Batch{}
	batch.Queue(`INSERT INTO boot_records (at, target, mac, image, version, cache, step, remote, error)
		VALUES ($1::timestamptz, $2::text, $3::text, $4::text, $5::bigint, $6::text, $7::text, $8::text, $9::text)`,
		r.Time.UTC(), r.Target, r.MAC, r.Image, int64(r.Version), string(r.Cache), string(r.Step), r.Remote, r.Error)
	batch.Queue(`DELETE FROM boot_records WHERE target = $1::text AND seq <= coalesce(
		(SELECT seq FROM boot_records WHERE target = $1::text ORDER BY seq DESC LIMIT 1 OFFSET $2::bigint), 0)`,
		r.Target, int64(site.BootLogKeep))
	batch.Queue(`DELETE FROM boot_records WHERE at < $1::timestamptz`, time.Now().Add(-site.BootLogMaxAge).UTC())
	b.t.wrote = true
	if err := b.t.send(ctx, batch, false); err != nil {
		return fmt.Errorf("record boot of %q: %w", r.Target, err)
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
	if err := b.t.usable(false); err != nil {
		return page, err
	}
	limit, err := sqlLimit(opts)
	if err != nil {
		return page, err
	}
	after := int64(1<<63 - 1) // every ID is below it
	if opts.After != "" {
		if after, err = strconv.ParseInt(opts.After, 10, 64); err != nil || after < 0 {
			return page, site.Errorf(site.EInvalid, "after %q is not the ID of a boot record", opts.After)
		}
	}
	var conds []string
	var args []any
	for _, c := range []struct{ col, val string }{{"target", f.Target}, {"mac", f.MAC}} {
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
	query := `SELECT seq, at, target, mac, image, version, cache, step, remote, error FROM boot_records WHERE ` +
		strings.Join(pageConds, " AND ") + fmt.Sprintf(" ORDER BY seq DESC LIMIT $%d::bigint", len(args)+2)
	batch := &pgx.Batch{}
	batch.Queue(query, append(args, after, limit)...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var r site.BootRecord
			var version int64
			var cache, step string
			if err := rows.Scan(&r.ID, &r.Time, &r.Target, &r.MAC, &r.Image, &version, &cache, &step, &r.Remote, &r.Error); err != nil {
				return err
			}
			r.Version, r.Cache, r.Step, r.Time = int(version), site.CacheMode(cache), site.BootStep(step), r.Time.UTC()
			page.Items = append(page.Items, r)
		}
		return rows.Err()
	})
	counted := countedPage(opts)
	if counted {
		batch.Queue(`SELECT count(*) FROM boot_records`+where, args...).QueryRow(func(r pgx.Row) error { return r.Scan(&page.Total) })
	}
	if err := b.t.send(ctx, batch, false); err != nil {
		return page, err
	}
	finishPage(&page, opts, counted, func(r site.BootRecord) string { return strconv.FormatInt(r.ID, 10) })
	return page, nil
}
