package site

import (
	"cmp"
	"context"
	"fmt"
	"slices"
)

// Config is a whole site configuration: what `usher apply` reads from YAML,
// what `usher export` writes, and what brokers snapshot by version. It holds
// no runtime state (machine status, sessions) and no admin accounts.
type Config struct {
	Settings       Settings        `json:"settings" yaml:"settings"`
	Directory      Directory       `json:"directory" yaml:"directory"`
	Zones          []Zone          `json:"zones" yaml:"zones"`
	Catalogs       []Catalog       `json:"catalogs" yaml:"catalogs"`
	Groups         []Group         `json:"groups" yaml:"groups"`
	Users          []User          `json:"users" yaml:"users"`
	Machines       []Machine       `json:"machines" yaml:"machines"`
	DeliveryGroups []DeliveryGroup `json:"delivery_groups" yaml:"delivery_groups"`
	Applications   []Resource      `json:"applications" yaml:"applications"`
	Desktops       []Resource      `json:"desktops" yaml:"desktops"`
	Entitlements   []Entitlement   `json:"entitlements" yaml:"entitlements"`
	// Targets are the machines that boot over the network from the
	// image store.
	Targets []Target `json:"targets" yaml:"targets"`
}

// LoadConfig reads the whole configuration in tx.
func LoadConfig(ctx context.Context, tx Tx) (*Config, error) {
	var c Config
	var err error
	if c.Settings, err = tx.Settings(ctx); err != nil {
		return nil, err
	}
	if c.Directory, err = tx.Directory(ctx); err != nil {
		return nil, err
	}
	if c.Zones, err = all(ctx, tx.Zones()); err != nil {
		return nil, err
	}
	if c.Catalogs, err = all(ctx, tx.Catalogs()); err != nil {
		return nil, err
	}
	if c.Groups, err = all(ctx, tx.Groups()); err != nil {
		return nil, err
	}
	if c.Users, err = all(ctx, tx.Users()); err != nil {
		return nil, err
	}
	if c.Machines, err = all(ctx, tx.Machines()); err != nil {
		return nil, err
	}
	if c.DeliveryGroups, err = all(ctx, tx.DeliveryGroups()); err != nil {
		return nil, err
	}
	if c.Applications, err = all(ctx, tx.Applications()); err != nil {
		return nil, err
	}
	if c.Desktops, err = all(ctx, tx.Desktops()); err != nil {
		return nil, err
	}
	if c.Entitlements, err = all(ctx, tx.Entitlements()); err != nil {
		return nil, err
	}
	if c.Targets, err = all(ctx, tx.Targets()); err != nil {
		return nil, err
	}
	c.Normalize()
	return &c, nil
}

func all[T any](ctx context.Context, c Collection[T]) ([]T, error) {
	p, err := c.List(ctx, ListOptions{})
	if err != nil {
		return nil, err
	}
	return p.Items, nil
}

// Normalize puts c in canonical form: user and group names in Unicode
// normal form C, references to users and groups spelled as the objects
// they name are (account names match case-insensitively), objects sorted
// by name, string lists sorted, empty lists nil, resource kinds and
// display names filled in. Two equivalent configurations normalize to
// deeply equal values.
//
// Normalize writes only into c's own lists of objects (c.Users, ...):
// it never writes into the lists inside objects (a user's Groups, ...),
// but replaces a list that needs sorting or respelling with a sorted,
// respelled copy, and keeps one already in canonical form as it is. So
// a copy of a configuration that shares those inner lists with the
// original (see MutateFrom) normalizes without touching the original.
func (c *Config) Normalize() { c.normalizeFrom(nil) }

