package broker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/pgtest"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/pgstore"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// zonedSite has three zones, hq (primary), branch (whose VDAs may fall
// back to hq) and far, with two machines each (one in far) of two
// sessions, all in delivery group Apps; users b01.. have branch as their
// home zone, users n01.. none.
func zonedSite(pref site.ZonePreference, home string) *site.Config {
	c := &site.Config{Settings: site.Settings{Name: "t", Domain: "T"}}
	c.Zones = []site.Zone{{Name: "hq", Primary: true}, {Name: "branch", PrimaryFallback: true}, {Name: "far"}}
	for _, z := range []string{"hq", "branch", "far"} {
		c.Catalogs = append(c.Catalogs, site.Catalog{Name: z + "-cat", Kind: site.MultiSession, Zone: z})
		n := 2
		if z == "far" {
			n = 1
		}
		for i := 1; i <= n; i++ {
			name := fmt.Sprintf("%s-%d", z, i)
			c.Machines = append(c.Machines, site.Machine{Name: name, Catalog: z + "-cat", Address: name + ".test:3389"})
		}
	}
	apps := site.NewDeliveryGroup("Apps", "hq-cat", "branch-cat", "far-cat")
	apps.LoadRules.MaxSessions.Limit = 2
	apps.LoadRules.ConcurrentLogons.Enabled = false
	apps.ZonePreference, apps.HomeZone = pref, home
	c.DeliveryGroups = []site.DeliveryGroup{apps}
	c.Applications = []site.Resource{{Kind: site.Application, Name: "calc", DisplayName: "Calculator", CommandLine: "/usr/bin/calc", DeliveryGroups: []string{"Apps"}}}
	c.Groups = []site.Group{{Name: "all"}}
	for i := 1; i <= 9; i++ {
		c.Users = append(c.Users, site.User{Name: fmt.Sprintf("b%02d", i), HomeZone: "branch", Groups: []string{"all"}},
			site.User{Name: fmt.Sprintf("n%02d", i), Groups: []string{"all"}})
	}
	c.Entitlements = []site.Entitlement{{Name: "apps", DeliveryGroup: "Apps", Groups: []string{"all"}}}
	return c
}

