package demo_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/site"
)

func TestSiteIsValid(t *testing.T) {
	if err := demo.Site().Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
}

func TestSiteIsDeterministic(t *testing.T) {
	a, b := demo.Site(), demo.Site()
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two calls of Site returned different configurations")
	}
	a.Users[0].Groups[0] = "changed"
	if b.Users[0].Groups[0] == "changed" {
		t.Fatal("two calls of Site share memory")
	}
	c := demo.Site()
	c.Normalize()
	if !reflect.DeepEqual(c, b) {
		t.Fatal("Site is not normalized")
	}
}

func TestSiteSizes(t *testing.T) {
	CheckSizes(t, demo.Site())
}

// CheckSizes checks the sizes and shape that other packages rely on.
func CheckSizes(t *testing.T, c *site.Config) {
	t.Helper()
	for _, tt := range []struct {
		what      string
		got, want int
	}{
		{"applications", len(c.Applications), demo.Applications},
		{"machines", len(c.Machines), demo.Machines},
		{"users", len(c.Users), demo.Users},
		{"zones", len(c.Zones), 1},
		{"catalogs", len(c.Catalogs), 4},
		{"delivery groups", len(c.DeliveryGroups), 4},
		{"groups", len(c.Groups), 4},
		{"desktops", len(c.Desktops), 3},
	} {
		if tt.got != tt.want {
			t.Errorf("%d %s, want %d", tt.got, tt.what, tt.want)
		}
	}

	perCatalog := map[string]int{}
	for _, m := range c.Machines {
		perCatalog[m.Catalog]++
		if !strings.HasSuffix(m.Address, ".demo.internal:3389") || !strings.HasPrefix(m.Address, m.Name+".") {
			t.Errorf("machine %q: address %q is not NAME.demo.internal:3389", m.Name, m.Address)
		}
	}
	if want := map[string]int{"rdsh-office": 40, "rdsh-engineering": 10, "vdi-pooled": 5, "vdi-assigned": 2}; !reflect.DeepEqual(perCatalog, want) {
		t.Errorf("machines per catalog = %v, want %v", perCatalog, want)
	}

	perGroup, folders := map[string]int{}, map[string]bool{}
	for _, a := range c.Applications {
		for _, g := range a.DeliveryGroups {
			perGroup[g]++
		}
		folders[a.Folder] = true
		if !strings.HasPrefix(a.Icon, "builtin:") || !slices.Contains(demo.Icons, strings.TrimPrefix(a.Icon, "builtin:")) {
			t.Errorf("application %q: icon %q is not one of demo.Icons", a.Name, a.Icon)
		}
		if !strings.HasPrefix(a.CommandLine, "/") {
			t.Errorf("application %q: command line %q is not an absolute path", a.Name, a.CommandLine)
		}
		for _, r := range a.Name {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				t.Errorf("application %q: name is not lowercase letters, digits and dashes", a.Name)
				break
			}
		}
	}
	if want := map[string]int{demo.OfficeApps: 340, demo.EngineeringApps: 60}; !reflect.DeepEqual(perGroup, want) {
		t.Errorf("applications per delivery group = %v, want %v", perGroup, want)
	}
	if n := len(folders); n < 10 || n > 15 {
		t.Errorf("%d folders, want 10 to 15", n)
	}

	members := map[string]int{}
	for _, u := range c.Users {
		for _, g := range u.Groups {
			members[g]++
		}
	}
	if want := map[string]int{demo.DomainUsers: 1000, demo.Engineering: 200, demo.Finance: 100, demo.Helpdesk: 10}; !reflect.DeepEqual(members, want) {
		t.Errorf("group members = %v, want %v", members, want)
	}
}

func TestEveryUserSeesEveryApplication(t *testing.T) {
	c := demo.Site()
	CheckEntitlements(t, c)
}

// CheckEntitlements checks that every user may use all 400 applications
// and exactly the desktops their groups give them.
func CheckEntitlements(t *testing.T, c *site.Config) {
	t.Helper()
	for _, u := range c.Users {
		got := Entitled(c, u.Name)
		apps := 0
		for _, a := range c.Applications {
			if got[a.Name] {
				apps++
			}
		}
		if apps != demo.Applications {
			t.Errorf("user %s may use %d applications, want %d", u.Name, apps, demo.Applications)
		}
		want := []string{demo.OfficeDesktop}
		if slices.Contains(u.Groups, demo.Engineering) {
			want = append(want, demo.PooledDesktop)
		}
		if slices.Contains(u.Groups, demo.Helpdesk) {
			want = append(want, demo.Workstation)
		}
		var desktops []string
		for _, d := range c.Desktops {
			if got[d.Name] {
				desktops = append(desktops, d.Name)
			}
		}
		slices.Sort(want)
		if !slices.Equal(desktops, want) {
			t.Errorf("user %s may use desktops %q, want %q", u.Name, desktops, want)
		}
	}
}

// Entitled returns the resources user may use, following the rule in the
// doc comment of site.Entitlement: a user may use a resource of a delivery
// group when an entitlement of the group without resources names the user
// (directly or through a group) and, if any entitlement of the group lists
// the resource, one of those names the user too.
func Entitled(c *site.Config, user string) map[string]bool {
	var groups []string
	for _, u := range c.Users {
		if u.Name == user {
			groups = u.Groups
		}
	}
	names := func(e site.Entitlement) bool {
		if slices.Contains(e.Users, user) {
			return true
		}
		return slices.ContainsFunc(e.Groups, func(g string) bool { return slices.Contains(groups, g) })
	}
	type key struct{ group, resource string }
	whole := map[string]bool{} // delivery groups the user is entitled to as a whole
	listed := map[key]bool{}   // resources some entitlement of the group lists
	allowed := map[key]bool{}  // ... and one of those names the user
	for _, e := range c.Entitlements {
		if len(e.Resources) == 0 {
			whole[e.DeliveryGroup] = whole[e.DeliveryGroup] || names(e)
		}
		for _, r := range e.Resources {
			k := key{e.DeliveryGroup, r}
			listed[k] = true
			allowed[k] = allowed[k] || names(e)
		}
	}
	out := map[string]bool{}
	for _, r := range slices.Concat(c.Applications, c.Desktops) {
		for _, g := range r.DeliveryGroups {
			k := key{g, r.Name}
			if whole[g] && (!listed[k] || allowed[k]) {
				out[r.Name] = true
			}
		}
	}
	return out
}

func TestEntitledFollowsRestrictions(t *testing.T) {
	c := demo.Site()
	app := c.Applications[0].Name
	c.Entitlements = append(c.Entitlements, site.Entitlement{
		Name: "finance-only", DeliveryGroup: c.Applications[0].DeliveryGroups[0],
		Resources: []string{app}, Groups: []string{demo.Finance},
	})
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if Entitled(c, demo.UserName(1))[app] {
		t.Errorf("%s, an engineer, may use %s, which only finance may", demo.UserName(1), app)
	}
	if !Entitled(c, demo.UserName(201))[app] {
		t.Errorf("%s, in finance, may not use %s", demo.UserName(201), app)
	}
	if !Entitled(c, demo.UserName(1))[c.Applications[1].Name] {
		t.Errorf("restricting %s restricted %s too", app, c.Applications[1].Name)
	}
}
