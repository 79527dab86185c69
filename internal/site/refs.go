package site

// Ref is a reference from one object to another, by name.
type Ref struct {
	Field string // the referring field, as spelled in YAML and JSON
	Kind  Kind   // the kind referred to
	Name  string
}

// References returns what the catalog refers to.
func (c Catalog) References() []Ref { return []Ref{{"zone", KindZone, c.Zone}} }

// References returns what the machine refers to.
func (m Machine) References() []Ref {
	refs := []Ref{{"catalog", KindCatalog, m.Catalog}}
	if m.AssignedUser != "" {
		refs = append(refs, Ref{"assigned_user", KindUser, m.AssignedUser})
	}
	return refs
}

// References returns what the delivery group refers to.
func (g DeliveryGroup) References() []Ref {
	refs := listRefs("catalogs", KindCatalog, g.Catalogs)
	if g.HomeZone != "" {
		refs = append(refs, Ref{"home_zone", KindZone, g.HomeZone})
	}
	return refs
}

// References returns what the resource refers to.
func (r Resource) References() []Ref {
	return listRefs("delivery_groups", KindDeliveryGroup, r.DeliveryGroups)
}

// References returns what the user refers to.
func (u User) References() []Ref {
	refs := listRefs("groups", KindGroup, u.Groups)
	if u.HomeZone != "" {
		refs = append(refs, Ref{"home_zone", KindZone, u.HomeZone})
	}
	return refs
}

// References returns what the entitlement refers to. Its resources may be
// applications or desktops; they are listed with KindApplication and a
// checker must accept either.
func (e Entitlement) References() []Ref {
	refs := []Ref{{"delivery_group", KindDeliveryGroup, e.DeliveryGroup}}
	refs = append(refs, listRefs("resources", KindApplication, e.Resources)...)
	refs = append(refs, listRefs("users", KindUser, e.Users)...)
	return append(refs, listRefs("groups", KindGroup, e.Groups)...)
}

func listRefs(field string, kind Kind, names []string) []Ref {
	refs := make([]Ref, len(names))
	for i, n := range names {
		refs[i] = Ref{field, kind, n}
	}
	return refs
}

// MissingRef is the EInvalid error for a reference to an object that does
// not exist.
func MissingRef(kind Kind, name string, r Ref) *Error {
	what := string(r.Kind)
	if r.Kind == KindApplication && r.Field == "resources" {
		what = "resource"
	}
	return invalid(kind, name, "%s refers to %s %q, which does not exist", r.Field, what, r.Name).At(r.Field)
}
