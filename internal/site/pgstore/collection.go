package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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

// column is a column a kind writes, with the SQL type of its parameter.
type column struct {
	name, typ string
	// key columns are written once, by Create: the name and its folded key.
	key bool
}

// link is a list field of a kind, stored as rows (owner, value, position)
// of a link table.
type link[T any] struct {
	table, owner, value string
	field               func(*T) *[]string
}

// spec describes how one kind is stored. Each operation of a collection is
// one SQL statement, which checks what the operation must check (that the
// object exists, that its references do, that nothing refers to it) and
// writes only when every check passes: an expected failure leaves the
// transaction usable, as PostgreSQL aborts a transaction on any failed
// statement.
type spec[T object] struct {
	kind   site.Kind
	table  string
	filter string // a condition on the rows (as t) of this kind, or ""
	// cols are the columns written, name first; args returns their values.
	cols []column
	args func(T) []any
	// sel are the columns read (of the table as t), in the order dest
	// returns their destinations.
	sel  string
	dest func(*T) []any
	name func(T) string
	// prepare, when set, fills defaults in and checks an object before
	// validation.
	prepare func(*T) error
	links   []*link[T]
	// referrers are the parts of a query for the first object that refers
	// to the object named (SELECT name FROM cur): each selects (o, k, n),
	// its order, the referrer's kind and name.
	referrers []string
	// refs says that objects of the kind refer to others (References).
	refs bool
	// config says whether objects are configuration: reading them in an
	// Update takes the configuration lock, and changing them moves the
	// configuration version. Reads of other kinds lock the rows they read.
	config bool
	// fold says that names match case-insensitively and in any Unicode
	// form, through the name_key column (site.FoldName of the name, with a
	// unique index): Get, Update and Delete find the object by any
	// spelling and keep the one it was created with.
	fold bool
	// machine says that objects are machines: a machine has a status and a
	// credential row, created with it, and cannot go while it has live
	// sessions.
	machine bool

	get, getLock, list, listLock, count, create, update, del string // statements, built by newSpec
}

func newSpec[T object](sp spec[T]) *spec[T] {
	var zero T
	_, sp.refs = any(zero).(referrer)
	and, where := "", ""
	if sp.filter != "" {
		and, where = " AND "+sp.filter, " WHERE "+sp.filter
	}
	keyCol := "name"
	if sp.fold {
		keyCol = "name_key"
	}
	read := sp.sel
	for _, l := range sp.links {
		read += fmt.Sprintf(", ARRAY(SELECT l.%s FROM %s l WHERE l.%s = t.name ORDER BY l.position)", l.value, l.table, l.owner)
	}
	sp.get = "SELECT " + read + " FROM " + sp.table + " t WHERE t." + keyCol + " = $1::text" + and
	sp.getLock = sp.get + " FOR UPDATE"
	sp.list = "SELECT " + read + " FROM " + sp.table + " t WHERE t.name > $1::text" + and + " ORDER BY t.name LIMIT $2::bigint"
	sp.listLock = sp.list + " FOR UPDATE"
	sp.count = "SELECT count(*) FROM " + sp.table + " t" + where
	sp.create = sp.createSQL()
	sp.update = sp.updateSQL(keyCol, and)
	sp.del = sp.deleteSQL(keyCol, and)
	return &sp
}

// params numbers a statement's parameters.
type params int

func (p *params) next(typ string) string {
	*p++
	return "$" + strconv.Itoa(int(*p)) + "::" + typ
}

// missingRef is a CTE that finds the position (from 1) of the first of
// the references given as two arrays, kinds and names, that names no
// object; NULL when every one exists.
func missingRef(kinds, names string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "missing AS (SELECT min(r.i) AS i FROM unnest(%s, %s) WITH ORDINALITY AS r(kind, name, i) WHERE NOT CASE r.kind", kinds, names)
	for _, k := range refKinds {
		fmt.Fprintf(&b, " WHEN '%s' THEN EXISTS (SELECT 1 FROM %s x WHERE x.name = r.name%s)", k.kind, k.table, k.and)
	}
	b.WriteString(" ELSE false END)")
	return b.String()
}

// refKinds are the kinds a reference may name, as missingRef spells them.
var refKinds = []struct {
	kind  string
	table string
	and   string
}{
	{string(site.KindZone), "zones", ""},
	{string(site.KindCatalog), "catalogs", ""},
	{string(site.KindGroup), "groups", ""},
	{string(site.KindUser), "users", ""},
	{string(site.KindMachine), "machines", ""},
	{string(site.KindDeliveryGroup), "delivery_groups", ""},
	{string(site.KindApplication), "resources", " AND x.kind = 'application'"},
	{string(site.KindDesktop), "resources", " AND x.kind = 'desktop'"},
	{anyResource, "resources", ""},
	{string(site.KindEntitlement), "entitlements", ""},
}

