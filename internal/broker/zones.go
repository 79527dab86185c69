package broker

import (
	"slices"

	"github.com/usher-vdi/usher/internal/site"
)

// zoneOf returns the zone of a machine, "" when the snapshot has none.
func (s *Snapshot) zoneOf(machine string) string {
	m, ok := s.machines[machine]
	if !ok {
		return ""
	}
	if c, ok := s.catalogs[m.Catalog]; ok {
		return c.Zone
	}
	return ""
}

// zone returns a zone of the site. Sites have few zones (Citrix advises at
// most 50), so a scan does.
func (s *Snapshot) zone(name string) (site.Zone, bool) {
	i := slices.IndexFunc(s.config.Zones, func(z site.Zone) bool { return z.Name == name })
	if i < 0 {
		return site.Zone{}, false
	}
	return s.config.Zones[i], true
}

// zoneOrder returns the zones whose machines a launch of the delivery
// group by user tries, in order, before any other zone, and whether it
// must stop there (a mandatory preference). location is the user's
// location: the zone of the broker taking the launch. A site of one zone
// has no order.
//
// The group's preference says which zone comes first; the rest follow as
// Citrix orders them: the application's home zone (the group's), the
// user's home zone, the user's location. A mandatory preference whose zone
// is unknown (a user without a home zone) falls back to this order.
func zoneOrder(s *Snapshot, dg *site.DeliveryGroup, user, location string) (order []string, only bool) {
	if len(s.config.Zones) < 2 {
		return nil, false
	}
	var userHome string
	if u, ok := s.User(user); ok {
		userHome = u.HomeZone
	}
	var first string
	switch dg.ZonePreference {
	case site.ZoneApplicationHome, site.ZoneApplicationHomeOnly:
		first = dg.HomeZone
	case site.ZoneUserHome, site.ZoneUserHomeOnly:
		first = userHome
	default:
		first = location
	}
	if first != "" && dg.ZonePreference.Mandatory() {
		return []string{first}, true
	}
	for _, z := range []string{first, dg.HomeZone, userHome, location} {
		if z != "" && !slices.Contains(order, z) {
			order = append(order, z)
		}
	}
	return order, false
}

// admitVDA checks that this broker may serve the VDA of a machine: a
// broker without OwnZoneVDAs serves every machine; a broker of a zone serves
// its zone's machines, and a broker of the primary zone also those of a
// satellite zone that falls back to the primary (site.Zone.PrimaryFallback).
func (b *Broker) admitVDA(s *Snapshot, machine string) error {
	mine := b.cfg.Zone
	theirs := s.zoneOf(machine)
	if !b.cfg.OwnZoneVDAs || mine == "" || theirs == "" || theirs == mine {
		return nil
	}
	z, _ := s.zone(theirs)
	if me, ok := s.zone(mine); ok && me.Primary && z.PrimaryFallback {
		return nil
	}
	return site.Errorf(site.EForbidden, "machine %q is in zone %q and this broker serves zone %q: "+
		"its VDA registers with a broker of zone %q (or with the primary zone's brokers when zone %q has primary_fallback)",
		machine, theirs, mine, theirs, theirs)
}
