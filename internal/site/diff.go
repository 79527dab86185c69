package site

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Op is what a Change does.
type Op string

const (
	OpCreate Op = "create"
	OpUpdate Op = "update"
	OpDelete Op = "delete"
)

// Change is one object created, updated or deleted by a Plan.
type Change struct {
	Op   Op
	Kind Kind
	Name string
	// Fields lists, for an update, the fields that change.
	Fields []FieldChange
	// obj is the desired object, for creates and updates.
	obj any
}

// FieldChange is one field of an updated object.
type FieldChange struct {
	Path     string // dotted, as in YAML: load_rules.max_sessions.limit
	Old, New string // JSON renderings; secrets are shown as "(changed)"
}

// Plan is the set of changes that makes a site match a desired Config.
type Plan struct {
	Settings *FieldChanges // nil when the settings do not change
	// Directory is nil when the directory settings do not change; a
	// changed bind password shows as "bind_password", never its value.
	Directory *FieldChanges
	Changes   []Change
	// directory is the desired directory, bind password kept, when
	// Directory is not nil.
	directory Directory
	// err refuses the plan: the desired directory moves the bind password
	// to another endpoint without giving it again (KeepBindPassword).
	err error
}

// Err returns why the site must not be changed by the plan, nil when it
// may be: the desired directory changes where the bind password goes
// without giving it again (see KeepBindPassword). ApplyConfig and Mutate
// return it; a plan from Diff only carries it.
func (p *Plan) Err() error { return p.err }

// FieldChanges is a list of changed fields.
type FieldChanges = []FieldChange

// Empty reports whether the plan changes nothing.
func (p *Plan) Empty() bool { return p.Settings == nil && p.Directory == nil && len(p.Changes) == 0 }

// unchanged returns a report of whether the plan leaves an object as it
// is: true for every object it neither creates nor updates.
func (p *Plan) unchanged() func(Kind, string) bool {
	touched := make(map[Kind]map[string]bool)
	for _, c := range p.Changes {
		if c.Op == OpDelete {
			continue
		}
		if touched[c.Kind] == nil {
			touched[c.Kind] = map[string]bool{}
		}
		touched[c.Kind][c.Name] = true
	}
	if p.Directory != nil {
		touched[KindDirectory] = map[string]bool{"": true}
	}
	return func(k Kind, name string) bool { return !touched[k][name] }
}

// Counts returns how many objects the plan creates, updates and deletes.
func (p *Plan) Counts() (create, update, del int) {
	for _, c := range p.Changes {
		switch c.Op {
		case OpCreate:
			create++
		case OpUpdate:
			update++
		case OpDelete:
			del++
		}
	}
	return
}

// String renders the plan as a diff, one object a line, with the fields of
// updates indented below: "+" creates, "~" updates, "-" deletes.
func (p *Plan) String() string {
	var b strings.Builder
	if p.Settings != nil {
		b.WriteString("~ settings\n")
		for _, f := range *p.Settings {
			fmt.Fprintf(&b, "    %s: %s -> %s\n", f.Path, f.Old, f.New)
		}
	}
	if p.Directory != nil {
		b.WriteString("~ directory\n")
		for _, f := range *p.Directory {
			fmt.Fprintf(&b, "    %s: %s -> %s\n", f.Path, f.Old, f.New)
		}
	}
	for _, c := range p.Changes {
		sign := map[Op]string{OpCreate: "+", OpUpdate: "~", OpDelete: "-"}[c.Op]
		fmt.Fprintf(&b, "%s %s %q\n", sign, c.Kind, c.Name)
		for _, f := range c.Fields {
			fmt.Fprintf(&b, "    %s: %s -> %s\n", f.Path, f.Old, f.New)
		}
	}
	return b.String()
}

// Diff returns the plan that turns current into desired. Both must be
// normalized. A desired user without a password hash keeps the current one:
// passwords are managed through the admin API, not the configuration file.
// Likewise a desired directory without a bind password keeps the current
// one, as long as it sends it where the current one does: otherwise the
// plan's Err refuses it (KeepBindPassword).
//
// Objects are matched by name in one pass over both configurations, which
// normalization sorts by name, and compared field by field: the cost is
// that of reading the two configurations once, and of rendering the
// fields of the objects that differ. A list not sorted by name, or naming
// an object twice, is diffed through maps, with the same result.
func Diff(current, desired *Config) *Plan { return diff(current, desired, false) }