// TestZonePreference: launches go to the zone the delivery group's
// preference names first, then along Citrix's order (application home,
// user home, user location), and a mandatory preference refuses rather
// than spill over.
func TestZonePreference(t *testing.T) {
	for _, tc := range []struct {
		pref  site.ZonePreference
		home  string
		users []string
		// want is the zone of each launch in turn, "" for no_capacity.
		want []string
	}{
		// The broker is in hq: hq's four seats first, then any zone.
		{site.ZoneUserLocation, "", []string{"n01", "n02", "n03", "n04", "n05", "b01"}, []string{"hq", "hq", "hq", "hq", "*", "*"}},
		// Branch users go home; users without a home zone stay in hq.
		{site.ZoneUserHome, "", []string{"b01", "n01", "b02", "b03", "b04", "b05"}, []string{"branch", "hq", "branch", "branch", "branch", "hq"}},
		{site.ZoneUserHomeOnly, "", []string{"b01", "b02", "b03", "b04", "b05", "n01"}, []string{"branch", "branch", "branch", "branch", "", "hq"}},
		// far has two seats; then the user's home, then the location.
		{site.ZoneApplicationHome, "far", []string{"b01", "n01", "b02", "n02"}, []string{"far", "far", "branch", "hq"}},
		{site.ZoneApplicationHomeOnly, "far", []string{"b01", "n01", "b02"}, []string{"far", "far", ""}},
	} {
		t.Run(string(tc.pref), func(t *testing.T) {
			s := sitetest.New(t, sitetest.Options{Config: zonedSite(tc.pref, tc.home), Registered: true,
				Broker: func(c *broker.Config) { c.Zone = "hq" }})
			var got []string
			for i, user := range tc.users {
				l, err := s.Broker.Launch(context.Background(), broker.LaunchRequest{User: user, Resource: "calc"})
				switch {
				case err != nil && site.ErrorCode(err) == site.ENoCapacity:
					got = append(got, "")
				case err != nil:
					t.Fatalf("launch %d (%s): %v", i, user, err)
				case tc.want[i] == "*":
					got = append(got, "*") // any zone with room
				default:
					got = append(got, strings.SplitN(l.Session.Machine, "-", 2)[0])
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("zones of the launches %v: %v, want %v", tc.users, got, tc.want)
			}
		})
	}
}

// TestVDAsRegisterInTheirZone: a broker of a zone takes its zone's VDAs,
// a primary-zone broker also those of a zone that falls back to the
// primary, and refuses the rest with a reason; a broker started without
// a zone of its own takes every zone's.
func TestVDAsRegisterInTheirZone(t *testing.T) {
	cfg := zonedSite(site.ZoneUserLocation, "")
	index := map[string]int{}
	for i, m := range cfg.Machines {
		index[m.Name] = i
	}
	for _, tc := range []struct {
		zone    string
		own     bool
		refused []string // in name order
	}{
		{"hq", true, []string{"far-1"}},
		{"branch", true, []string{"far-1", "hq-1", "hq-2"}},
		{"far", true, []string{"branch-1", "branch-2", "hq-1", "hq-2"}},
		{"hq", false, nil},
	} {
		t.Run(fmt.Sprintf("%s/own=%v", tc.zone, tc.own), func(t *testing.T) {
			s := sitetest.New(t, sitetest.Options{Config: cfg,
				Broker: func(c *broker.Config) { c.Zone, c.OwnZoneVDAs = tc.zone, tc.own }})
			var refused []string
			for _, m := range cfg.Machines {
				err := s.Broker.Register(context.Background(), sitetest.Registration(index[m.Name], m.Name))
				if err == nil {
					continue
				}
				if site.ErrorCode(err) != site.EForbidden || !strings.Contains(err.Error(), "registers with a broker of zone") {
					t.Errorf("%s: %v, want a forbidden error that names the zone to use", m.Name, err)
				}
				refused = append(refused, m.Name)
			}
			if fmt.Sprint(refused) != fmt.Sprint(tc.refused) {
				t.Errorf("refused %v, want %v", refused, tc.refused)
			}
		})
	}
}

// TestPreferredZoneRegisteredElsewhere: a machine of the user's home zone
// registers through another broker (its zone's) after this broker read
// the statuses; a launch through this broker, which holds the home zone
// empty, reads them again before seating the user in a zone they like
// less, and lands at home. Without that read the session went to hq, the
// broker's own zone, until the next status sync.
func TestPreferredZoneRegisteredElsewhere(t *testing.T) {
	cfg := zonedSite(site.ZoneUserHome, "")
	dsn := pgtest.DSN(t)
	ctx := t.Context()
	open := func(zone string, apply bool) *broker.Broker {
		store, err := pgstore.Open(ctx, dsn, pgstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		if apply {
			if err := store.Update(ctx, func(tx site.Tx) error { _, err := site.ApplyConfig(ctx, tx, cfg, false); return err }); err != nil {
				t.Fatal(err)
			}
		}
		// No Run: the periodic sync never comes, so only the launch's own
		// read can learn of the branch's machines.
		b, err := broker.New(ctx, broker.Config{Store: store, Control: sitetest.NewControl(), AllowAddressChange: true, MaxConcurrent: -1, Zone: zone})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	hq := open("hq", true)
	branch := open("branch", false)
	for i, m := range cfg.Machines {
		via := hq
		if strings.HasPrefix(m.Name, "branch-") {
			via = branch
		}
		if err := via.Register(ctx, sitetest.Registration(i, m.Name)); err != nil {
			t.Fatalf("register %s: %v", m.Name, err)
		}
	}
	l, err := hq.Launch(ctx, broker.LaunchRequest{User: "b01", Resource: "calc"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(l.Session.Machine, "branch-") {
		t.Errorf("b01 (home zone branch) launched through hq's broker landed on %s; want a branch machine", l.Session.Machine)
	}
	// A user with no home zone stays in the broker's zone.
	if l, err := hq.Launch(ctx, broker.LaunchRequest{User: "n01", Resource: "calc"}); err != nil || !strings.HasPrefix(l.Session.Machine, "hq-") {
		t.Errorf("n01 through hq: %v, %v; want an hq machine", l, err)
	}
}
