package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/usher-vdi/usher/internal/site"
)

// object is what every stored kind can do.
type object interface {
	Validate() error
}

// referrer is implemented by kinds that refer to others.
type referrer interface {
	References() []site.Ref
}

type scanner interface {
	Scan(dest ...any) error
}

// link is a list field of a kind, stored as rows (owner, value, position)
// of a link table.
type link[T any] struct {
	table, owner, value string
	field               func(*T) *[]string

	get, list, insert, del string // queries, built by newSpec
}

// spec describes how one kind is stored: its table, columns and links.
type spec[T object] struct {
	kind   site.Kind
	table  string
	filter string // a condition on the table's rows that select this kind, or ""
	// cols are the columns written, name first; args returns their values.
	cols []string
	args func(T) []any
	// sel are the columns read, in the order scan reads them.
	sel  string
	scan func(scanner) (T, error)
	name func(T) string
	// live, when set, counts the live sessions that forbid a delete.
	live string
	// prepare, when set, fills defaults in and checks an object before
	// validation.
	prepare func(*T) error
	links   []*link[T]
	// referrers finds the first object that refers to ?1, as (kind, name).
	referrers string
	// config says whether objects are configuration, whose changes move
	// the configuration version.
	config bool
	// fold says that names match case-insensitively and in any Unicode
	// form, through the table's name_key column (site.FoldName of the
	// name, with a unique index): Get, Update and Delete find the object
	// by any spelling and keep the one it was created with.
	fold bool

	stored                                        string // query, built by newSpec when fold
	get, exists, count, list, insert, update, del string // queries, built by newSpec
}

func newSpec[T object](sp spec[T]) *spec[T] {
	and := ""
	if sp.filter != "" {
		and = " AND " + sp.filter
	}
	where := ""
	if sp.filter != "" {
		where = " WHERE " + sp.filter
	}
	sp.get = "SELECT " + sp.sel + " FROM " + sp.table + " WHERE name = ?1" + and
	sp.exists = "SELECT 1 FROM " + sp.table + " WHERE name = ?1" + and
	sp.count = "SELECT count(*) FROM " + sp.table + where
	page := " FROM " + sp.table + " WHERE name > ?1" + and + " ORDER BY name LIMIT ?2"
	sp.list = "SELECT " + sp.sel + page
	params := make([]string, len(sp.cols))
	sets := make([]string, 0, len(sp.cols))
	for i, c := range sp.cols {
		params[i] = "?" + strconv.Itoa(i+1)
		if i > 0 {
			sets = append(sets, c+" = "+params[i])
		}
	}
	sp.insert = "INSERT INTO " + sp.table + " (" + strings.Join(sp.cols, ", ") + ") VALUES (" + strings.Join(params, ", ") + ")"
	sp.update = "UPDATE " + sp.table + " SET " + strings.Join(sets, ", ") + " WHERE name = ?1" + and
	sp.del = "DELETE FROM " + sp.table + " WHERE name = ?1" + and
	if sp.fold {
		sp.stored = "SELECT name FROM " + sp.table + " WHERE name_key = ?1" + and
	}
	for _, l := range sp.links {
		l.get = "SELECT " + l.value + " FROM " + l.table + " WHERE " + l.owner + " = ?1 ORDER BY position"
		l.list = "SELECT " + l.owner + ", " + l.value + " FROM " + l.table + " WHERE " + l.owner +
			" IN (SELECT name" + page + ") ORDER BY " + l.owner + ", position"
		l.insert = "INSERT INTO " + l.table + " (" + l.owner + ", " + l.value + ", position) VALUES (?1, ?2, ?3)"
		l.del = "DELETE FROM " + l.table + " WHERE " + l.owner + " = ?1"
	}
	return &sp
}

// collection is a site.Collection of one kind in a transaction.
type collection[T object] struct {
	t  *tx
	sp *spec[T]
}

