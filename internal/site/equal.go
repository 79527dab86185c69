package site

// The equality of objects that Diff compares: what reflect.DeepEqual says
// of them (a nil list differs from an empty one), field by field, without
// reflection, and at once for lists that share their elements, as those
// of a configuration and of its copy (MutateFrom) do. A test checks that
// each function looks at every field of its type.

func equalZone(a, b *Zone) bool       { return *a == *b }
func equalCatalog(a, b *Catalog) bool { return *a == *b }
func equalGroup(a, b *Group) bool     { return *a == *b }
func equalMachine(a, b *Machine) bool { return *a == *b }

func equalUser(a, b *User) bool {
	return a.Name == b.Name && a.DisplayName == b.DisplayName && a.Disabled == b.Disabled &&
		a.PasswordHash == b.PasswordHash && a.HomeZone == b.HomeZone && equalList(a.Groups, b.Groups)
}

func equalDeliveryGroup(a, b *DeliveryGroup) bool {
	return a.Name == b.Name && a.Description == b.Description && a.LoadRules == b.LoadRules &&
		a.Reconnect == b.Reconnect && a.ZonePreference == b.ZonePreference && a.HomeZone == b.HomeZone &&
		a.SessionTimers == b.SessionTimers && equalList(a.Catalogs, b.Catalogs)
}

func equalResource(a, b *Resource) bool {
	return a.Kind == b.Kind && a.Name == b.Name && a.DisplayName == b.DisplayName && a.Folder == b.Folder &&
		a.Description == b.Description && a.CommandLine == b.CommandLine && a.Icon == b.Icon &&
		a.Disabled == b.Disabled && equalList(a.DeliveryGroups, b.DeliveryGroups)
}

func equalEntitlement(a, b *Entitlement) bool {
	return a.Name == b.Name && a.DeliveryGroup == b.DeliveryGroup && equalList(a.Resources, b.Resources) &&
		equalList(a.Users, b.Users) && equalList(a.Groups, b.Groups)
}

// equalList is reflect.DeepEqual of two string lists: nil and empty
// differ.
func equalList(a, b []string) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// SameObjects reports whether c and o hold equal lists of objects of the
// kind, element by element (as normalized configurations whose objects of
// that kind are the same do): what a reader that indexes a configuration
// checks before reusing its index of an earlier one. It is false for a
// kind it does not compare.
func (c *Config) SameObjects(o *Config, kind Kind) bool {
	switch kind {
	case KindCatalog:
		return sameList(c.Catalogs, o.Catalogs, equalCatalog)
	case KindUser:
		return sameList(c.Users, o.Users, equalUser)
	case KindMachine:
		return sameList(c.Machines, o.Machines, equalMachine)
	case KindDeliveryGroup:
		return sameList(c.DeliveryGroups, o.DeliveryGroups, equalDeliveryGroup)
	}
	return false
}

func sameList[T any](a, b []T, eq func(*T, *T) bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !eq(&a[i], &b[i]) {
			return false
		}
	}
	return true
}
