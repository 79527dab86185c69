package demo

import (
	"fmt"

	"github.com/usher-vdi/usher/internal/site"
)

// Sizes of the demo site.
const (
	Users        = 1000
	Machines     = 57 // office 40 + engineering 10 + pooled 5 + assigned 2
	Applications = 400
)

// Names of the demo site's objects that other packages refer to.
const (
	Zone = "primary"

	OfficeApps       = "Office Apps"
	EngineeringApps  = "Engineering Apps"
	PooledDesktops   = "Pooled Desktops"
	AssignedDesktops = "Assigned Desktops"

	// Desktops are named as users see them: their names are their
	// display names.
	OfficeDesktop = "Office Desktop"
	PooledDesktop = "Pooled Linux Desktop"
	Workstation   = "My Workstation"

	DomainUsers = "domain-users"
	Engineering = "engineering"
	Finance     = "finance"
	Helpdesk    = "helpdesk"
)

// Icons are the builtin icons the demo applications use ("builtin:NAME").
var Icons = []string{
	"browser", "calculator", "cad", "chart", "chat", "database", "desktop",
	"document", "folder", "image", "mail", "pdf", "presentation", "settings",
	"spreadsheet", "terminal",
}

// UserName returns the name of demo user i, 1 to Users: "user0001".
func UserName(i int) string { return fmt.Sprintf("user%04d", i) }

// Site returns the demo site. Every call returns a new, equal configuration,
// normalized and valid.
//
// Every user is in domain-users, which is entitled to the whole of Office
// Apps and Engineering Apps, so every user sees all 400 applications and
// the Office Desktop. engineering (user0001-user0200) also gets Pooled
// Desktops and helpdesk (user0991-user1000) Assigned Desktops; finance
// (user0201-user0300) has no entitlement of its own.
func Site() *site.Config {
	c := &site.Config{
		Settings: site.Settings{Name: "usher demo", Domain: "DEMO"},
		Zones:    []site.Zone{{Name: Zone, Description: "The demo data centre; it holds the site DB.", Primary: true}},
	}

	// Catalogs and machines.
	for _, cat := range []struct {
		name, prefix, description string
		kind                      site.CatalogKind
		count                     int
	}{
		{"rdsh-office", "office-vda", "Multi-session hosts for office applications.", site.MultiSession, 40},
		{"rdsh-engineering", "eng-vda", "Multi-session hosts with GPUs for engineering applications.", site.MultiSession, 10},
		{"vdi-pooled", "pooled-vda", "Single-session Linux desktops; any free one will do.", site.SingleSessionPooled, 5},
		{"vdi-assigned", "assigned-vda", "Single-session workstations, each assigned to its user at first launch.", site.SingleSessionAssigned, 2},
	} {
		c.Catalogs = append(c.Catalogs, site.Catalog{Name: cat.name, Kind: cat.kind, Zone: Zone, Description: cat.description})
		for i := 1; i <= cat.count; i++ {
			name := fmt.Sprintf("%s-%02d", cat.prefix, i)
			m := site.Machine{Name: name, Catalog: cat.name, Address: name + ".demo.internal:3389"}
			if cat.kind.SingleSession() {
				m.MaxSessions = 1
			}
			c.Machines = append(c.Machines, m)
		}
	}

	// Delivery groups: Citrix's defaults except where said.
	office := site.NewDeliveryGroup(OfficeApps, "rdsh-office")
	office.Description = "Office, business and internet applications."
	eng := site.NewDeliveryGroup(EngineeringApps, "rdsh-engineering")
	eng.Description = "CAD, simulation and development tools."
	pooled := site.NewDeliveryGroup(PooledDesktops, "vdi-pooled")
	pooled.Description = "Pooled Linux desktops."
	pooled.Reconnect = site.ReconnectDisconnectedOnly
	assigned := site.NewDeliveryGroup(AssignedDesktops, "vdi-assigned")
	assigned.Description = "Personal workstations."
	c.DeliveryGroups = []site.DeliveryGroup{office, eng, pooled, assigned}

	c.Applications = applications()
	c.Desktops = []site.Resource{
		{Kind: site.Desktop, Name: OfficeDesktop, DisplayName: OfficeDesktop, Description: "A full desktop on the office hosts.", Icon: "builtin:desktop", DeliveryGroups: []string{OfficeApps}},
		{Kind: site.Desktop, Name: PooledDesktop, DisplayName: PooledDesktop, Description: "A fresh Linux desktop of your own; it is reset when you log off.", Icon: "builtin:desktop", DeliveryGroups: []string{PooledDesktops}},
		{Kind: site.Desktop, Name: Workstation, DisplayName: Workstation, Description: "Your personal workstation; it keeps your changes.", Icon: "builtin:desktop", DeliveryGroups: []string{AssignedDesktops}},
	}

	// Users and groups.
	c.Groups = []site.Group{
		{Name: DomainUsers, Description: "Every demo user."},
		{Name: Engineering, Description: "Engineers: user0001 to user0200."},
		{Name: Finance, Description: "Finance staff: user0201 to user0300."},
		{Name: Helpdesk, Description: "Helpdesk staff: user0991 to user1000."},
	}
	for i := 1; i <= Users; i++ {
		u := site.User{Name: UserName(i), DisplayName: fmt.Sprintf("Demo User %04d", i), Groups: []string{DomainUsers}}
		switch {
		case i <= 200:
			u.Groups = append(u.Groups, Engineering)
		case i <= 300:
			u.Groups = append(u.Groups, Finance)
		case i > 990:
			u.Groups = append(u.Groups, Helpdesk)
		}
		c.Users = append(c.Users, u)
	}

	// Entitlements. None lists applications, so none restricts them: every
	// domain user may use all of both application groups. The one with
	// resources limits the Office Desktop to domain users, which here are
	// everyone, to show the form.
	c.Entitlements = []site.Entitlement{
		{Name: "domain-users-office-apps", DeliveryGroup: OfficeApps, Groups: []string{DomainUsers}},
		{Name: "domain-users-engineering-apps", DeliveryGroup: EngineeringApps, Groups: []string{DomainUsers}},
		{Name: "domain-users-office-desktop", DeliveryGroup: OfficeApps, Resources: []string{OfficeDesktop}, Groups: []string{DomainUsers}},
		{Name: "engineering-pooled-desktops", DeliveryGroup: PooledDesktops, Groups: []string{Engineering}},
		{Name: "helpdesk-assigned-desktops", DeliveryGroup: AssignedDesktops, Groups: []string{Helpdesk}},
	}

	// Network-boot targets (usher serve --boot-listen): two kiosks that
	// boot the image "kiosk" of the image store, one through a server-side
	// write cache, one pinned to version 1 with its writes in its RAM.
	pinned := 1
	c.Targets = []site.Target{
		{Name: "kiosk-01", MAC: "52:54:00:00:01:01", Image: "kiosk", Cache: site.CacheServerDisk,
			Description: "Booted from the production version; its writes go to the stream's disk."},
		{Name: "kiosk-02", MAC: "52:54:00:00:01:02", Image: "kiosk", Version: &pinned, Cache: site.CacheRAMOverflow, RAM: "256MiB"},
	}

	c.Normalize()
	return c
}
