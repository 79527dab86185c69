package broker

import (
	"slices"
	"testing"

	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitegen"
)

// TestSnapshotReusesOnlyWhatDidNotChange: a snapshot built from the one
// before reuses its indexes of users and machines when those objects are
// the same, and indexes them again when any changed, so that a change is
// served whatever it touched.
func TestSnapshotReusesOnlyWhatDidNotChange(t *testing.T) {
	c1 := sitegen.Generate(sitegen.MidSize, "")
	c1.Normalize()
	s1 := NewSnapshot(1, c1)
	copyOf := func(c *site.Config) *site.Config {
		n := *c
		n.Users, n.Machines, n.Applications = slices.Clone(c.Users), slices.Clone(c.Machines), slices.Clone(c.Applications)
		return &n
	}

	// An application added: users and machines reused.
	c2 := copyOf(c1)
	c2.Applications = append(c2.Applications, site.Resource{Kind: site.Application, Name: "zz-new", DisplayName: "New",
		CommandLine: "new.exe", DeliveryGroups: []string{c1.DeliveryGroups[0].Name}})
	s2, reused := buildSnapshot(s1, 2, c2)
	if !reused {
		t.Error("an application added: the machines' indexes were built again")
	}
	if _, ok := s2.Resource("zz-new"); !ok {
		t.Fatal("the new application is not in the snapshot")
	}
	u := c1.Users[0].Name
	if got, ok := s2.User(u); !ok || got.Name != u {
		t.Fatalf("user %s: %v, %v", u, got, ok)
	}

	// A machine into maintenance: the machines indexed again.
	c3 := copyOf(c2)
	c3.Machines[0].Maintenance = !c3.Machines[0].Maintenance
	s3, reused := buildSnapshot(s2, 3, c3)
	if reused {
		t.Error("a machine changed, and the machines' indexes were reused")
	}
	if m, _, _ := s3.Machine(c3.Machines[0].Name); m.Maintenance != c3.Machines[0].Maintenance {
		t.Errorf("machine %s: maintenance %v, want %v", m.Name, m.Maintenance, c3.Machines[0].Maintenance)
	}

	// A user renamed for display: the users indexed again.
	c4 := copyOf(c3)
	c4.Users[0].DisplayName = "Someone Else"
	s4, _ := buildSnapshot(s3, 4, c4)
	if got, _ := s4.User(u); got.DisplayName != "Someone Else" {
		t.Errorf("user %s's display name %q, want the new one", u, got.DisplayName)
	}
	if got, _ := s3.User(u); got.DisplayName == "Someone Else" {
		t.Error("the snapshot before sees the change")
	}
}

// TestEntitlementsOfMember: a user the site does not hold gets what its
// groups' and its own entitlements give, as a site user of those groups
// would, and nothing is cached for it.
func TestEntitlementsOfMember(t *testing.T) {
	c := demo.Site()
	c.Entitlements = append(c.Entitlements, site.Entitlement{Name: "named", DeliveryGroup: demo.AssignedDesktops, Users: []string{"dir-user"}})
	s := NewSnapshot(1, c)
	names := func(e *Entitlements) []string {
		var out []string
		for _, r := range e.Resources {
			out = append(out, r.Name)
		}
		return out
	}
	local := s.EntitlementsOf(demo.UserName(1)) // domain-users, engineering
	u, _ := s.User(demo.UserName(1))
	member := s.EntitlementsOfMember("dir-other", u.Groups)
	if !slices.Equal(names(member), names(local)) || len(local.Resources) == 0 {
		t.Fatalf("a member of %v gets %d resources, a site user of those groups %d", u.Groups, len(member.Resources), len(local.Resources))
	}
	if got := names(s.EntitlementsOfMember("dir-nobody", nil)); len(got) != 0 {
		t.Fatalf("a member of no group gets %v", got)
	}
	named := names(s.EntitlementsOfMember("dir-user", nil))
	if !slices.Contains(named, demo.Workstation) {
		t.Fatalf("an entitlement naming the user is not counted: %v", named)
	}
	// Members of the same groups share one resolution (and its rendered
	// answers), as site users do.
	third := s.EntitlementsOfMember("dir-third", []string{demo.DomainUsers, "helpdesk"})
	if fourth := s.EntitlementsOfMember("dir-fourth", []string{demo.DomainUsers, "helpdesk"}); fourth != third {
		t.Fatal("two members of the same groups got two resolutions")
	}
}
