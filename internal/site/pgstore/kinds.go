package pgstore

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// Column types of the parameters.
const (
	tText = "text"
	tBool = "boolean"
	tInt  = "bigint"
	tJSON = "jsonb"
	tTime = "timestamptz"
)

func col(name, typ string) column { return column{name: name, typ: typ} }

// nameCol is the name column, and keyCol the folded name of an account.
var (
	nameCol = column{name: "name", typ: tText, key: true}
	keyCol  = column{name: "name_key", typ: tText, key: true}
)

var zones = newSpec(spec[site.Zone]{
	kind:  site.KindZone,
	table: "zones",
	cols:  []column{nameCol, col("description", tText), col("is_primary", tBool), col("primary_fallback", tBool)},
	args:  func(z site.Zone) []any { return []any{z.Name, z.Description, z.Primary, z.PrimaryFallback} },
	sel:   "t.name, t.description, t.is_primary, t.primary_fallback",
	dest:  func(z *site.Zone) []any { return []any{&z.Name, &z.Description, &z.Primary, &z.PrimaryFallback} },
	name:  func(z site.Zone) string { return z.Name },
	referrers: []string{
		referredBy(0, site.KindCatalog, "catalogs", "zone"),
		referredBy(1, site.KindDeliveryGroup, "delivery_groups", "home_zone"),
		referredBy(2, site.KindUser, "users", "home_zone"),
	},
	config: true,
})

var catalogs = newSpec(spec[site.Catalog]{
	kind:  site.KindCatalog,
	table: "catalogs",
	cols:  []column{nameCol, col("kind", tText), col("zone", tText), col("description", tText)},
	args:  func(c site.Catalog) []any { return []any{c.Name, string(c.Kind), c.Zone, c.Description} },
	sel:   "t.name, t.kind, t.zone, t.description",
	dest:  func(c *site.Catalog) []any { return []any{&c.Name, &c.Kind, &c.Zone, &c.Description} },
	name:  func(c site.Catalog) string { return c.Name },
	referrers: []string{
		referredBy(0, site.KindMachine, "machines", "catalog"),
		linkedBy(1, site.KindDeliveryGroup, "delivery_group_catalogs", "delivery_group", "catalog"),
	},
	config: true,
})

var groups = newSpec(spec[site.Group]{
	kind:  site.KindGroup,
	table: "groups",
	cols:  []column{nameCol, keyCol, col("description", tText), col("dn", tText)},
	args:  func(g site.Group) []any { return []any{g.Name, site.FoldName(g.Name), g.Description, g.DN} },
	fold:  true,
	prepare: func(g *site.Group) error {
		g.Name = site.NormalizeName(g.Name)
		return nil
	},
	sel:  "t.name, t.description, t.dn",
	dest: func(g *site.Group) []any { return []any{&g.Name, &g.Description, &g.DN} },
	name: func(g site.Group) string { return g.Name },
	referrers: []string{
		linkedBy(0, site.KindUser, "user_groups", "user_name", "group_name"),
		linkedBy(1, site.KindEntitlement, "entitlement_groups", "entitlement", "group_name"),
	},
	config: true,
})

var users = newSpec(spec[site.User]{
	kind:  site.KindUser,
	table: "users",
	cols: []column{nameCol, keyCol, col("display_name", tText), col("disabled", tBool), col("password_hash", tText),
		col("home_zone", tText)},
	args: func(u site.User) []any {
		return []any{u.Name, site.FoldName(u.Name), u.DisplayName, u.Disabled, u.PasswordHash, nullIfEmpty(u.HomeZone)}
	},
	fold: true,
	prepare: func(u *site.User) error {
		u.Name = site.NormalizeName(u.Name)
		return nil
	},
	sel: "t.name, t.display_name, t.disabled, t.password_hash, coalesce(t.home_zone, '')",
	dest: func(u *site.User) []any {
		return []any{&u.Name, &u.DisplayName, &u.Disabled, &u.PasswordHash, &u.HomeZone}
	},
	name: func(u site.User) string { return u.Name },
	links: []*link[site.User]{
		{table: "user_groups", owner: "user_name", value: "group_name", field: func(u *site.User) *[]string { return &u.Groups }},
	},
	referrers: []string{
		referredBy(0, site.KindMachine, "machines", "assigned_user"),
		linkedBy(1, site.KindEntitlement, "entitlement_users", "entitlement", "user_name"),
	},
	config: true,
})

