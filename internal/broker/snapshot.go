package broker

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/blob"
	"github.com/usher-vdi/usher/internal/site"
)

// Snapshot is an immutable view of the site configuration at one
// configuration version, indexed for brokering. Entitlement resolutions are
// computed on first use and cached per group set, so that every user with
// the same groups shares one resolution (and its pre-rendered answers).
type Snapshot struct {
	Version  int64
	Settings site.Settings

	// config is the configuration the snapshot indexes, and points into.
	config *site.Config

	// users are indexed by site.FoldName of their names; userKeys by
	// auth.NameKey, the key a directory's logons are counted under, so
	// that no directory user is served under a site user's name.
	users     map[string]*site.User
	userKeys  map[string]*site.User
	resources map[string]*site.Resource
	groups    map[string]*site.DeliveryGroup
	catalogs  map[string]*site.Catalog
	machines  map[string]*site.Machine
	// machinesOf lists each delivery group's machines in name order.
	machinesOf map[string][]*site.Machine
	// groupOf is the delivery group of each machine.
	groupOf map[string]string
	// appsOf lists the applications each delivery group publishes,
	// disabled ones included: their sessions may still be shared.
	appsOf map[string][]string
	// ordered are the enabled resources in display order.
	ordered []*site.Resource
	// grants and limits are the entitlements of each delivery group:
	// grants without resources, limits with.
	grants map[string][]*site.Entitlement
	limits map[string][]*site.Entitlement
	// named are users named directly by some entitlement: their
	// resolution depends on more than their groups.
	named map[string]bool
	// byName and byDN find the site group a directory group stands for,
	// by site.FoldName of its name and by NormalizeDN of its DN.
	byName, byDN map[string]string

	// counts are the configuration's object counts, for summaries.
	counts map[site.Kind]int

	mu       sync.Mutex
	resolved map[string]*Entitlements
	// byUser remembers each user's resolved set, by the user as this
	// snapshot (or the directory entry) holds it, so that a repeated
	// enumeration does not make its key again.
	byUser map[*site.User]*Entitlements
}

// NewSnapshot indexes a validated, normalized configuration, the site's
// at version. The snapshot keeps c and points into it: from then on c
// must not be modified, nor anything it holds (see Config).
func NewSnapshot(version int64, c *site.Config) *Snapshot {
	s, _ := buildSnapshot(nil, version, c)
	return s
}

