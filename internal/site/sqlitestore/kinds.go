package sqlitestore

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// firstReferrer builds a query for the first of several kinds of referrer
// of ?1. Each part selects (kind, name) and names its rows' kind in SQL.
func firstReferrer(parts ...string) string {
	var b strings.Builder
	b.WriteString("SELECT k, n FROM (")
	for i, p := range parts {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		fmt.Fprintf(&b, "SELECT %d AS o, %s", i, p)
	}
	b.WriteString(") ORDER BY o, n LIMIT 1")
	return b.String()
}

// referredBy is a part of firstReferrer: rows of table whose column names ?1.
func referredBy(kind site.Kind, table, column string) string {
	return fmt.Sprintf("'%s' AS k, name AS n FROM %s WHERE %s = ?1", kind, table, column)
}

// linkedBy is a part of firstReferrer: owners in a link table whose value is ?1.
func linkedBy(kind site.Kind, table, owner, value string) string {
	return fmt.Sprintf("'%s' AS k, %s AS n FROM %s WHERE %s = ?1", kind, owner, table, value)
}

var zones = newSpec(spec[site.Zone]{
	kind:  site.KindZone,
	table: "zones",
	cols:  []string{"name", "description", "is_primary", "primary_fallback"},
	args:  func(z site.Zone) []any { return []any{z.Name, z.Description, z.Primary, z.PrimaryFallback} },
	sel:   "name, description, is_primary, primary_fallback",
	scan: func(r scanner) (z site.Zone, err error) {
		err = r.Scan(&z.Name, &z.Description, &z.Primary, &z.PrimaryFallback)
		return z, err
	},
	name: func(z site.Zone) string { return z.Name },
	referrers: firstReferrer(
		referredBy(site.KindCatalog, "catalogs", "zone"),
		referredBy(site.KindDeliveryGroup, "delivery_groups", "home_zone"),
		referredBy(site.KindUser, "users", "home_zone"),
	),
	config: true,
})

var catalogs = newSpec(spec[site.Catalog]{
	kind:  site.KindCatalog,
	table: "catalogs",
	cols:  []string{"name", "kind", "zone", "description"},
	args:  func(c site.Catalog) []any { return []any{c.Name, string(c.Kind), c.Zone, c.Description} },
	sel:   "name, kind, zone, description",
	scan: func(r scanner) (c site.Catalog, err error) {
		err = r.Scan(&c.Name, &c.Kind, &c.Zone, &c.Description)
		return c, err
	},
	name: func(c site.Catalog) string { return c.Name },
	referrers: firstReferrer(
		referredBy(site.KindMachine, "machines", "catalog"),
		linkedBy(site.KindDeliveryGroup, "delivery_group_catalogs", "delivery_group", "catalog"),
	),
	config: true,
})

var groups = newSpec(spec[site.Group]{
	kind:  site.KindGroup,
	table: "groups",
	cols:  []string{"name", "description", "name_key", "dn"},
	args:  func(g site.Group) []any { return []any{g.Name, g.Description, site.FoldName(g.Name), g.DN} },
	fold:  true,
	prepare: func(g *site.Group) error {
		g.Name = site.NormalizeName(g.Name)
		return nil
	},
	sel: "name, description, dn",
	scan: func(r scanner) (g site.Group, err error) {
		err = r.Scan(&g.Name, &g.Description, &g.DN)
		return g, err
	},
	name: func(g site.Group) string { return g.Name },
	referrers: firstReferrer(
		linkedBy(site.KindUser, "user_groups", "user_name", "group_name"),
		linkedBy(site.KindEntitlement, "entitlement_groups", "entitlement", "group_name"),
	),
	config: true,
})

var users = newSpec(spec[site.User]{
	kind:  site.KindUser,
	table: "users",
	cols:  []string{"name", "display_name", "disabled", "password_hash", "name_key", "home_zone"},
	args: func(u site.User) []any {
		return []any{u.Name, u.DisplayName, u.Disabled, u.PasswordHash, site.FoldName(u.Name), nullIfEmpty(u.HomeZone)}
	},
	fold: true,
	prepare: func(u *site.User) error {
		u.Name = site.NormalizeName(u.Name)
		return nil
	},
	sel: "name, display_name, disabled, password_hash, coalesce(home_zone, '')",
	scan: func(r scanner) (u site.User, err error) {
		err = r.Scan(&u.Name, &u.DisplayName, &u.Disabled, &u.PasswordHash, &u.HomeZone)
		return u, err
	},
	name: func(u site.User) string { return u.Name },
	links: []*link[site.User]{
		{table: "user_groups", owner: "user_name", value: "group_name", field: func(u *site.User) *[]string { return &u.Groups }},
	},
	referrers: firstReferrer(
		referredBy(site.KindMachine, "machines", "assigned_user"),
		linkedBy(site.KindEntitlement, "entitlement_users", "entitlement", "user_name"),
	),
	config: true,
})

