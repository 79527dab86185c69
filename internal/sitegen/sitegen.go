// Package sitegen generates site configurations of any size, the same for
// the same sizes: the stores' conformance tests, the benches and `usher
// demo --scale` use them.
package sitegen

import (
	"fmt"

	"github.com/usher-vdi/usher/internal/site"
)

// Sizes says how many objects of each kind Generate makes.
type Sizes struct {
	Zones, Groups, Users, Machines, DeliveryGroups, Applications, Desktops, Entitlements int
}

// DemoSize is the size of the demo site: 400 applications, 1,000 users,
// 57 machines, a few delivery groups and entitlements.
var DemoSize = Sizes{Zones: 2, Groups: 12, Users: 1000, Machines: 57, DeliveryGroups: 4, Applications: 400, Desktops: 3, Entitlements: 8}

// LargeSize is a large site: 100,000 users in 200 groups, 40,000 machines
// in 20 zones, 2,000 applications, the size at which a change must cost
// what it changes and not what the site holds.
var LargeSize = Sizes{Zones: 20, Groups: 200, Users: 100000, Machines: 40000, DeliveryGroups: 200, Applications: 2000, Desktops: 20, Entitlements: 400}

// MidSize is a configuration big enough to show N+1 queries and paging
// bugs, small enough for every test run.
var MidSize = Sizes{Zones: 3, Groups: 5, Users: 60, Machines: 12, DeliveryGroups: 3, Applications: 40, Desktops: 3, Entitlements: 6}

// Generate returns a valid, normalized configuration of the given size,
// the same for the same sizes: every tenth user has passwordHash (none
// when it is empty), every 97th is disabled, one catalog per delivery
// group spread over the zones. Every size is at least 1, except Desktops;
// Entitlements is at least DeliveryGroups.
func Generate(n Sizes, passwordHash string) *site.Config {
	n.Zones, n.Groups, n.Users = max(n.Zones, 1), max(n.Groups, 1), max(n.Users, 1)
	n.Machines, n.DeliveryGroups, n.Applications = max(n.Machines, 1), max(n.DeliveryGroups, 1), max(n.Applications, 1)
	n.Entitlements = max(n.Entitlements, n.DeliveryGroups)

	c := &site.Config{Settings: site.Settings{Name: "Generated Farm", Domain: "GEN", AnonymousAppData: true}}
	for i := range n.Zones {
		c.Zones = append(c.Zones, site.Zone{Name: fmt.Sprintf("zone-%02d", i+1), Primary: i == 0, Description: fmt.Sprintf("Zone %d", i+1)})
	}
	for i := range n.Groups {
		c.Groups = append(c.Groups, site.Group{Name: fmt.Sprintf("group-%02d", i+1)})
	}
	for i := range n.Users {
		u := site.User{Name: fmt.Sprintf("user%04d", i+1), DisplayName: fmt.Sprintf("User %d", i+1)}
		u.Groups = []string{c.Groups[i%n.Groups].Name}
		if i%3 == 0 && n.Groups > 1 {
			u.Groups = append(u.Groups, c.Groups[(i+1)%n.Groups].Name)
		}
		if i%10 == 0 {
			u.PasswordHash = passwordHash
		}
		u.Disabled = i%97 == 96
		c.Users = append(c.Users, u)
	}

	// One catalog per delivery group. With desktops and more than one
	// group, the last group is single-session and publishes the desktops;
	// the others publish applications.
	appGroups := n.DeliveryGroups
	if n.Desktops > 0 && n.DeliveryGroups > 1 {
		appGroups--
	}
	for i := range n.DeliveryGroups {
		cat := site.Catalog{Name: fmt.Sprintf("catalog-%02d", i+1), Kind: site.MultiSession, Zone: c.Zones[i%n.Zones].Name}
		if i >= appGroups {
			cat.Kind = site.SingleSessionPooled
		}
		g := site.NewDeliveryGroup(fmt.Sprintf("dg-%02d", i+1), cat.Name)
		g.Description = fmt.Sprintf("Delivery group %d", i+1)
		if i%2 == 1 {
			g.ZonePreference, g.HomeZone = site.ZoneApplicationHome, c.Zones[(i+1)%n.Zones].Name
			g.LoadRules.CPU.Enabled = true
		}
		c.Catalogs = append(c.Catalogs, cat)
		c.DeliveryGroups = append(c.DeliveryGroups, g)
	}
	for i := range n.Machines {
		cat := c.Catalogs[i%n.DeliveryGroups]
		m := site.Machine{Name: fmt.Sprintf("vda%03d", i+1), Catalog: cat.Name, Address: fmt.Sprintf("10.%d.%d.%d:1494", 1+i/50000, i/200%250, i%200+10)}
		if cat.Kind.SingleSession() {
			m.MaxSessions = 1
		} else if i%4 == 0 {
			m.MaxSessions = 40
		}
		m.Maintenance = i%19 == 18
		c.Machines = append(c.Machines, m)
	}
	published := make([][]string, n.DeliveryGroups) // resources by delivery group
	for i := range n.Applications {
		r := site.Resource{
			Kind:        site.Application,
			Name:        fmt.Sprintf("app%03d", i+1),
			DisplayName: fmt.Sprintf("Application %d", i+1),
			CommandLine: fmt.Sprintf(`C:\Apps\app%03d.exe`, i+1),
			Icon:        "builtin:app",
			Disabled:    i%50 == 49,
		}
		if i%4 != 0 {
			r.Folder = fmt.Sprintf("Folder %d/Sub %d", i%7, i%3)
		}
		for _, g := range []int{i % appGroups, (i + 1) % appGroups} {
			if len(r.DeliveryGroups) > 0 && (i%5 != 0 || g == i%appGroups) {
				break
			}
			r.DeliveryGroups = append(r.DeliveryGroups, c.DeliveryGroups[g].Name)
			published[g] = append(published[g], r.Name)
		}
		c.Applications = append(c.Applications, r)
	}
	for i := range n.Desktops {
		g := n.DeliveryGroups - 1
		r := site.Resource{Kind: site.Desktop, Name: fmt.Sprintf("desktop-%02d", i+1), DisplayName: fmt.Sprintf("Desktop %d", i+1), DeliveryGroups: []string{c.DeliveryGroups[g].Name}}
		c.Desktops = append(c.Desktops, r)
		published[g] = append(published[g], r.Name)
	}

	// Each delivery group is open to a group; the remaining entitlements
	// narrow some resources down to a few users.
	for i, g := range c.DeliveryGroups {
		c.Entitlements = append(c.Entitlements, site.Entitlement{Name: "all-" + g.Name, DeliveryGroup: g.Name, Groups: []string{c.Groups[i%n.Groups].Name}})
	}
	for k := range n.Entitlements - n.DeliveryGroups {
		g := k % n.DeliveryGroups
		e := site.Entitlement{Name: fmt.Sprintf("limited-%02d", k+1), DeliveryGroup: c.DeliveryGroups[g].Name}
		res := published[g]
		for j := range min(3, len(res)) {
			e.Resources = append(e.Resources, res[(k+j)%len(res)])
		}
		for j := range min(5, n.Users) {
			e.Users = append(e.Users, c.Users[(k*7+j)%n.Users].Name)
		}
		c.Entitlements = append(c.Entitlements, e)
	}
	c.Normalize()
	return c
}