// buildSnapshot is NewSnapshot, reusing the indexes of prev (the
// snapshot before, or nil) where c's objects are prev's: on a large site a
// change of an application or an entitlement then indexes the users and
// machines again no more. The reused indexes point into prev's
// configuration, whose objects are c's equals. machinesReused reports
// whether the machines' indexes (and so the broker's table) stand.
func buildSnapshot(prev *Snapshot, version int64, c *site.Config) (s *Snapshot, machinesReused bool) {
	s = &Snapshot{
		Version: version, Settings: c.Settings, config: c,
		users: map[string]*site.User{}, resources: map[string]*site.Resource{},
		groups: map[string]*site.DeliveryGroup{}, catalogs: map[string]*site.Catalog{},
		machines: map[string]*site.Machine{}, machinesOf: map[string][]*site.Machine{},
		groupOf: map[string]string{}, appsOf: map[string][]string{}, grants: map[string][]*site.Entitlement{},
		limits: map[string][]*site.Entitlement{}, named: map[string]bool{},
		resolved: map[string]*Entitlements{}, byUser: map[*site.User]*Entitlements{}, counts: c.ObjectCount(),
		byName: map[string]string{}, byDN: map[string]string{},
	}
	for _, g := range c.Groups {
		if g.DN != "" {
			s.byDN[NormalizeDN(g.DN)] = g.Name
		} else {
			s.byName[site.FoldName(g.Name)] = g.Name
		}
	}
	if prev != nil && c.SameObjects(prev.config, site.KindUser) {
		s.users, s.userKeys = prev.users, prev.userKeys
	} else {
		s.userKeys = make(map[string]*site.User, len(c.Users))
		for i := range c.Users {
			s.users[site.FoldName(c.Users[i].Name)] = &c.Users[i]
			s.userKeys[auth.NameKey(c.Users[i].Name)] = &c.Users[i]
		}
	}
	machinesReused = prev != nil && c.SameObjects(prev.config, site.KindMachine) &&
		c.SameObjects(prev.config, site.KindCatalog) && c.SameObjects(prev.config, site.KindDeliveryGroup)
	if machinesReused {
		s.catalogs, s.groups, s.machines, s.groupOf, s.machinesOf = prev.catalogs, prev.groups, prev.machines, prev.groupOf, prev.machinesOf
	} else {
		for i := range c.Catalogs {
			s.catalogs[c.Catalogs[i].Name] = &c.Catalogs[i]
		}
		catalogGroup := map[string]string{}
		for i := range c.DeliveryGroups {
			g := &c.DeliveryGroups[i]
			s.groups[g.Name] = g
			for _, cn := range g.Catalogs {
				catalogGroup[cn] = g.Name
			}
		}
		for i := range c.Machines {
			m := &c.Machines[i]
			s.machines[m.Name] = m
			if g, ok := catalogGroup[m.Catalog]; ok {
				s.groupOf[m.Name] = g
				s.machinesOf[g] = append(s.machinesOf[g], m)
			}
		}
	}
	for _, list := range [][]site.Resource{c.Applications, c.Desktops} {
		for i := range list {
			r := &list[i]
			s.resources[r.Name] = r
			if r.Kind == site.Application {
				for _, g := range r.DeliveryGroups {
					s.appsOf[g] = append(s.appsOf[g], r.Name)
				}
			}
			if !r.Disabled {
				s.ordered = append(s.ordered, r)
			}
		}
	}
	slices.SortFunc(s.ordered, func(a, b *site.Resource) int {
		return cmp.Or(cmp.Compare(a.Folder, b.Folder), cmp.Compare(a.DisplayName, b.DisplayName), cmp.Compare(a.Name, b.Name))
	})
	for i := range c.Entitlements {
		e := &c.Entitlements[i]
		if len(e.Resources) == 0 {
			s.grants[e.DeliveryGroup] = append(s.grants[e.DeliveryGroup], e)
		} else {
			s.limits[e.DeliveryGroup] = append(s.limits[e.DeliveryGroup], e)
		}
		for _, u := range e.Users {
			s.named[u] = true
		}
	}
	return s, machinesReused
}

// Config returns the configuration the snapshot was built from: the
// site's whole configuration at s.Version, normalized and valid. It is
// immutable, as the snapshot is: readers use it concurrently, so no one
// may write into it or into anything it holds. A change starts from a
// copy of it (site.MutateFrom copies its lists of objects and replaces,
// never modifies, the lists those objects hold).
func (s *Snapshot) Config() *site.Config { return s.config }

// User returns a user, or false when there is none. Names match as
// Windows matches them: case-insensitively, in any Unicode normal form.
func (s *Snapshot) User(name string) (*site.User, bool) {
	u, ok := s.users[site.FoldName(name)]
	return u, ok
}

// UserKeyed returns the site user whose name has key (auth.NameKey), or
// false when there is none: a directory user of that key would share the
// site user's name, and is refused.
func (s *Snapshot) UserKeyed(key string) (*site.User, bool) {
	u, ok := s.userKeys[key]
	return u, ok
}

// Resource returns a resource, or false when there is none.
func (s *Snapshot) Resource(name string) (*site.Resource, bool) {
	r, ok := s.resources[name]
	return r, ok
}

// DeliveryGroup returns a delivery group, or false.
func (s *Snapshot) DeliveryGroup(name string) (*site.DeliveryGroup, bool) {
	g, ok := s.groups[name]
	return g, ok
}

// Machine returns a machine and its delivery group ("" when its catalog
// belongs to none), or false.
func (s *Snapshot) Machine(name string) (*site.Machine, string, bool) {
	m, ok := s.machines[name]
	return m, s.groupOf[name], ok
}