// anyResource is the kind of an entitlement's reference, which may name
// an application or a desktop.
const anyResource = "resource"

// createSQL inserts an object, its links and, for a machine, its status
// and credential rows, unless a reference is missing or the name is
// taken. It returns the missing reference's position, whether it
// inserted, and what holds the name: the stored spelling for folded
// names, the kind for resources.
func (sp *spec[T]) createSQL() string {
	var p params
	vals := make([]string, len(sp.cols))
	names := make([]string, len(sp.cols))
	keyVal := ""
	for i, c := range sp.cols {
		vals[i], names[i] = p.next(c.typ), c.name
		if c.name == "name_key" {
			keyVal = vals[i]
		}
	}
	arrays := make([]string, len(sp.links))
	for i := range sp.links {
		arrays[i] = p.next("text[]")
	}
	var b strings.Builder
	b.WriteString("WITH ")
	cond, missing := "", "NULL::bigint"
	if sp.refs {
		b.WriteString(missingRef(p.next("text[]"), p.next("text[]")) + ", ")
		cond, missing = " WHERE (SELECT i FROM missing) IS NULL", "(SELECT i FROM missing)"
	}
	fmt.Fprintf(&b, "ins AS (INSERT INTO %s (%s) SELECT %s%s ON CONFLICT DO NOTHING RETURNING name)",
		sp.table, strings.Join(names, ", "), strings.Join(vals, ", "), cond)
	for i, l := range sp.links {
		fmt.Fprintf(&b, ", l%d AS (INSERT INTO %s (%s, %s, position) SELECT ins.name, v.value, v.i - 1 FROM ins, unnest(%s) WITH ORDINALITY AS v(value, i))",
			i, l.table, l.owner, l.value, arrays[i])
	}
	if sp.machine {
		b.WriteString(", s AS (INSERT INTO machine_status (machine) SELECT name FROM ins)")
		b.WriteString(", c AS (INSERT INTO machine_credentials (machine) SELECT name FROM ins)")
	}
	holder := "NULL::text"
	switch {
	case sp.fold:
		holder = fmt.Sprintf("(SELECT name FROM %s WHERE name_key = %s)", sp.table, keyVal)
	case sp.table == "resources":
		holder = fmt.Sprintf("(SELECT kind FROM resources WHERE name = %s)", vals[0])
	}
	fmt.Fprintf(&b, " SELECT %s, EXISTS (SELECT 1 FROM ins), %s", missing, holder)
	return b.String()
}

// updateSQL replaces an object and its links, unless it does not exist or
// a reference is missing. It returns the stored name (NULL when there is
// no such object) and the missing reference's position.
func (sp *spec[T]) updateSQL(keyCol, and string) string {
	var p params
	key := p.next("text")
	var sets []string
	for _, c := range sp.cols {
		if !c.key {
			sets = append(sets, c.name+" = "+p.next(c.typ))
		}
	}
	arrays := make([]string, len(sp.links))
	for i := range sp.links {
		arrays[i] = p.next("text[]")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "WITH cur AS (SELECT t.name FROM %s t WHERE t.%s = %s%s)", sp.table, keyCol, key, and)
	cond, missing := "", "NULL::bigint"
	if sp.refs {
		b.WriteString(", " + missingRef(p.next("text[]"), p.next("text[]")))
		cond, missing = " AND (SELECT i FROM missing) IS NULL", "(SELECT i FROM missing)"
	}
	fmt.Fprintf(&b, ", upd AS (UPDATE %s t SET %s WHERE t.name = (SELECT name FROM cur)%s RETURNING t.name)",
		sp.table, strings.Join(sets, ", "), cond)
	// Links not in the new list go; the others are inserted or moved.
	for i, l := range sp.links {
		fmt.Fprintf(&b, ", d%d AS (DELETE FROM %s WHERE %s IN (SELECT name FROM upd) AND %s <> ALL (%s))",
			i, l.table, l.owner, l.value, arrays[i])
		fmt.Fprintf(&b, ", u%d AS (INSERT INTO %s (%s, %s, position) SELECT upd.name, v.value, v.i - 1 FROM upd, unnest(%s) WITH ORDINALITY AS v(value, i)"+
			" ON CONFLICT (%s, %s) DO UPDATE SET position = excluded.position)",
			i, l.table, l.owner, l.value, arrays[i], l.owner, l.value)
	}
	fmt.Fprintf(&b, " SELECT (SELECT name FROM cur), %s", missing)
	return b.String()
}

