package broker

import (
	"slices"

	"github.com/usher-vdi/usher/internal/site"
)

// Resources returns every enabled resource in display order, whoever may
// use it: what an NFuse RequestAppData without credentials lists when the
// site's AnonymousAppData setting is on. The slice is shared; callers must
// not modify it.
func (s *Snapshot) Resources() []*site.Resource { return s.ordered }

// AccessList returns the users and groups that the entitlements name for a
// resource, each sorted and without duplicates: per delivery group of the
// resource, the principals of the entitlements that list it, or, when none
// does, of the entitlements that grant the whole group. It is what NFuse
// shows as an application's access list; it does not restate the rule that
// a listed principal needs a grant of the group too. An unknown resource
// has an empty list.
func (s *Snapshot) AccessList(resource string) (users, groups []string) {
	r, ok := s.resources[resource]
	if !ok {
		return nil, nil
	}
	for _, g := range r.DeliveryGroups {
		var named []*site.Entitlement
		for _, l := range s.limits[g] {
			if slices.Contains(l.Resources, r.Name) {
				named = append(named, l)
			}
		}
		if len(named) == 0 {
			named = s.grants[g]
		}
		for _, e := range named {
			users = append(users, e.Users...)
			groups = append(groups, e.Groups...)
		}
	}
	slices.Sort(users)
	slices.Sort(groups)
	return slices.Compact(users), slices.Compact(groups)
}