// Catalog returns a catalog, or false.
func (s *Snapshot) Catalog(name string) (*site.Catalog, bool) {
	c, ok := s.catalogs[name]
	return c, ok
}

// MachinesOf returns the machines of a delivery group in name order.
func (s *Snapshot) MachinesOf(group string) []*site.Machine { return s.machinesOf[group] }

// Entitlements are what one set of principals may use.
type Entitlements struct {
	// Key identifies the principal set; users with the same key share it.
	Key string
	// Resources are the usable resources, in display order.
	Resources []*site.Resource
	// groups lists, per resource, the delivery groups it may be used
	// through, in name order.
	groups map[string][]string

	// rendered holds the answers cached by Rendered. Every enumeration
	// reads it, so reads take no lock: a miss copies the map under
	// renderMu and publishes the copy.
	renderMu sync.Mutex
	rendered atomic.Pointer[map[string]*blob.Blob]
}

// Groups returns the delivery groups through which the resource may be
// used, or nil when it may not.
func (e *Entitlements) Groups(resource string) []string { return e.groups[resource] }

// Rendered returns the answer cached under key, rendering it with render
// on first use. Transports use it to pre-render enumeration answers once
// per entitlement set and snapshot.
func (e *Entitlements) Rendered(key string, render func() []byte) *blob.Blob {
	if m := e.rendered.Load(); m != nil {
		if b, ok := (*m)[key]; ok {
			return b
		}
	}
	e.renderMu.Lock()
	defer e.renderMu.Unlock()
	old := e.rendered.Load()
	if old != nil {
		if b, ok := (*old)[key]; ok {
			return b
		}
	}
	b := blob.New(render())
	m := make(map[string]*blob.Blob, 1+len(ptrMap(old)))
	maps.Copy(m, ptrMap(old))
	m[key] = b
	e.rendered.Store(&m)
	return b
}

func ptrMap(m *map[string]*blob.Blob) map[string]*blob.Blob {
	if m == nil {
		return nil
	}
	return *m
}

// EntitlementsOf resolves what a user may use. A user may use a resource
// through a delivery group when an entitlement of the group without
// resources names the user or one of the user's groups and, if entitlements
// of the group list the resource, one of those names them too. Unknown and
// disabled users get nothing.
func (s *Snapshot) EntitlementsOf(user string) *Entitlements {
	u, ok := s.users[site.FoldName(user)]
	return s.entitlementsOf(u, ok)
}

// entitlementsOf is EntitlementsOf for the user found (ok) by User.
func (s *Snapshot) entitlementsOf(u *site.User, ok bool) *Entitlements {
	if !ok || u.Disabled {
		return &Entitlements{Key: "none", groups: map[string][]string{}}
	}
	return s.entitlements(u, true)
}

// EntitlementsOfMember returns what a user who is not one of the site's
// users (a directory's) may use, as a member of groups, the names of the
// site's groups in name order. Entitlements that name the user directly
// count too. Users of the same groups share one resolution, as the
// site's users do.
func (s *Snapshot) EntitlementsOfMember(user string, groups []string) *Entitlements {
	return s.entitlements(&site.User{Name: user, Groups: groups}, false)
}