// normalizeFrom is Normalize of a configuration made from base, which is
// normalized (MutateFrom): when its accounts and the references to them
// are base's, as they are after most changes, they are not spelled again,
// which on a site of many users is most of Normalize's cost.
func (c *Config) normalizeFrom(base *Config) {
	if base == nil || !sameAccounts(c, base) {
		c.normalizeAccounts()
	}
	c.Directory.normalize()
	sortByName(c.Zones, func(z Zone) string { return z.Name })
	sortByName(c.Catalogs, func(x Catalog) string { return x.Name })
	sortByName(c.Groups, func(g Group) string { return g.Name })
	for i := range c.Users {
		c.Users[i].Groups = normList(c.Users[i].Groups)
	}
	sortByName(c.Users, func(u User) string { return u.Name })
	sortByName(c.Machines, func(m Machine) string { return m.Name })
	for i := range c.DeliveryGroups {
		c.DeliveryGroups[i].Catalogs = normList(c.DeliveryGroups[i].Catalogs)
	}
	sortByName(c.DeliveryGroups, func(g DeliveryGroup) string { return g.Name })
	for _, rs := range []struct {
		list []Resource
		kind ResourceKind
	}{{c.Applications, Application}, {c.Desktops, Desktop}} {
		for i := range rs.list {
			r := &rs.list[i]
			r.Kind = rs.kind
			r.DeliveryGroups = normList(r.DeliveryGroups)
			if r.DisplayName == "" {
				r.DisplayName = r.Name
			}
		}
		sortByName(rs.list, func(r Resource) string { return r.Name })
	}
	for i := range c.Entitlements {
		e := &c.Entitlements[i]
		e.Resources, e.Users, e.Groups = normList(e.Resources), normList(e.Users), normList(e.Groups)
	}
	sortByName(c.Entitlements, func(e Entitlement) string { return e.Name })
	for i := range c.Targets {
		c.Targets[i].normalize()
	}
	sortByName(c.Targets, func(t Target) string { return t.Name })
	nilIfEmpty(&c.Zones)
	nilIfEmpty(&c.Catalogs)
	nilIfEmpty(&c.Groups)
	nilIfEmpty(&c.Users)
	nilIfEmpty(&c.Machines)
	nilIfEmpty(&c.DeliveryGroups)
	nilIfEmpty(&c.Applications)
	nilIfEmpty(&c.Desktops)
	nilIfEmpty(&c.Entitlements)
	nilIfEmpty(&c.Targets)
}

// sameAccounts reports whether c's users, groups and the references to
// them (assigned machines, entitlements) are b's, element by element.
func sameAccounts(c, b *Config) bool {
	if len(c.Users) != len(b.Users) || len(c.Groups) != len(b.Groups) || len(c.Machines) != len(b.Machines) ||
		len(c.Entitlements) != len(b.Entitlements) {
		return false
	}
	for i := range c.Users {
		if !equalUser(&c.Users[i], &b.Users[i]) {
			return false
		}
	}
	for i := range c.Groups {
		if c.Groups[i] != b.Groups[i] {
			return false
		}
	}
	for i := range c.Machines {
		if c.Machines[i].AssignedUser != b.Machines[i].AssignedUser {
			return false
		}
	}
	for i := range c.Entitlements {
		if !equalList(c.Entitlements[i].Users, b.Entitlements[i].Users) || !equalList(c.Entitlements[i].Groups, b.Entitlements[i].Groups) {
			return false
		}
	}
	return true
}

// normalizeAccounts puts user and group names in normal form C and spells
// every reference to a user or a group as its object does.
func (c *Config) normalizeAccounts() {
	if len(c.Users) == 0 && len(c.Groups) == 0 {
		return
	}
	groups := make(map[string]string, len(c.Groups))
	for i := range c.Groups {
		g := &c.Groups[i]
		g.Name = NormalizeName(g.Name)
		if _, ok := groups[FoldName(g.Name)]; !ok { // a second is a conflict Validate reports
			groups[FoldName(g.Name)] = g.Name
		}
	}
	users := make(map[string]string, len(c.Users))
	for i := range c.Users {
		u := &c.Users[i]
		u.Name = NormalizeName(u.Name)
		if _, ok := users[FoldName(u.Name)]; !ok {
			users[FoldName(u.Name)] = u.Name
		}
	}
	// spell returns list with its names spelled as their objects are: list
	// itself when they already are, else a copy, so that a list shared
	// with another configuration is never written.
	spell := func(names map[string]string, list []string) []string {
		out := list
		for i, n := range list {
			if s, ok := names[FoldName(n)]; ok && s != n {
				if &out[0] == &list[0] {
					out = slices.Clone(list)
				}
				out[i] = s
			}
		}
		return out
	}
	for i := range c.Users {
		c.Users[i].Groups = spell(groups, c.Users[i].Groups)
	}
	for i := range c.Machines {
		if s, ok := users[FoldName(c.Machines[i].AssignedUser)]; ok && c.Machines[i].AssignedUser != "" {
			c.Machines[i].AssignedUser = s
		}
	}
	for i := range c.Entitlements {
		e := &c.Entitlements[i]
		e.Users, e.Groups = spell(users, e.Users), spell(groups, e.Groups)
	}
}

// nameKey is the key two names of a kind collide under: account names
// (users', groups') fold, as Windows matches them.
func nameKey(kind Kind, name string) string {
	if kind == KindUser || kind == KindGroup {
		return FoldName(name)
	}
	return name
}

func nilIfEmpty[T any](s *[]T) {
	if len(*s) == 0 {
		*s = nil
	}
}