// diff is Diff. With keep, a desired user without a password hash gets
// the current one written into desired.Users, so that desired is then
// the configuration the plan leaves the site with; desired.Users must be
// the caller's own list.
func diff(current, desired *Config, keep bool) *Plan {
	p := &Plan{}
	if current.Settings != desired.Settings {
		if fc := fieldChanges(current.Settings, desired.Settings); len(fc) > 0 {
			p.Settings = &fc
		}
	}
	p.Directory, p.directory, p.err = diffDirectory(&current.Directory, &desired.Directory, keep)
	keepHash := func(old, u *User) (User, bool) {
		if u.PasswordHash != "" || old.PasswordHash == "" {
			return User{}, false
		}
		kept := *u
		kept.PasswordHash = old.PasswordHash
		return kept, true
	}
	p.Changes = slices.Concat(
		diffKind(KindZone, current.Zones, desired.Zones, zoneName, equalZone, nil, false),
		diffKind(KindCatalog, current.Catalogs, desired.Catalogs, catalogName, equalCatalog, nil, false),
		diffKind(KindGroup, current.Groups, desired.Groups, groupName, equalGroup, nil, false),
		diffKind(KindUser, current.Users, desired.Users, userName, equalUser, keepHash, keep),
		diffKind(KindMachine, current.Machines, desired.Machines, machineName, equalMachine, nil, false),
		diffKind(KindDeliveryGroup, current.DeliveryGroups, desired.DeliveryGroups, deliveryGroupName, equalDeliveryGroup, nil, false),
		diffKind(KindApplication, current.Applications, desired.Applications, resourceName, equalResource, nil, false),
		diffKind(KindDesktop, current.Desktops, desired.Desktops, resourceName, equalResource, nil, false),
		diffKind(KindEntitlement, current.Entitlements, desired.Entitlements, entitlementName, equalEntitlement, nil, false),
		diffKind(KindTarget, current.Targets, desired.Targets, targetName, equalTarget, nil, false),
	)
	return p
}

// diffDirectory returns the fields that change from the current
// directory to the desired one, nil when none does, and the directory to
// write. A desired directory without a bind password keeps the current
// one where KeepBindPassword says so (with keep, written into desired);
// where it refuses, the directory to write has no password and the error
// is returned too.
func diffDirectory(current, desired *Directory, keep bool) (*FieldChanges, Directory, error) {
	want, err := KeepBindPassword(*current, *desired)
	if keep {
		desired.BindPassword = want.BindPassword
	}
	if current.Equal(want) {
		return nil, Directory{}, err
	}
	fc := fieldChanges(*current, want)
	if len(fc) == 0 {
		return nil, Directory{}, err
	}
	return &fc, want, err
}

func zoneName(z *Zone) string                   { return z.Name }
func catalogName(x *Catalog) string             { return x.Name }
func groupName(g *Group) string                 { return g.Name }
func userName(u *User) string                   { return u.Name }
func machineName(m *Machine) string             { return m.Name }
func deliveryGroupName(g *DeliveryGroup) string { return g.Name }
func resourceName(r *Resource) string           { return r.Name }
func entitlementName(e *Entitlement) string     { return e.Name }

// diffKind returns the changes of one kind: creates and updates in the
// order of desired, then deletes in the order of current. keep, when not
// nil, returns a desired object filled in from the current one of its
// name, to be compared instead, or false when there is nothing to fill
// in; with write, the filled-in object replaces the desired one.
func diffKind[T any](kind Kind, current, desired []T, name func(*T) string, equal func(a, b *T) bool, keep func(old, o *T) (T, bool), write bool) []Change {
	if !ascending(current, name) || !ascending(desired, name) {
		return diffKindMaps(kind, current, desired, name, equal, keep, write)
	}
	var out, deletes []Change
	i, j := 0, 0
	for i < len(current) || j < len(desired) {
		var c int
		switch {
		case j == len(desired):
			c = -1
		case i == len(current):
			c = 1
		default:
			if a, b := name(&current[i]), name(&desired[j]); a != b { // == is quick on shared strings
				c = strings.Compare(a, b)
			}
		}
		switch {
		case c < 0:
			deletes = append(deletes, Change{Op: OpDelete, Kind: kind, Name: name(&current[i])})
			i++
		case c > 0:
			out = append(out, Change{Op: OpCreate, Kind: kind, Name: name(&desired[j]), obj: desired[j]})
			j++
		default:
			if ch, ok := compare(kind, &current[i], &desired[j], name, equal, keep, write); ok {
				out = append(out, ch)
			}
			i++
			j++
		}
	}
	return append(out, deletes...)
}