var machines = newSpec(spec[site.Machine]{
	kind:  site.KindMachine,
	table: "machines",
	cols:  []string{"name", "catalog", "address", "max_sessions", "maintenance", "assigned_user"},
	args: func(m site.Machine) []any {
		return []any{m.Name, m.Catalog, m.Address, m.MaxSessions, m.Maintenance, nullIfEmpty(m.AssignedUser)}
	},
	sel: "name, catalog, address, max_sessions, maintenance, coalesce(assigned_user, '')",
	scan: func(r scanner) (m site.Machine, err error) {
		err = r.Scan(&m.Name, &m.Catalog, &m.Address, &m.MaxSessions, &m.Maintenance, &m.AssignedUser)
		return m, err
	},
	name:   func(m site.Machine) string { return m.Name },
	live:   `SELECT count(*) FROM sessions WHERE machine = ?1 AND state <> 'logged-off'`,
	config: true,
})

var deliveryGroups = newSpec(spec[site.DeliveryGroup]{
	kind:  site.KindDeliveryGroup,
	table: "delivery_groups",
	cols: []string{"name", "description", "reconnect", "zone_preference", "home_zone",
		"max_sessions_enabled", "max_sessions_limit", "cpu_enabled", "cpu_full_percent",
		"memory_enabled", "memory_full_percent", "memory_base_load_mb",
		"logons_enabled", "logons_tolerance", "logons_hard",
		"idle_disconnect_seconds", "disconnected_logoff_seconds", "max_session_seconds"},
	args: func(g site.DeliveryGroup) []any {
		r, t := g.LoadRules, g.SessionTimers
		return []any{g.Name, g.Description, string(g.Reconnect), string(g.ZonePreference), nullIfEmpty(g.HomeZone),
			r.MaxSessions.Enabled, r.MaxSessions.Limit, r.CPU.Enabled, r.CPU.FullPercent,
			r.Memory.Enabled, r.Memory.FullPercent, r.Memory.BaseLoadMB,
			r.ConcurrentLogons.Enabled, r.ConcurrentLogons.Tolerance, r.ConcurrentLogons.Hard,
			toSeconds(t.IdleDisconnect), toSeconds(t.DisconnectedLogoff), toSeconds(t.MaxSession)}
	},
	sel: `name, description, reconnect, zone_preference, coalesce(home_zone, ''),
		max_sessions_enabled, max_sessions_limit, cpu_enabled, cpu_full_percent,
		memory_enabled, memory_full_percent, memory_base_load_mb,
		logons_enabled, logons_tolerance, logons_hard,
		idle_disconnect_seconds, disconnected_logoff_seconds, max_session_seconds`,
	scan: func(s scanner) (g site.DeliveryGroup, err error) {
		r := &g.LoadRules
		var idle, disc, maxs int64
		err = s.Scan(&g.Name, &g.Description, &g.Reconnect, &g.ZonePreference, &g.HomeZone,
			&r.MaxSessions.Enabled, &r.MaxSessions.Limit, &r.CPU.Enabled, &r.CPU.FullPercent,
			&r.Memory.Enabled, &r.Memory.FullPercent, &r.Memory.BaseLoadMB,
			&r.ConcurrentLogons.Enabled, &r.ConcurrentLogons.Tolerance, &r.ConcurrentLogons.Hard,
			&idle, &disc, &maxs)
		g.SessionTimers = site.SessionTimers{IdleDisconnect: fromSeconds(idle), DisconnectedLogoff: fromSeconds(disc), MaxSession: fromSeconds(maxs)}
		return g, err
	},
	name: func(g site.DeliveryGroup) string { return g.Name },
	links: []*link[site.DeliveryGroup]{
		{table: "delivery_group_catalogs", owner: "delivery_group", value: "catalog", field: func(g *site.DeliveryGroup) *[]string { return &g.Catalogs }},
	},
	referrers: firstReferrer(
		"r.kind AS k, r.name AS n FROM resource_delivery_groups l JOIN resources r ON r.name = l.resource WHERE l.delivery_group = ?1",
		referredBy(site.KindEntitlement, "entitlements", "delivery_group"),
	),
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
		filter: fmt.Sprintf("kind = '%s'", kind),
		cols:   []string{"name", "kind", "display_name", "folder", "description", "command_line", "icon", "disabled"},
		args: func(r site.Resource) []any {
			return []any{r.Name, string(r.Kind), r.DisplayName, r.Folder, r.Description, r.CommandLine, r.Icon, r.Disabled}
		},
		sel: "name, kind, display_name, folder, description, command_line, icon, disabled",
		scan: func(s scanner) (r site.Resource, err error) {
			err = s.Scan(&r.Name, &r.Kind, &r.DisplayName, &r.Folder, &r.Description, &r.CommandLine, &r.Icon, &r.Disabled)
			return r, err
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
		referrers: firstReferrer(linkedBy(site.KindEntitlement, "entitlement_resources", "entitlement", "resource")),
		config:    true,
	})
}

