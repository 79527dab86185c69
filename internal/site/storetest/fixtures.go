package storetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
)

// A PHC string that passes validation. Nothing verifies it.
const testHash = "$argon2id$v=19$m=65536,t=3,p=4$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA"

// base is the site most subtests start from. Its objects are chosen so that
// each kind of reference has a known referrer:
//
//   - zone "dr" is only a home zone (of delivery group "vdi"); zone
//     "branch" only holds catalog "branch-cat";
//   - catalog "spare-cat" only holds machine "spare1"; catalog
//     "branch-cat" is only in delivery group "branch";
//   - group "contractors" only has user "dave"; group "auditors" is only
//     in entitlement "ledger-auditors";
//   - user "erin" is only assigned machine "vdi2"; user "frank" is only in
//     entitlement "branch-all";
//   - delivery group "spare" only publishes application "spare-app";
//     delivery group "kiosk" is only in entitlement "kiosk-all";
//   - application "ledger" is only in entitlement "ledger-auditors";
//     desktop "vdi-desktop" is only in entitlement "vdi-carol".
//
// Lists are deliberately unsorted: stores keep their order.
func base() *site.Config {
	vdi := site.NewDeliveryGroup("vdi", "vdi-cat")
	vdi.ZonePreference, vdi.HomeZone = site.ZoneApplicationHome, "dr"
	vdi.Reconnect = site.ReconnectDisconnectedOnly
	vdi.LoadRules.CPU = site.UsageRule{Enabled: true, FullPercent: 80}
	apps := site.NewDeliveryGroup("apps", "apps-cat")
	apps.Description = "Office applications"
	apps.LoadRules.Memory = site.MemoryRule{Enabled: true, FullPercent: 85, BaseLoadMB: 1024}
	apps.LoadRules.ConcurrentLogons = site.LogonRule{Enabled: true, Tolerance: 3, Hard: true}
	return &site.Config{
		Settings: site.Settings{Name: "Test Farm", Domain: "TEST", TrustXMLRequests: true},
		Zones: []site.Zone{
			{Name: "hq", Description: "Headquarters", Primary: true},
			{Name: "branch"},
			{Name: "dr", Description: "Disaster recovery"},
		},
		Catalogs: []site.Catalog{
			{Name: "apps-cat", Kind: site.MultiSession, Zone: "hq", Description: "RDS hosts"},
			{Name: "vdi-cat", Kind: site.SingleSessionAssigned, Zone: "hq"},
			{Name: "branch-cat", Kind: site.SingleSessionPooled, Zone: "branch"},
			{Name: "spare-cat", Kind: site.MultiSession, Zone: "hq"},
		},
		Groups: []site.Group{
			{Name: "staff", Description: "Everyone"},
			{Name: "finance"},
			{Name: "contractors"},
			{Name: "auditors"},
		},
		Users: []site.User{
			{Name: "alice", DisplayName: "Alice", Groups: []string{"staff"}, PasswordHash: testHash},
			{Name: "bob", DisplayName: "Bob", Groups: []string{"staff", "finance"}},
			{Name: "carol", Disabled: true},
			{Name: "dave", Groups: []string{"contractors"}},
			{Name: "erin"},
			{Name: "frank"},
		},
		Machines: []site.Machine{
			{Name: "app1", Catalog: "apps-cat", Address: "10.0.0.1:1494", MaxSessions: 30},
			{Name: "app2", Catalog: "apps-cat", Address: "10.0.0.2:1494", Maintenance: true},
			{Name: "vdi1", Catalog: "vdi-cat", Address: "10.0.1.1:1494", MaxSessions: 1, AssignedUser: "carol"},
			{Name: "vdi2", Catalog: "vdi-cat", Address: "10.0.1.2:1494", AssignedUser: "erin"},
			{Name: "spare1", Catalog: "spare-cat", Address: "10.0.2.1:1494"},
		},
		DeliveryGroups: []site.DeliveryGroup{
			apps,
			vdi,
			site.NewDeliveryGroup("branch", "branch-cat"),
			site.NewDeliveryGroup("spare"),
			site.NewDeliveryGroup("kiosk"),
		},
		Applications: []site.Resource{
			{Kind: site.Application, Name: "notepad", DisplayName: "Notepad", Folder: "Accessories", CommandLine: `C:\Windows\notepad.exe`, Icon: "builtin:notepad", DeliveryGroups: []string{"apps"}},
			{Kind: site.Application, Name: "calc", DisplayName: "Calculator", Folder: "Accessories/Math", CommandLine: `C:\Windows\calc.exe`, DeliveryGroups: []string{"apps"}, Description: "Adds up"},
			{Kind: site.Application, Name: "ledger", DisplayName: "Ledger", CommandLine: `D:\Ledger\ledger.exe /q`, DeliveryGroups: []string{"apps"}, Disabled: true},
			{Kind: site.Application, Name: "spare-app", DisplayName: "Spare", CommandLine: "spare.exe", DeliveryGroups: []string{"spare"}},
		},
		Desktops: []site.Resource{
			{Kind: site.Desktop, Name: "vdi-desktop", DisplayName: "My Desktop", DeliveryGroups: []string{"vdi"}},
			{Kind: site.Desktop, Name: "branch-desktop", DisplayName: "Branch Desktop", DeliveryGroups: []string{"branch"}, Icon: "builtin:desktop"},
		},
		Entitlements: []site.Entitlement{
			{Name: "apps-staff", DeliveryGroup: "apps", Groups: []string{"staff", "finance"}, Users: []string{"carol", "bob"}},
			{Name: "ledger-auditors", DeliveryGroup: "apps", Resources: []string{"ledger"}, Groups: []string{"auditors"}},
			{Name: "vdi-carol", DeliveryGroup: "vdi", Resources: []string{"vdi-desktop"}, Users: []string{"carol"}},
			{Name: "branch-all", DeliveryGroup: "branch", Users: []string{"frank"}},
			{Name: "kiosk-all", DeliveryGroup: "kiosk", Users: []string{"alice"}},
		},
	}
}