// stored returns the name as the object named by name spells it, or name
// when no object has it or names do not fold.
func (c collection[T]) stored(ctx context.Context, name string) (string, error) {
	if !c.sp.fold {
		return name, nil
	}
	var s string
	err := c.t.scanOne(ctx, c.sp.stored, []any{site.FoldName(name)}, &s)
	if errors.Is(err, sql.ErrNoRows) {
		return name, nil
	}
	if err != nil {
		return "", fmt.Errorf("find %s %q: %w", c.sp.kind, name, err)
	}
	return s, nil
}

func (c collection[T]) Get(ctx context.Context, name string) (T, error) {
	var zero T
	name, err := c.stored(ctx, name)
	if err != nil {
		return zero, err
	}
	obj, err := c.sp.scan(c.t.row(ctx, c.sp.get, name))
	if errors.Is(err, sql.ErrNoRows) {
		return zero, site.NotFound(c.sp.kind, name)
	}
	if err != nil {
		return zero, fmt.Errorf("get %s %q: %w", c.sp.kind, name, err)
	}
	for _, l := range c.sp.links {
		list, err := c.t.strings(ctx, l.get, name)
		if err != nil {
			return zero, fmt.Errorf("get %s %q: %w", c.sp.kind, name, err)
		}
		*l.field(&obj) = list
	}
	return obj, nil
}

func (c collection[T]) List(ctx context.Context, opts site.ListOptions) (site.Page[T], error) {
	page, err := c.list(ctx, opts)
	if err != nil {
		return site.Page[T]{}, fmt.Errorf("list %ss: %w", c.sp.kind, err)
	}
	return page, nil
}

func (c collection[T]) list(ctx context.Context, opts site.ListOptions) (site.Page[T], error) {
	var page site.Page[T]
	limit, err := sqlLimit(opts)
	if err != nil {
		return page, err
	}
	rows, err := c.t.query(ctx, c.sp.list, opts.After, limit)
	if err != nil {
		return page, err
	}
	defer rows.Close()
	for rows.Next() {
		obj, err := c.sp.scan(rows)
		if err != nil {
			return page, err
		}
		page.Items = append(page.Items, obj)
	}
	if err := rows.Err(); err != nil {
		return page, dbErr(err)
	}
	rows.Close()

	more := opts.Limit > 0 && len(page.Items) > opts.Limit
	if more {
		page.Items = page.Items[:opts.Limit]
		page.Next = c.sp.name(page.Items[len(page.Items)-1])
	}
	if opts.After == "" && !more {
		page.Total = len(page.Items)
	} else if err := c.t.scanOne(ctx, c.sp.count, nil, &page.Total); err != nil {
		return page, err
	}
	if len(page.Items) == 0 || len(c.sp.links) == 0 {
		return page, nil
	}

	// One query per link table for the whole page.
	index := make(map[string]int, len(page.Items))
	for i, obj := range page.Items {
		index[c.sp.name(obj)] = i
	}
	for _, l := range c.sp.links {
		rows, err := c.t.query(ctx, l.list, opts.After, limit)
		if err != nil {
			return page, err
		}
		for rows.Next() {
			var owner, value string
			if err := rows.Scan(&owner, &value); err != nil {
				rows.Close()
				return page, err
			}
			if i, ok := index[owner]; ok { // the extra row fetched to see if more remain is not
				f := l.field(&page.Items[i])
				*f = append(*f, value)
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return page, dbErr(err)
		}
	}
	return page, nil
}

// sqlLimit returns the LIMIT of a list query: one more than asked, to see
// whether more remain, or -1 for no limit.
func sqlLimit(opts site.ListOptions) (int, error) {
	switch {
	case opts.Limit < 0:
		return 0, site.Errorf(site.EInvalid, "list limit %d is negative", opts.Limit)
	case opts.Limit == 0:
		return -1, nil
	default:
		return opts.Limit + 1, nil
	}
}

func (c collection[T]) Create(ctx context.Context, obj T) error {
	if err := c.check(ctx, &obj); err != nil {
		return err
	}
	name := c.sp.name(obj)
	if _, err := c.t.exec(ctx, c.sp.insert, c.sp.args(obj)...); err != nil {
		if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) || isConstraint(err, sqlite3.SQLITE_CONSTRAINT_UNIQUE) {
			return c.conflict(ctx, name)
		}
		if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY) {
			return site.Errorf(site.EInvalid, "%s %q refers to an object that does not exist", c.sp.kind, name)
		}
		return fmt.Errorf("create %s %q: %w", c.sp.kind, name, err)
	}
	if err := c.writeLinks(ctx, name, &obj); err != nil {
		return c.t.fail(fmt.Errorf("create %s %q: %w", c.sp.kind, name, err))
	}
	c.changedName(name)
	return nil
}