var entitlements = newSpec(spec[site.Entitlement]{
	kind:  site.KindEntitlement,
	table: "entitlements",
	cols:  []string{"name", "delivery_group"},
	args:  func(e site.Entitlement) []any { return []any{e.Name, e.DeliveryGroup} },
	sel:   "name, delivery_group",
	scan: func(r scanner) (e site.Entitlement, err error) {
		err = r.Scan(&e.Name, &e.DeliveryGroup)
		return e, err
	},
	name: func(e site.Entitlement) string { return e.Name },
	links: []*link[site.Entitlement]{
		{table: "entitlement_resources", owner: "entitlement", value: "resource", field: func(e *site.Entitlement) *[]string { return &e.Resources }},
		{table: "entitlement_users", owner: "entitlement", value: "user_name", field: func(e *site.Entitlement) *[]string { return &e.Users }},
		{table: "entitlement_groups", owner: "entitlement", value: "group_name", field: func(e *site.Entitlement) *[]string { return &e.Groups }},
	},
	config: true,
})

// Admins are accounts, not configuration: they do not move the version.
var admins = newSpec(spec[site.Admin]{
	kind:  site.KindAdmin,
	table: "admins",
	cols:  []string{"name", "password_hash", "created_at", "name_key"},
	args: func(a site.Admin) []any {
		return []any{a.Name, a.PasswordHash, timeArg(a.CreatedAt), site.FoldName(a.Name)}
	},
	fold: true,
	prepare: func(a *site.Admin) error {
		a.Name = site.NormalizeName(a.Name)
		return nil
	},
	sel: "name, password_hash, coalesce(created_at, '')",
	scan: func(r scanner) (a site.Admin, err error) {
		var created string
		if err = r.Scan(&a.Name, &a.PasswordHash, &created); err != nil {
			return a, err
		}
		a.CreatedAt, err = parseTime(created)
		return a, err
	},
	name: func(a site.Admin) string { return a.Name },
})

// Brokers are runtime state: they do not move the version.
var brokers = newSpec(spec[site.BrokerRecord]{
	kind:  site.KindBroker,
	table: "brokers",
	cols:  []string{"name", "zone", "address", "instance", "started_at", "last_seen"},
	args: func(b site.BrokerRecord) []any {
		return []any{b.Name, b.Zone, b.Address, b.Instance, timeArg(b.StartedAt), timeArg(b.LastSeen)}
	},
	sel: "name, zone, address, instance, coalesce(started_at, ''), coalesce(last_seen, '')",
	scan: func(r scanner) (b site.BrokerRecord, err error) {
		var started, seen string
		if err = r.Scan(&b.Name, &b.Zone, &b.Address, &b.Instance, &started, &seen); err != nil {
			return b, err
		}
		var err2 error
		b.StartedAt, err = parseTime(started)
		b.LastSeen, err2 = parseTime(seen)
		return b, errors.Join(err, err2)
	},
	name: func(b site.BrokerRecord) string { return b.Name },
})

// toSeconds is a duration as stored: whole seconds; fromSeconds reads it.
func toSeconds(d site.Duration) int64 { return int64(d.Std() / time.Second) }

func fromSeconds(n int64) site.Duration { return site.Duration(time.Duration(n) * time.Second) }