// deleteSQL deletes an object unless it does not exist, has live sessions
// (a machine) or is referred to. It returns the stored name (NULL when
// there is no such object), the live sessions, and the first referrer's
// kind and name.
func (sp *spec[T]) deleteSQL(keyCol, and string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "WITH cur AS (SELECT t.name FROM %s t WHERE t.%s = $1::text%s)", sp.table, keyCol, and)
	var conds []string
	live, refKind, refName := "0::bigint", "NULL::text", "NULL::text"
	if sp.machine {
		b.WriteString(", live AS (SELECT count(*) AS n FROM sessions WHERE machine = (SELECT name FROM cur) AND state <> 'logged-off')")
		conds = append(conds, "(SELECT n FROM live) = 0")
		live = "(SELECT n FROM live)"
	}
	if len(sp.referrers) > 0 {
		fmt.Fprintf(&b, ", ref AS (SELECT k, n FROM (%s) x ORDER BY o, n LIMIT 1)", strings.Join(sp.referrers, " UNION ALL "))
		conds = append(conds, "NOT EXISTS (SELECT 1 FROM ref)")
		refKind, refName = "(SELECT k FROM ref)", "(SELECT n FROM ref)"
	}
	cond := ""
	for _, c := range conds {
		cond += " AND " + c
	}
	fmt.Fprintf(&b, ", del AS (DELETE FROM %s t WHERE t.name = (SELECT name FROM cur)%s)", sp.table, cond)
	fmt.Fprintf(&b, " SELECT (SELECT name FROM cur), %s, %s, %s", live, refKind, refName)
	return b.String()
}

// referredBy is a referrer part: rows of table whose column names the object.
func referredBy(order int, kind site.Kind, table, column string) string {
	return fmt.Sprintf("SELECT %d AS o, '%s'::text AS k, name AS n FROM %s WHERE %s = (SELECT name FROM cur)", order, kind, table, column)
}

// linkedBy is a referrer part: owners in a link table whose value names
// the object.
func linkedBy(order int, kind site.Kind, table, owner, value string) string {
	return fmt.Sprintf("SELECT %d AS o, '%s'::text AS k, %s AS n FROM %s WHERE %s = (SELECT name FROM cur)", order, kind, owner, table, value)
}

// collection is a site.Collection of one kind in a transaction.
type collection[T object] struct {
	t  *tx
	sp *spec[T]
}

// key returns what the statements find an object named name by.
func (c collection[T]) key(name string) string {
	if c.sp.fold {
		return site.FoldName(name)
	}
	return name
}

// send sends b: for configuration, with the configuration lock in an
// Update.
func (c collection[T]) send(ctx context.Context, b *pgx.Batch) error {
	return c.t.send(ctx, b, c.sp.config && c.t.update)
}

// scanDest returns the destinations of a row read for obj.
func (c collection[T]) scanDest(obj *T) []any {
	dest := c.sp.dest(obj)
	for _, l := range c.sp.links {
		dest = append(dest, l.field(obj))
	}
	return dest
}

// tidy makes the empty lists of obj nil, as the domain keeps them.
func (c collection[T]) tidy(obj *T) {
	for _, l := range c.sp.links {
		if f := l.field(obj); len(*f) == 0 {
			*f = nil
		}
	}
}

func (c collection[T]) Get(ctx context.Context, name string) (T, error) {
	var obj T
	if err := c.t.usable(false); err != nil {
		return obj, err
	}
	query := c.sp.get
	if c.t.update && !c.sp.config {
		query = c.sp.getLock
	}
	found := false
	b := &pgx.Batch{}
	queueOne(b, &found, query, []any{c.key(name)}, c.scanDest(&obj)...)
	if err := c.send(ctx, b); err != nil {
		return obj, fmt.Errorf("get %s %q: %w", c.sp.kind, name, err)
	}
	if !found {
		return obj, site.NotFound(c.sp.kind, name)
	}
	c.tidy(&obj)
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
	if err := c.t.usable(false); err != nil {
		return page, err
	}
	limit, err := sqlLimit(opts)
	if err != nil {
		return page, err
	}
	query := c.sp.list
	if c.t.update && !c.sp.config {
		query = c.sp.listLock
	}
	b := &pgx.Batch{}
	b.Queue(query, opts.After, limit).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var obj T
			if err := rows.Scan(c.scanDest(&obj)...); err != nil {
				return err
			}
			c.tidy(&obj)
			page.Items = append(page.Items, obj)
		}
		return nil
	})
	counted := countedPage(opts)
	if counted {
		b.Queue(c.sp.count).QueryRow(func(r pgx.Row) error { return r.Scan(&page.Total) })
	}
	if err := c.send(ctx, b); err != nil {
		return page, err
	}
	finishPage(&page, opts, counted, c.sp.name)
	return page, nil
}