func (c collection[T]) Update(ctx context.Context, obj T) error {
	if err := c.t.writable(); err != nil {
		return err
	}
	if c.sp.prepare != nil {
		if err := c.sp.prepare(&obj); err != nil {
			return err
		}
	}
	if err := obj.Validate(); err != nil {
		return err
	}
	name, err := c.stored(ctx, c.sp.name(obj))
	if err != nil {
		return err
	}
	ok, err := c.t.exists(ctx, c.sp.exists, name)
	if err != nil {
		return fmt.Errorf("update %s %q: %w", c.sp.kind, name, err)
	}
	if !ok {
		return site.NotFound(c.sp.kind, name)
	}
	if err := c.t.checkRefs(ctx, c.sp.kind, name, obj); err != nil {
		return err
	}
	args := c.sp.args(obj)
	args[0] = name // the spelling stored, which references use
	if _, err := c.t.exec(ctx, c.sp.update, args...); err != nil {
		if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY) {
			return site.Errorf(site.EInvalid, "%s %q refers to an object that does not exist", c.sp.kind, name)
		}
		return fmt.Errorf("update %s %q: %w", c.sp.kind, name, err)
	}
	for _, l := range c.sp.links {
		if _, err := c.t.exec(ctx, l.del, name); err != nil {
			return c.t.fail(fmt.Errorf("update %s %q: %w", c.sp.kind, name, err))
		}
	}
	if err := c.writeLinks(ctx, name, &obj); err != nil {
		return c.t.fail(fmt.Errorf("update %s %q: %w", c.sp.kind, name, err))
	}
	c.changedName(name)
	return nil
}

func (c collection[T]) Delete(ctx context.Context, name string) error {
	if err := c.t.writable(); err != nil {
		return err
	}
	name, err := c.stored(ctx, name)
	if err != nil {
		return err
	}
	ok, err := c.t.exists(ctx, c.sp.exists, name)
	if err != nil {
		return fmt.Errorf("delete %s %q: %w", c.sp.kind, name, err)
	}
	if !ok {
		return site.NotFound(c.sp.kind, name)
	}
	if c.sp.live != "" {
		var n int
		if err := c.t.scanOne(ctx, c.sp.live, []any{name}, &n); err != nil {
			return fmt.Errorf("delete %s %q: %w", c.sp.kind, name, err)
		}
		if n > 0 {
			return liveSessions(c.sp.kind, name, n)
		}
	}
	if c.sp.referrers != "" {
		var kind, by string
		err := c.t.scanOne(ctx, c.sp.referrers, []any{name}, &kind, &by)
		if err == nil {
			return site.Errorf(site.EConflict, "%s %q is still used by %s %q", c.sp.kind, name, kind, by)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("delete %s %q: %w", c.sp.kind, name, err)
		}
	}
	if _, err := c.t.exec(ctx, c.sp.del, name); err != nil {
		if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY) {
			return site.Errorf(site.EConflict, "%s %q is still in use", c.sp.kind, name)
		}
		if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_TRIGGER) {
			return site.Errorf(site.EConflict, "%s %q has live sessions; end them first", c.sp.kind, name)
		}
		return fmt.Errorf("delete %s %q: %w", c.sp.kind, name, err)
	}
	c.changedName(name)
	return nil
}

// liveSessions is the error of a delete refused for live sessions.
func liveSessions(kind site.Kind, name string, n int) error {
	noun := "sessions"
	if n == 1 {
		noun = "session"
	}
	return site.Errorf(site.EConflict, "%s %q has %d live %s; end them first", kind, name, n, noun)
}