var machines = newSpec(spec[site.Machine]{
	kind:  site.KindMachine,
	table: "machines",
	cols: []column{nameCol, col("catalog", tText), col("address", tText), col("max_sessions", tInt),
		col("maintenance", tBool), col("assigned_user", tText)},
	args: func(m site.Machine) []any {
		return []any{m.Name, m.Catalog, m.Address, m.MaxSessions, m.Maintenance, nullIfEmpty(m.AssignedUser)}
	},
	sel: "t.name, t.catalog, t.address, t.max_sessions, t.maintenance, coalesce(t.assigned_user, '')",
	dest: func(m *site.Machine) []any {
		return []any{&m.Name, &m.Catalog, &m.Address, &m.MaxSessions, &m.Maintenance, &m.AssignedUser}
	},
	name:    func(m site.Machine) string { return m.Name },
	machine: true,
	config:  true,
})

var deliveryGroups = newSpec(spec[site.DeliveryGroup]{
	kind:  site.KindDeliveryGroup,
	table: "delivery_groups",
	cols: []column{nameCol, col("description", tText), col("reconnect", tText), col("zone_preference", tText),
		col("home_zone", tText), col("load_rules", tJSON),
		col("idle_disconnect_seconds", tInt), col("disconnected_logoff_seconds", tInt), col("max_session_seconds", tInt)},
	args: func(g site.DeliveryGroup) []any {
		rules, _ := json.Marshal(g.LoadRules) // plain data always marshals
		t := g.SessionTimers
		return []any{g.Name, g.Description, string(g.Reconnect), string(g.ZonePreference), nullIfEmpty(g.HomeZone), string(rules),
			toSeconds(t.IdleDisconnect), toSeconds(t.DisconnectedLogoff), toSeconds(t.MaxSession)}
	},
	sel: `t.name, t.description, t.reconnect, t.zone_preference, coalesce(t.home_zone, ''), t.load_rules,
		t.idle_disconnect_seconds, t.disconnected_logoff_seconds, t.max_session_seconds`,
	dest: func(g *site.DeliveryGroup) []any {
		t := &g.SessionTimers
		return []any{&g.Name, &g.Description, &g.Reconnect, &g.ZonePreference, &g.HomeZone, &g.LoadRules,
			seconds{&t.IdleDisconnect}, seconds{&t.DisconnectedLogoff}, seconds{&t.MaxSession}}
	},
	name: func(g site.DeliveryGroup) string { return g.Name },
	links: []*link[site.DeliveryGroup]{
		{table: "delivery_group_catalogs", owner: "delivery_group", value: "catalog", field: func(g *site.DeliveryGroup) *[]string { return &g.Catalogs }},
	},
	referrers: []string{
		"SELECT 0 AS o, r.kind AS k, r.name AS n FROM resource_delivery_groups l JOIN resources r ON r.name = l.resource WHERE l.delivery_group = (SELECT name FROM cur)",
		referredBy(1, site.KindEntitlement, "entitlements", "delivery_group"),
	},
	config: true,
})

var (
	applications = resourceSpec(site.Application)
	desktops     = resourceSpec(site.Desktop)
)