// sqlLimit returns the LIMIT of a list query: one more than asked, to see
// whether more remain, or nil for no limit.
func sqlLimit(opts site.ListOptions) (any, error) {
	switch {
	case opts.Limit < 0:
		return nil, site.Errorf(site.EInvalid, "list limit %d is negative", opts.Limit)
	case opts.Limit == 0:
		return nil, nil
	default:
		return opts.Limit + 1, nil
	}
}

// countedPage says whether a list counts its items with a query of its
// own: a whole list is its own count.
func countedPage(opts site.ListOptions) bool { return opts.After != "" || opts.Limit > 0 }

// finishPage trims the extra item a limited list fetched and sets Next
// and, when no query counted them, Total.
func finishPage[T any](page *site.Page[T], opts site.ListOptions, counted bool, name func(T) string) {
	if opts.Limit > 0 && len(page.Items) > opts.Limit {
		page.Items = page.Items[:opts.Limit]
		page.Next = name(page.Items[len(page.Items)-1])
	}
	if !counted {
		page.Total = len(page.Items)
	}
}

// check runs what Create and Update check before they write: writable,
// defaults and validation.
func (c collection[T]) check(obj *T) error {
	if err := c.t.usable(true); err != nil {
		return err
	}
	if c.sp.prepare != nil {
		if err := c.sp.prepare(obj); err != nil {
			return err
		}
	}
	return (*obj).Validate()
}

// refArgs returns the references of obj as the statements take them: two
// arrays, the kinds and the names. It refuses a kind it cannot check.
func (c collection[T]) refArgs(obj T) (kinds, names []string, refs []site.Ref, err error) {
	r, ok := any(obj).(referrer)
	if !ok {
		return nil, nil, nil, nil
	}
	refs = r.References()
	kinds, names = make([]string, len(refs)), make([]string, len(refs))
	for i, ref := range refs {
		kinds[i], names[i] = string(ref.Kind), ref.Name
		if ref.Kind == site.KindApplication && ref.Field == "resources" {
			kinds[i] = anyResource // entitlements name applications or desktops
		}
		if !knownRefKind(kinds[i]) {
			return nil, nil, nil, fmt.Errorf("check %s %q: unknown reference kind %q", c.sp.kind, c.sp.name(obj), ref.Kind)
		}
	}
	return kinds, names, refs, nil
}

func knownRefKind(kind string) bool {
	for _, k := range refKinds {
		if k.kind == kind {
			return true
		}
	}
	return false
}

// writeArgs returns the arguments of Create (key is nil) and Update (key
// finds the object): the columns (Update writes no key column), the link
// lists and the references.
func (c collection[T]) writeArgs(obj T, key any) ([]any, []site.Ref, error) {
	var args []any
	if key == nil {
		args = c.sp.args(obj)
	} else {
		args = append(args, key)
		for i, v := range c.sp.args(obj) {
			if !c.sp.cols[i].key {
				args = append(args, v)
			}
		}
	}
	for _, l := range c.sp.links {
		list := *l.field(&obj)
		if list == nil {
			list = []string{} // unnest and ALL take no NULL
		}
		args = append(args, list)
	}
	if !c.sp.refs {
		return args, nil, nil
	}
	kinds, names, refs, err := c.refArgs(obj)
	if err != nil {
		return nil, nil, err
	}
	return append(args, kinds, names), refs, nil
}

// missing returns the EInvalid error of the reference at position i (from
// 1).
func (c collection[T]) missing(name string, refs []site.Ref, i int64) error {
	if i < 1 || int(i) > len(refs) {
		return fmt.Errorf("check %s %q: reference %d of %d is missing", c.sp.kind, name, i, len(refs))
	}
	return site.MissingRef(c.sp.kind, name, refs[i-1])
}

