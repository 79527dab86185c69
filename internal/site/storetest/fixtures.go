package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitegen"
)

// A PHC string that passes validation. Nothing verifies it.
const testHash = "$argon2id$v=19$m=65536,t=3,p=4$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA"

// base is the site most subtests start from. Its objects are chosen so that
// each kind of reference has a known referrer:
//
//   - zone "dr" is only a home zone (of delivery group "vdi"); zone
//     "branch" only holds catalog "branch-cat"; zone "remote" is only
//     user "frank"'s home zone;
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
	vdi.SessionTimers = site.SessionTimers{DisconnectedLogoff: site.Duration(2 * time.Hour), MaxSession: site.Duration(12 * time.Hour)}
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
			{Name: "remote", PrimaryFallback: true},
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
			{Name: "frank", HomeZone: "remote"},
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
	setUp(t, s, func(ctx context.Context, tx site.Tx) error { return createAll(ctx, tx, base()) })
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

// Sizes, DemoSize and MidSize are sitegen's, for the suite's callers.
type Sizes = sitegen.Sizes

var (
	DemoSize = sitegen.DemoSize
	MidSize  = sitegen.MidSize
)

// GenerateConfig is sitegen.Generate with a password hash on every tenth
// user.
func GenerateConfig(n Sizes) *site.Config { return sitegen.Generate(n, testHash) }