// resourceSpec stores one kind of resource; both kinds share the resources
// table and so one namespace.
func resourceSpec(kind site.ResourceKind) *spec[site.Resource] {
	return newSpec(spec[site.Resource]{
		kind:   kind.ObjectKind(),
		table:  "resources",
		filter: fmt.Sprintf("t.kind = '%s'", kind),
		cols: []column{nameCol, col("kind", tText), col("display_name", tText), col("folder", tText), col("description", tText),
			col("command_line", tText), col("icon", tText), col("disabled", tBool)},
		args: func(r site.Resource) []any {
			return []any{r.Name, string(r.Kind), r.DisplayName, r.Folder, r.Description, r.CommandLine, r.Icon, r.Disabled}
		},
		sel: "t.name, t.kind, t.display_name, t.folder, t.description, t.command_line, t.icon, t.disabled",
		dest: func(r *site.Resource) []any {
			return []any{&r.Name, &r.Kind, &r.DisplayName, &r.Folder, &r.Description, &r.CommandLine, &r.Icon, &r.Disabled}
		},
		name: func(r site.Resource) string { return r.Name },
		// A resource without a kind takes its collection's; one of the other
		// kind does not belong here.
		prepare: func(r *site.Resource) error {
			if r.Kind == "" {
				r.Kind = kind
			}
			if r.Kind != kind {
				return site.Errorf(site.EInvalid, "%s %q: kind is %s", kind.ObjectKind(), r.Name, r.Kind)
			}
			return nil
		},
		links: []*link[site.Resource]{
			{table: "resource_delivery_groups", owner: "resource", value: "delivery_group", field: func(r *site.Resource) *[]string { return &r.DeliveryGroups }},
		},
		referrers: []string{linkedBy(0, site.KindEntitlement, "entitlement_resources", "entitlement", "resource")},
		config:    true,
	})
}

var entitlements = newSpec(spec[site.Entitlement]{
	kind:  site.KindEntitlement,
	table: "entitlements",
	cols:  []column{nameCol, col("delivery_group", tText)},
	args:  func(e site.Entitlement) []any { return []any{e.Name, e.DeliveryGroup} },
	sel:   "t.name, t.delivery_group",
	dest:  func(e *site.Entitlement) []any { return []any{&e.Name, &e.DeliveryGroup} },
	name:  func(e site.Entitlement) string { return e.Name },
	links: []*link[site.Entitlement]{
		{table: "entitlement_resources", owner: "entitlement", value: "resource", field: func(e *site.Entitlement) *[]string { return &e.Resources }},
		{table: "entitlement_users", owner: "entitlement", value: "user_name", field: func(e *site.Entitlement) *[]string { return &e.Users }},
		{table: "entitlement_groups", owner: "entitlement", value: "group_name", field: func(e *site.Entitlement) *[]string { return &e.Groups }},
	},
	config: true,
})

// Admins are accounts, not configuration: they do not move the version,
// and an Update locks the rows it reads.
var admins = newSpec(spec[site.Admin]{
	kind:  site.KindAdmin,
	table: "admins",
	cols:  []column{nameCol, keyCol, col("password_hash", tText), col("created_at", tTime)},
	args: func(a site.Admin) []any {
		return []any{a.Name, site.FoldName(a.Name), a.PasswordHash, timeArg(a.CreatedAt)}
	},
	fold: true,
	prepare: func(a *site.Admin) error {
		a.Name = site.NormalizeName(a.Name)
		return nil
	},
	sel:  "t.name, t.password_hash, t.created_at",
	dest: func(a *site.Admin) []any { return []any{&a.Name, &a.PasswordHash, timeDest{&a.CreatedAt}} },
	name: func(a site.Admin) string { return a.Name },
})

// Brokers are runtime state: they do not move the version, and an
// Update locks the rows it reads.
var brokers = newSpec(spec[site.BrokerRecord]{
	kind:  site.KindBroker,
	table: "brokers",
	cols:  []column{nameCol, col("zone", tText), col("address", tText), col("instance", tText), col("started_at", tTime), col("last_seen", tTime)},
	args: func(b site.BrokerRecord) []any {
		return []any{b.Name, b.Zone, b.Address, b.Instance, timeArg(b.StartedAt), timeArg(b.LastSeen)}
	},
	sel: "t.name, t.zone, t.address, t.instance, t.started_at, t.last_seen",
	dest: func(b *site.BrokerRecord) []any {
		return []any{&b.Name, &b.Zone, &b.Address, &b.Instance, timeDest{&b.StartedAt}, timeDest{&b.LastSeen}}
	},
	name: func(b site.BrokerRecord) string { return b.Name },
})

// toSeconds is a duration as stored: whole seconds.
func toSeconds(d site.Duration) int64 { return int64(d.Std() / time.Second) }

// seconds scans whole seconds into a duration.
type seconds struct{ d *site.Duration }

func (s seconds) Scan(src any) error {
	n, ok := src.(int64)
	if !ok {
		return fmt.Errorf("scan seconds: got %T", src)
	}
	*s.d = site.Duration(time.Duration(n) * time.Second)
	return nil
}