// compare compares an object with the desired one of its name, returning
// the update when they differ.
func compare[T any](kind Kind, old, want *T, name func(*T) string, equal func(a, b *T) bool, keep func(old, o *T) (T, bool), write bool) (Change, bool) {
	o := want
	if keep != nil {
		if kept, ok := keep(old, want); ok {
			if write {
				*want = kept
			} else {
				o = &kept
			}
		}
	}
	if equal(old, o) {
		return Change{}, false
	}
	return Change{Op: OpUpdate, Kind: kind, Name: name(o), Fields: fieldChanges(*old, *o), obj: *o}, true
}

// ascending reports whether s is sorted by name, each name once.
func ascending[T any](s []T, name func(*T) string) bool {
	for i := 1; i < len(s); i++ {
		if name(&s[i-1]) >= name(&s[i]) {
			return false
		}
	}
	return true
}

// diffKindMaps is diffKind for lists that are not sorted by name, or name
// an object twice: an object matches the last current one of its name.
func diffKindMaps[T any](kind Kind, current, desired []T, name func(*T) string, equal func(a, b *T) bool, keep func(old, o *T) (T, bool), write bool) []Change {
	var out []Change
	have := make(map[string]*T, len(current))
	for i := range current {
		have[name(&current[i])] = &current[i]
	}
	want := make(map[string]bool, len(desired))
	for j := range desired {
		n := name(&desired[j])
		want[n] = true
		old, ok := have[n]
		if !ok {
			out = append(out, Change{Op: OpCreate, Kind: kind, Name: n, obj: desired[j]})
			continue
		}
		if ch, ok := compare(kind, old, &desired[j], name, equal, keep, write); ok {
			out = append(out, ch)
		}
	}
	for i := range current {
		if n := name(&current[i]); !want[n] {
			out = append(out, Change{Op: OpDelete, Kind: kind, Name: n})
		}
	}
	return out
}

// fieldChanges compares two objects field by field through their JSON form,
// plus the password hash, which JSON never shows.
func fieldChanges(old, new any) []FieldChange {
	a, b := flatten(old), flatten(new)
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []FieldChange
	for _, k := range keys {
		if a[k] != b[k] {
			out = append(out, FieldChange{Path: k, Old: orNone(a[k]), New: orNone(b[k])})
		}
	}
	ou, ok1 := old.(User)
	nu, ok2 := new.(User)
	if ok1 && ok2 && ou.PasswordHash != nu.PasswordHash {
		out = append(out, FieldChange{Path: "password_hash", Old: "(set)", New: "(changed)"})
	}
	od, ok1 := old.(Directory)
	nd, ok2 := new.(Directory)
	if ok1 && ok2 && od.BindPassword != nd.BindPassword {
		out = append(out, FieldChange{Path: "bind_password", Old: secretState(od.BindPassword, ""), New: secretState(nd.BindPassword, od.BindPassword)})
	}
	return out
}

// secretState shows a secret in a diff, never its value: "(none)",
// "(set)", or "(changed)" from an old value that was set.
func secretState(s, old string) string {
	switch {
	case s == "":
		return "(none)"
	case old != "":
		return "(changed)"
	}
	return "(set)"
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func flatten(v any) map[string]string {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("site: marshal %T: %v", v, err)) // domain types always marshal
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		panic(fmt.Sprintf("site: unmarshal %T: %v", v, err))
	}
	out := map[string]string{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if obj, ok := v.(map[string]any); ok {
			for k, sub := range obj {
				walk(strings.TrimPrefix(prefix+"."+k, "."), sub)
			}
			return
		}
		raw, _ := json.Marshal(v)
		out[prefix] = string(raw)
	}
	walk("", m)
	return out
}