func sortByName[T any](s []T, name func(T) string) {
	byName := func(a, b T) int { return cmp.Compare(name(a), name(b)) }
	if !slices.IsSortedFunc(s, byName) {
		slices.SortStableFunc(s, byName)
	}
}

// normList returns s sorted, nil when empty: s itself when it already is,
// else a sorted copy (s is never written).
func normList(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	if slices.IsSorted(s) {
		return s
	}
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// Validate checks every object and every reference between objects, and
// returns the first problem found, naming the object and the field.
func (c *Config) Validate() error { return c.validate(nil) }

// validate is Validate; an object that same reports unchanged from a
// configuration that passed Validate is not checked again on its own
// (its references and the rules between objects are).
func (c *Config) validate(same func(Kind, string) bool) error {
	own := func(kind Kind, name string, v func() error) error {
		if same != nil && same(kind, name) {
			return nil
		}
		return v()
	}
	if err := c.Settings.Validate(); err != nil {
		return err
	}
	// The directory's CA bundle and DNs cost parsing: checked only when
	// the change touches them.
	if err := own(KindDirectory, "", c.Directory.Validate); err != nil {
		return err
	}
	names := map[Kind]map[string]string{ // kind -> nameKey -> name, sized not to grow
		KindZone: make(map[string]string, len(c.Zones)), KindCatalog: make(map[string]string, len(c.Catalogs)),
		KindGroup: make(map[string]string, len(c.Groups)), KindUser: make(map[string]string, len(c.Users)),
		KindMachine: make(map[string]string, len(c.Machines)), KindDeliveryGroup: make(map[string]string, len(c.DeliveryGroups)),
		KindApplication: make(map[string]string, len(c.Applications)+len(c.Desktops)),
		KindEntitlement: make(map[string]string, len(c.Entitlements)),
		KindTarget:      make(map[string]string, len(c.Targets)),
	}
	add := func(kind Kind, name string, err error) error {
		if err != nil {
			return err
		}
		ns := kind
		if kind == KindDesktop {
			ns = KindApplication // one namespace for resources
		}
		if names[ns] == nil {
			names[ns] = map[string]string{}
		}
		key := nameKey(kind, name)
		if other, ok := names[ns][key]; ok {
			return ConflictWith(kind, name, other)
		}
		names[ns][key] = name
		return nil
	}
	primaries := 0
	for _, z := range c.Zones {
		if err := add(KindZone, z.Name, own(KindZone, z.Name, z.Validate)); err != nil {
			return err
		}
		if z.Primary {
			primaries++
		}
	}
	if len(c.Zones) > 0 && primaries != 1 {
		return Errorf(EInvalid, "zones: exactly one zone must be primary, found %d", primaries)
	}
	catalogs := map[string]Catalog{}
	for _, x := range c.Catalogs {
		if err := add(KindCatalog, x.Name, own(KindCatalog, x.Name, x.Validate)); err != nil {
			return err
		}
		catalogs[x.Name] = x
	}
	for _, g := range c.Groups {
		if err := add(KindGroup, g.Name, own(KindGroup, g.Name, g.Validate)); err != nil {
			return err
		}
	}
	for _, u := range c.Users {
		if err := add(KindUser, u.Name, own(KindUser, u.Name, u.Validate)); err != nil {
			return err
		}
	}
	for _, m := range c.Machines {
		if err := add(KindMachine, m.Name, own(KindMachine, m.Name, m.Validate)); err != nil {
			return err
		}
	}
	groups := map[string]DeliveryGroup{}
	for _, g := range c.DeliveryGroups {
		if err := add(KindDeliveryGroup, g.Name, own(KindDeliveryGroup, g.Name, g.Validate)); err != nil {
			return err
		}
		groups[g.Name] = g
	}
	resources := map[string]Resource{}
	for _, r := range slices.Concat(c.Applications, c.Desktops) {
		if err := add(r.Kind.objectKind(), r.Name, own(r.Kind.objectKind(), r.Name, r.Validate)); err != nil {
			return err
		}
		resources[r.Name] = r
	}
	for _, e := range c.Entitlements {
		if err := add(KindEntitlement, e.Name, own(KindEntitlement, e.Name, e.Validate)); err != nil {
			return err
		}
	}

	macs := make(map[string]string, len(c.Targets)) // MAC -> target
	for _, t := range c.Targets {
		if err := add(KindTarget, t.Name, own(KindTarget, t.Name, t.Validate)); err != nil {
			return err
		}
		if other, ok := macs[t.MAC]; ok {
			return Errorf(EConflict, "target %q: mac %s is already target %q's", t.Name, t.MAC, other).about(KindTarget, t.Name).At("mac")
		}
		macs[t.MAC] = t.Name
	}

	// References.
	check := func(kind Kind, name string, refs []Ref) error {
		for _, r := range refs {
			if _, ok := names[r.Kind][nameKey(r.Kind, r.Name)]; !ok {
				return MissingRef(kind, name, r)
			}
		}
		return nil
	}
	for _, x := range c.Catalogs {
		if err := check(KindCatalog, x.Name, x.References()); err != nil {
			return err
		}
	}
	for _, u := range c.Users {
		if err := check(KindUser, u.Name, u.References()); err != nil {
			return err
		}
	}
	for _, m := range c.Machines {
		if err := check(KindMachine, m.Name, m.References()); err != nil {
			return err
		}
		if err := m.CheckCatalog(catalogs[m.Catalog]); err != nil {
			return err
		}
	}
	owner := map[string]string{} // catalog -> delivery group
	for _, g := range c.DeliveryGroups {
		if err := check(KindDeliveryGroup, g.Name, g.References()); err != nil {
			return err
		}
		if err := g.CheckCatalogs(catalogs); err != nil {
			return err
		}
		for _, cn := range g.Catalogs {
			if other, ok := owner[cn]; ok {
				return invalid(KindDeliveryGroup, g.Name, "catalog %q already belongs to delivery group %q", cn, other).At("catalogs")
			}
			owner[cn] = g.Name
		}
	}
	for _, r := range slices.Concat(c.Applications, c.Desktops) {
		if err := check(r.Kind.objectKind(), r.Name, r.References()); err != nil {
			return err
		}
	}
	for _, e := range c.Entitlements {
		if err := check(KindEntitlement, e.Name, e.References()); err != nil {
			return err
		}
		for _, rn := range e.Resources {
			if !slices.Contains(resources[rn].DeliveryGroups, e.DeliveryGroup) {
				return invalid(KindEntitlement, e.Name, "resource %q is not published on delivery group %q", rn, e.DeliveryGroup).At("resources")
			}
		}
	}
	return nil
}

// CheckCatalog checks the rules between a machine and its catalog.
func (m Machine) CheckCatalog(c Catalog) error {
	if c.Kind.SingleSession() && m.MaxSessions > 1 {
		return invalid(KindMachine, m.Name, "max_sessions %d: catalog %q is %s", m.MaxSessions, c.Name, c.Kind).At("max_sessions")
	}
	if m.AssignedUser != "" && c.Kind != SingleSessionAssigned {
		return invalid(KindMachine, m.Name, "assigned_user is set but catalog %q is %s", c.Name, c.Kind).At("assigned_user")
	}
	return nil
}

// CheckCatalogs checks that the group's catalogs host the same kind of
// sessions: a group is either multi-session or single-session.
func (g DeliveryGroup) CheckCatalogs(catalogs map[string]Catalog) error {
	for i, name := range g.Catalogs {
		if i == 0 {
			continue
		}
		first, this := catalogs[g.Catalogs[0]], catalogs[name]
		if first.Kind.SingleSession() != this.Kind.SingleSession() || (first.Kind.SingleSession() && first.Kind != this.Kind) {
			return invalid(KindDeliveryGroup, g.Name, "catalogs %q (%s) and %q (%s) host different kinds of session", first.Name, first.Kind, this.Name, this.Kind).At("catalogs")
		}
	}
	return nil
}

// ObjectCount returns how many objects of each kind c holds, for progress
// and summaries.
func (c *Config) ObjectCount() map[Kind]int {
	return map[Kind]int{
		KindZone: len(c.Zones), KindCatalog: len(c.Catalogs), KindGroup: len(c.Groups),
		KindUser: len(c.Users), KindMachine: len(c.Machines), KindDeliveryGroup: len(c.DeliveryGroups),
		KindApplication: len(c.Applications), KindDesktop: len(c.Desktops), KindEntitlement: len(c.Entitlements),
		KindTarget: len(c.Targets),
	}
}

// String summarises the configuration's size.
func (c *Config) String() string {
	if len(c.Targets) > 0 {
		return c.summary() + fmt.Sprintf(", %d targets", len(c.Targets))
	}
	return c.summary()
}

func (c *Config) summary() string {
	return fmt.Sprintf("%d zones, %d catalogs, %d machines, %d delivery groups, %d applications, %d desktops, %d users, %d groups, %d entitlements",
		len(c.Zones), len(c.Catalogs), len(c.Machines), len(c.DeliveryGroups), len(c.Applications), len(c.Desktops), len(c.Users), len(c.Groups), len(c.Entitlements))
}