func (c collection[T]) Create(ctx context.Context, obj T) error {
	if err := c.check(&obj); err != nil {
		return err
	}
	name := c.sp.name(obj)
	args, refs, err := c.writeArgs(obj, nil)
	if err != nil {
		return err
	}
	var missing *int64
	var inserted bool
	var holder *string
	// outcome turns the statement's answer into Create's error.
	outcome := func(err error) error {
		switch {
		case isCode(err, "23503"): // a reference deleted meanwhile
			return site.Errorf(site.EInvalid, "%s %q refers to an object that does not exist", c.sp.kind, name)
		case isCode(err, "23505"): // the name taken meanwhile
			return site.Conflict(c.sp.kind, name)
		case err != nil:
			return fmt.Errorf("create %s %q: %w", c.sp.kind, name, err)
		case missing != nil:
			return c.missing(name, refs, *missing)
		case !inserted:
			return c.conflict(name, holder)
		}
		return nil
	}
	b := &pgx.Batch{}
	q := b.Queue(c.sp.create, args...)
	c.t.wrote = true
	if c.t.bulk && c.t.settings != nil && c.t.conn != nil {
		// In bulk, under the configuration lock: the answer is read
		// with the next round trip, and its error returned then.
		q.QueryRow(func(r pgx.Row) error { return outcome(r.Scan(&missing, &inserted, &holder)) })
		c.t.pending = append(c.t.pending, q)
		c.changedName(name)
		if len(c.t.pending) >= bulkFlush {
			return c.t.send(ctx, nil, false)
		}
		return nil
	}
	q.QueryRow(func(r pgx.Row) error { return r.Scan(&missing, &inserted, &holder) })
	if err := outcome(c.send(ctx, b)); err != nil {
		return err
	}
	c.changedName(name)
	return nil
}

// conflict returns the EConflict error for a taken name, naming what holds
// it: the stored spelling of an account's name, the kind of the resource
// (a desktop may hold an application's name).
func (c collection[T]) conflict(name string, holder *string) error {
	switch {
	case holder == nil:
		return site.Conflict(c.sp.kind, name)
	case c.sp.fold:
		return site.ConflictWith(c.sp.kind, name, *holder)
	case c.sp.table == "resources":
		return site.Conflict(site.ResourceKind(*holder).ObjectKind(), name)
	}
	return site.Conflict(c.sp.kind, name)
}

func (c collection[T]) Update(ctx context.Context, obj T) error {
	if err := c.check(&obj); err != nil {
		return err
	}
	name := c.sp.name(obj)
	args, refs, err := c.writeArgs(obj, c.key(name))
	if err != nil {
		return err
	}
	var stored *string
	var missing *int64
	b := &pgx.Batch{}
	b.Queue(c.sp.update, args...).QueryRow(func(r pgx.Row) error { return r.Scan(&stored, &missing) })
	c.t.wrote = true
	if err := c.send(ctx, b); err != nil {
		if isCode(err, "23503") {
			return site.Errorf(site.EInvalid, "%s %q refers to an object that does not exist", c.sp.kind, name)
		}
		return fmt.Errorf("update %s %q: %w", c.sp.kind, name, err)
	}
	switch {
	case stored == nil:
		return site.NotFound(c.sp.kind, name)
	case missing != nil:
		return c.missing(*stored, refs, *missing)
	}
	c.changedName(*stored)
	return nil
}

func (c collection[T]) Delete(ctx context.Context, name string) error {
	if err := c.t.usable(true); err != nil {
		return err
	}
	var stored, refKind, refName *string
	var live int
	b := &pgx.Batch{}
	if c.sp.machine {
		// Wait for the transactions creating sessions on the machine (they
		// lock its row to share), so that the count sees their sessions.
		b.Queue(`SELECT 1 FROM machines WHERE name = $1::text FOR UPDATE`, name)
	}
	b.Queue(c.sp.del, c.key(name)).QueryRow(func(r pgx.Row) error { return r.Scan(&stored, &live, &refKind, &refName) })
	c.t.wrote = true
	if err := c.send(ctx, b); err != nil {
		if isCode(err, "23503") { // a reference made meanwhile
			return site.Errorf(site.EConflict, "%s %q is still in use", c.sp.kind, name)
		}
		if isCode(err, "23001") { // the trigger found live sessions
			return site.Errorf(site.EConflict, "%s %q has live sessions; end them first", c.sp.kind, name)
		}
		return fmt.Errorf("delete %s %q: %w", c.sp.kind, name, err)
	}
	switch {
	case stored == nil:
		return site.NotFound(c.sp.kind, name)
	case live > 0:
		return liveSessions(c.sp.kind, *stored, live)
	case refKind != nil && refName != nil:
		return site.Errorf(site.EConflict, "%s %q is still used by %s %q", c.sp.kind, *stored, *refKind, *refName)
	}
	if c.sp.machine { // its status and credential went with it
		c.t.unlock("machine_status", *stored)
		c.t.unlock("machine_credentials", *stored)
	}
	c.changedName(*stored)
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

// isCode reports whether err is a PostgreSQL error with the SQLSTATE code.
func isCode(err error, code string) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == code
}