// openBase opens a store and fills it with base() through Create, one
// object at a time.
func openBase(t *testing.T, open func(*testing.T) site.Store) site.Store {
	t.Helper()
	s := open(t)
	update(t, s, func(ctx context.Context, tx site.Tx) error { return createAll(ctx, tx, base()) })
	return s
}

// createAll creates every object of c in tx, in dependency order.
func createAll(ctx context.Context, tx site.Tx, c *site.Config) error {
	if err := tx.SetSettings(ctx, c.Settings); err != nil {
		return fmt.Errorf("set settings: %w", err)
	}
	if err := createEach(ctx, tx.Zones(), c.Zones); err != nil {
		return err
	}
	if err := createEach(ctx, tx.Catalogs(), c.Catalogs); err != nil {
		return err
	}
	if err := createEach(ctx, tx.Groups(), c.Groups); err != nil {
		return err
	}
	if err := createEach(ctx, tx.Users(), c.Users); err != nil {
		return err
	}
	if err := createEach(ctx, tx.Machines(), c.Machines); err != nil {
		return err
	}
	if err := createEach(ctx, tx.DeliveryGroups(), c.DeliveryGroups); err != nil {
		return err
	}
	if err := createEach(ctx, tx.Applications(), c.Applications); err != nil {
		return err
	}
	if err := createEach(ctx, tx.Desktops(), c.Desktops); err != nil {
		return err
	}
	return createEach(ctx, tx.Entitlements(), c.Entitlements)
}

func createEach[T any](ctx context.Context, c site.Collection[T], objs []T) error {
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("create %+v: %w", o, err)
		}
	}
	return nil
}

// Sizes says how many objects of each kind GenerateConfig makes.
type Sizes struct {
	Zones, Groups, Users, Machines, DeliveryGroups, Applications, Desktops, Entitlements int
}

// DemoSize is the size of the demo site: 400 applications, 1,000 users,
// 57 machines, a few delivery groups and entitlements.
var DemoSize = Sizes{Zones: 2, Groups: 12, Users: 1000, Machines: 57, DeliveryGroups: 4, Applications: 400, Desktops: 3, Entitlements: 8}

// MidSize is a configuration big enough to show N+1 queries and paging
// bugs, small enough for every test run.
var MidSize = Sizes{Zones: 3, Groups: 5, Users: 60, Machines: 12, DeliveryGroups: 3, Applications: 40, Desktops: 3, Entitlements: 6}

// GenerateConfig returns a valid, normalized configuration of the given
// size, the same for the same sizes. Every size is at least 1, except
// Desktops; Entitlements is at least DeliveryGroups.
func GenerateConfig(n Sizes) *site.Config {
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
			u.PasswordHash = testHash
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
		m := site.Machine{Name: fmt.Sprintf("vda%03d", i+1), Catalog: cat.Name, Address: fmt.Sprintf("10.1.%d.%d:1494", i/200, i%200+10)}
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