// DirectoryGroups returns the site's groups, in name order, that a
// directory user belongs to as a member of the directory groups of the
// given names (cn) and DNs, in the same order: a site group with a DN
// (site.Group.DN) stands for the directory group of that DN; one without,
// for a directory group of its name. Names and DNs match in any case.
func (s *Snapshot) DirectoryGroups(names, dns []string) []string {
	var out []string
	for i, n := range names {
		if g, ok := s.byName[site.FoldName(n)]; ok {
			out = append(out, g)
		}
		if i < len(dns) {
			if g, ok := s.byDN[NormalizeDN(dns[i])]; ok {
				out = append(out, g)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// NormalizeDN returns dn in the form DirectoryGroups compares: lower
// case, without the white space around its RDNs and around their equals
// signs ("CN=Staff, OU=Groups" is "cn=staff,ou=groups"). Escaped
// characters stay as they are: an escaped comma or equals sign separates
// nothing, and an escaped space at the end of a value is part of it
// (`cn=a\ ,ou=x` is not `cn=a\,ou=x`). It is a fixed point:
// NormalizeDN(NormalizeDN(dn)) == NormalizeDN(dn).
func NormalizeDN(dn string) string {
	var rdns []string
	for {
		rdn, rest, more := cutUnescaped(dn, ',')
		if k, v, ok := cutUnescaped(rdn, '='); ok {
			rdn = trimDNSpace(k) + "=" + trimDNSpace(v)
		}
		rdns = append(rdns, trimDNSpace(rdn))
		if !more {
			break
		}
		dn = rest
	}
	return strings.ToLower(strings.Join(rdns, ","))
}

// cutUnescaped is strings.Cut at the first c in s that no backslash
// escapes.
func cutUnescaped(s string, c byte) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case c:
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// dnSpace is the white space that NormalizeDN removes around separators.
const dnSpace = " \t\n\v\f\r"

// trimDNSpace trims the white space at either end of s but an escaped
// one (a space after an odd number of backslashes).
func trimDNSpace(s string) string {
	s = strings.TrimLeft(s, dnSpace)
	t := strings.TrimRight(s, dnSpace)
	if len(t) < len(s) {
		n := 0
		for n < len(t) && t[len(t)-1-n] == '\\' {
			n++
		}
		if n%2 == 1 {
			t = s[:len(t)+1]
		}
	}
	return t
}

// entitlementsKey names a user's entitlements: the same for every user
// of the same groups whom no entitlement names.
func entitlementsKey(s *Snapshot, u *site.User) string {
	key := "g:" + strings.Join(u.Groups, "\x00")
	if s.named[u.Name] {
		key = "u:" + u.Name + "\x01" + key
	}
	return key
}

// maxResolved bounds the entitlement sets a snapshot keeps: the group sets
// of a directory's users are bounded by the directory, not the site.
const maxResolved = 10_000

// entitlements resolves u's entitlements once per key, and caches them
// (up to maxResolved sets); with byUser, u is one of the snapshot's users
// and its set is remembered by u too.
func (s *Snapshot) entitlements(u *site.User, byUser bool) *Entitlements {
	if byUser {
		s.mu.Lock()
		e, ok := s.byUser[u]
		s.mu.Unlock()
		if ok {
			return e
		}
	}
	key := entitlementsKey(s, u)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.resolved[key]
	if !ok {
		e = s.resolve(u, key)
		if len(s.resolved) < maxResolved {
			s.resolved[key] = e
		}
	}
	if byUser && len(s.byUser) < maxResolved {
		s.byUser[u] = e
	}
	return e
}

func (s *Snapshot) resolve(u *site.User, key string) *Entitlements {
	names := func(e *site.Entitlement) bool {
		if slices.Contains(e.Users, u.Name) {
			return true
		}
		for _, g := range e.Groups {
			if slices.Contains(u.Groups, g) {
				return true
			}
		}
		return false
	}
	granted := map[string]bool{}
	for g, es := range s.grants {
		granted[g] = slices.ContainsFunc(es, names)
	}
	e := &Entitlements{Key: key, groups: map[string][]string{}}
	for _, r := range s.ordered {
		for _, g := range r.DeliveryGroups {
			if !granted[g] {
				continue
			}
			listed, allowed := false, false
			for _, l := range s.limits[g] {
				if slices.Contains(l.Resources, r.Name) {
					listed = true
					allowed = allowed || names(l)
				}
			}
			if !listed || allowed {
				e.groups[r.Name] = append(e.groups[r.Name], g)
			}
		}
		if len(e.groups[r.Name]) > 0 {
			e.Resources = append(e.Resources, r)
		}
	}
	return e
}

// MachineNames returns every machine's name in name order.
func (s *Snapshot) MachineNames() []string {
	names := make([]string, 0, len(s.machines))
	for n := range s.machines {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Counts returns how many objects of each kind the configuration holds.
func (s *Snapshot) Counts() map[site.Kind]int { return s.counts }