// apply carries out the plan in tx: settings, then creates and updates in
// dependency order, then deletes in reverse order, so that no step leaves a
// dangling reference.
func (p *Plan) apply(ctx context.Context, tx Tx, settings *Settings, dir *Directory) error {
	if settings != nil {
		if err := tx.SetSettings(ctx, *settings); err != nil {
			return fmt.Errorf("set settings: %w", err)
		}
	}
	if dir != nil {
		if err := tx.SetDirectory(ctx, *dir); err != nil {
			return fmt.Errorf("set directory: %w", err)
		}
	}
	for _, c := range p.Changes {
		if c.Op == OpDelete {
			continue
		}
		if err := applyOne(ctx, tx, c); err != nil {
			return err
		}
	}
	for i := len(p.Changes) - 1; i >= 0; i-- {
		if c := p.Changes[i]; c.Op == OpDelete {
			if err := applyOne(ctx, tx, c); err != nil {
				return err
			}
		}
	}
	return nil
}

func applyOne(ctx context.Context, tx Tx, c Change) error {
	var err error
	switch c.Kind {
	case KindZone:
		err = do(ctx, tx.Zones(), c)
	case KindCatalog:
		err = do(ctx, tx.Catalogs(), c)
	case KindGroup:
		err = do(ctx, tx.Groups(), c)
	case KindUser:
		err = do(ctx, tx.Users(), c)
	case KindMachine:
		err = do(ctx, tx.Machines(), c)
	case KindDeliveryGroup:
		err = do(ctx, tx.DeliveryGroups(), c)
	case KindApplication:
		err = do(ctx, tx.Applications(), c)
	case KindDesktop:
		err = do(ctx, tx.Desktops(), c)
	case KindEntitlement:
		err = do(ctx, tx.Entitlements(), c)
	case KindTarget:
		err = do(ctx, tx.Targets(), c)
	default:
		err = fmt.Errorf("unknown kind %q", c.Kind)
	}
	if err != nil {
		return fmt.Errorf("%s %s %q: %w", c.Op, c.Kind, c.Name, err)
	}
	return nil
}

func do[T any](ctx context.Context, col Collection[T], c Change) error {
	switch c.Op {
	case OpCreate:
		return col.Create(ctx, c.obj.(T))
	case OpUpdate:
		return col.Update(ctx, c.obj.(T))
	default:
		return col.Delete(ctx, c.Name)
	}
}

// ApplyConfig makes the site in tx match desired: it validates desired,
// computes the plan against the current configuration and carries it out.
// With dryRun it stops after planning. The caller's transaction makes the
// whole apply atomic.
func ApplyConfig(ctx context.Context, tx Tx, desired *Config, dryRun bool) (*Plan, error) {
	desired.Normalize()
	if err := desired.Validate(); err != nil {
		return nil, err
	}
	current, err := LoadConfig(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("load current configuration: %w", err)
	}
	plan := Diff(current, desired)
	if plan.err != nil {
		return nil, plan.err
	}
	if dryRun {
		return plan, nil
	}
	if b, ok := TxAs[BulkWriter](tx); ok {
		b.WriteInBulk()
	}
	return plan, plan.carryOut(ctx, tx, desired)
}

// carryOut applies the plan that leads to desired in tx.
func (p *Plan) carryOut(ctx context.Context, tx Tx, desired *Config) error {
	if p.err != nil {
		return p.err
	}
	if p.Empty() {
		return nil
	}
	var settings *Settings
	if p.Settings != nil {
		settings = &desired.Settings
	}
	var dir *Directory
	if p.Directory != nil {
		dir = &p.directory
	}
	return p.apply(ctx, tx, settings, dir)
}

// Mutate loads the configuration in tx, lets fn change it, validates the
// result as a whole and applies the difference. It is how single-object
// changes (the admin API) get the same checks as a whole-file apply. fn
// follows the rules of MutateFrom: it must not write into the lists held
// by objects, only replace them.
func Mutate(ctx context.Context, tx Tx, fn func(*Config) error) (*Plan, error) {
	m, err := MutateFrom(ctx, tx, nil, 0, fn)
	if err != nil {
		return nil, err
	}
	return m.Plan, nil
}