// check runs the checks of Create: writable, defaults, validation and
// references.
func (c collection[T]) check(ctx context.Context, obj *T) error {
	if err := c.t.writable(); err != nil {
		return err
	}
	if c.sp.prepare != nil {
		if err := c.sp.prepare(obj); err != nil {
			return err
		}
	}
	if err := (*obj).Validate(); err != nil {
		return err
	}
	return c.t.checkRefs(ctx, c.sp.kind, c.sp.name(*obj), *obj)
}

func (c collection[T]) writeLinks(ctx context.Context, name string, obj *T) error {
	for _, l := range c.sp.links {
		for i, v := range *l.field(obj) {
			if _, err := c.t.exec(ctx, l.insert, name, v, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// conflict returns the EConflict error for a taken name, naming the kind
// of the object that holds it: a desktop may hold an application's name.
func (c collection[T]) conflict(ctx context.Context, name string) error {
	kind := c.sp.kind
	if c.sp.fold {
		if other, err := c.stored(ctx, name); err == nil {
			return site.ConflictWith(kind, name, other)
		}
	}
	if c.sp.table == "resources" {
		var k string
		if err := c.t.scanOne(ctx, `SELECT kind FROM resources WHERE name = ?1`, []any{name}, &k); err == nil {
			kind = site.ResourceKind(k).ObjectKind()
		}
	}
	return site.Conflict(kind, name)
}

// refQueries find an object of a kind that a reference may name.
var refQueries = map[site.Kind]string{
	site.KindZone:          `SELECT 1 FROM zones WHERE name = ?1`,
	site.KindCatalog:       `SELECT 1 FROM catalogs WHERE name = ?1`,
	site.KindGroup:         `SELECT 1 FROM groups WHERE name = ?1`,
	site.KindUser:          `SELECT 1 FROM users WHERE name = ?1`,
	site.KindMachine:       `SELECT 1 FROM machines WHERE name = ?1`,
	site.KindDeliveryGroup: `SELECT 1 FROM delivery_groups WHERE name = ?1`,
	site.KindApplication:   `SELECT 1 FROM resources WHERE name = ?1 AND kind = 'application'`,
	site.KindDesktop:       `SELECT 1 FROM resources WHERE name = ?1 AND kind = 'desktop'`,
	site.KindEntitlement:   `SELECT 1 FROM entitlements WHERE name = ?1`,
}

// anyResource finds an application or a desktop.
const anyResource = `SELECT 1 FROM resources WHERE name = ?1`

// checkRefs returns site.MissingRef for the first reference of obj to an
// object that does not exist.
func (t *tx) checkRefs(ctx context.Context, kind site.Kind, name string, obj any) error {
	r, ok := obj.(referrer)
	if !ok {
		return nil
	}
	for _, ref := range r.References() {
		if err := t.checkRef(ctx, kind, name, ref); err != nil {
			return err
		}
	}
	return nil
}

func (t *tx) checkRef(ctx context.Context, kind site.Kind, name string, ref site.Ref) error {
	q, ok := refQueries[ref.Kind]
	if ref.Kind == site.KindApplication && ref.Field == "resources" {
		q = anyResource // entitlements name applications or desktops
	}
	if !ok {
		return fmt.Errorf("check %s %q: unknown reference kind %q", kind, name, ref.Kind)
	}
	found, err := t.exists(ctx, q, ref.Name)
	if err != nil {
		return fmt.Errorf("check %s %q: %w", kind, name, err)
	}
	if !found {
		return site.MissingRef(kind, name, ref)
	}
	return nil
}

// row runs a query for one row.
func (t *tx) row(ctx context.Context, query string, args ...any) scanner {
	st, err := t.prepare(ctx, query)
	if err != nil {
		return errScanner{err}
	}
	return rowScanner{st.QueryRowContext(ctx, args...)}
}

type rowScanner struct{ r *sql.Row }

func (s rowScanner) Scan(dest ...any) error { return dbErr(s.r.Scan(dest...)) }

type errScanner struct{ err error }

func (s errScanner) Scan(...any) error { return s.err }

// strings runs a query for one column of strings.
func (t *tx) strings(ctx context.Context, query string, args ...any) ([]string, error) {
	rows, err := t.query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, dbErr(rows.Err())
}
