package site

import (
	"reflect"
	"slices"
)

// DiffReflect is Diff as it was first written, through maps and
// reflect.DeepEqual: the reference that tests hold Diff to.
var DiffReflect = diffReflect

func diffReflect(current, desired *Config) *Plan {
	p := &Plan{}
	if fc := fieldChanges(current.Settings, desired.Settings); len(fc) > 0 {
		p.Settings = &fc
	}
	dir := desired.Directory
	if dir.BindPassword == "" {
		dir.BindPassword = current.Directory.BindPassword
	}
	if fc := fieldChanges(current.Directory, dir); len(fc) > 0 {
		p.Directory, p.directory = &fc, dir
	}
	users := slices.Clone(desired.Users)
	have := map[string]User{}
	for _, u := range current.Users {
		have[u.Name] = u
	}
	for i, u := range users {
		if u.PasswordHash == "" {
			users[i].PasswordHash = have[u.Name].PasswordHash
		}
	}
	p.Changes = slices.Concat(
		diffKindReflect(KindZone, current.Zones, desired.Zones, func(z Zone) string { return z.Name }),
		diffKindReflect(KindCatalog, current.Catalogs, desired.Catalogs, func(x Catalog) string { return x.Name }),
		diffKindReflect(KindGroup, current.Groups, desired.Groups, func(g Group) string { return g.Name }),
		diffKindReflect(KindUser, current.Users, users, func(u User) string { return u.Name }),
		diffKindReflect(KindMachine, current.Machines, desired.Machines, func(m Machine) string { return m.Name }),
		diffKindReflect(KindDeliveryGroup, current.DeliveryGroups, desired.DeliveryGroups, func(g DeliveryGroup) string { return g.Name }),
		diffKindReflect(KindApplication, current.Applications, desired.Applications, func(r Resource) string { return r.Name }),
		diffKindReflect(KindDesktop, current.Desktops, desired.Desktops, func(r Resource) string { return r.Name }),
		diffKindReflect(KindEntitlement, current.Entitlements, desired.Entitlements, func(e Entitlement) string { return e.Name }),
		diffKindReflect(KindTarget, current.Targets, desired.Targets, func(t Target) string { return t.Name }),
	)
	return p
}

func diffKindReflect[T any](kind Kind, current, desired []T, name func(T) string) []Change {
	var out []Change
	have := make(map[string]T, len(current))
	for _, o := range current {
		have[name(o)] = o
	}
	want := make(map[string]bool, len(desired))
	for _, o := range desired {
		n := name(o)
		want[n] = true
		old, ok := have[n]
		switch {
		case !ok:
			out = append(out, Change{Op: OpCreate, Kind: kind, Name: n, obj: o})
		case !reflect.DeepEqual(old, o):
			out = append(out, Change{Op: OpUpdate, Kind: kind, Name: n, Fields: fieldChanges(old, o), obj: o})
		}
	}
	for _, o := range current {
		if n := name(o); !want[n] {
			out = append(out, Change{Op: OpDelete, Kind: kind, Name: n})
		}
	}
	return out
}
