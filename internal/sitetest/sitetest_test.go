package sitetest_test

import (
	"context"
	"testing"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitetest"
)

func registered(t *testing.T, s *sitetest.Site) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	err := s.Store.View(ctx, func(tx site.Tx) error {
		for _, m := range s.Config.Machines {
			st, err := tx.MachineStatus(ctx, m.Name)
			if err != nil {
				return err
			}
			if st.Registration == site.Registered {
				n++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDemoSite(t *testing.T) {
	ctx := context.Background()
	for _, reg := range []bool{false, true} {
		s := sitetest.New(t, sitetest.Options{Registered: reg})
		want := 0
		if reg {
			want = len(s.Config.Machines)
		}
		if got := registered(t, s); got != want || len(s.Config.Machines) != 57 {
			t.Fatalf("Registered %v: %d of %d machines registered, want %d", reg, got, len(s.Config.Machines), want)
		}
		if _, err := s.Broker.Authenticate(ctx, "user0001", sitetest.UserPassword, ""); err != nil {
			t.Fatalf("user0001 with the test password: %v", err)
		}
		var admin site.Admin
		err := s.Store.View(ctx, func(tx site.Tx) (err error) { admin, err = tx.Admins().Get(ctx, sitetest.Admin); return err })
		if ok, _ := auth.VerifyPassword(admin.PasswordHash, sitetest.AdminPassword); err != nil || !ok {
			t.Fatalf("admin account: %v, password ok %v", err, ok)
		}
	}
}

// TestCopiesAreIndependent checks that two tests' sites share nothing: a
// change to one is not seen by the other.
func TestCopiesAreIndependent(t *testing.T) {
	ctx := context.Background()
	a := sitetest.New(t, sitetest.Options{NoBroker: true})
	b := sitetest.New(t, sitetest.Options{NoBroker: true})
	a.Config.Users[0].Name = "changed"
	err := a.Store.Update(ctx, func(tx site.Tx) error { return tx.Users().Delete(ctx, "user0001") })
	if err != nil {
		t.Fatal(err)
	}
	if b.Config.Users[0].Name != "user0001" {
		t.Fatal("the configurations are shared")
	}
	err = b.Store.View(ctx, func(tx site.Tx) error { _, err := tx.Users().Get(ctx, "user0001"); return err })
	if err != nil {
		t.Fatalf("a deletion in one site reached the other: %v", err)
	}
}

func TestControlRefuses(t *testing.T) {
	ctx := context.Background()
	cfg := &site.Config{Settings: site.Settings{Name: "t", Domain: "T"}, Zones: []site.Zone{{Name: "z", Primary: true}},
		Catalogs: []site.Catalog{{Name: "c", Kind: site.MultiSession, Zone: "z"}},
		Machines: []site.Machine{{Name: "m1", Catalog: "c", Address: "m1:3389"}, {Name: "m2", Catalog: "c", Address: "m2:3389"}},
		Users:    []site.User{{Name: "u1", Groups: []string{"g"}}}, Groups: []site.Group{{Name: "g"}},
		Applications: []site.Resource{{Kind: site.Application, Name: "app", DisplayName: "App", CommandLine: "/app", DeliveryGroups: []string{"dg"}}},
		Entitlements: []site.Entitlement{{Name: "e", DeliveryGroup: "dg", Groups: []string{"g"}}},
	}
	cfg.DeliveryGroups = []site.DeliveryGroup{site.NewDeliveryGroup("dg", "c")}
	s := sitetest.New(t, sitetest.Options{Config: cfg, Registered: true})
	s.Control.Refuse("m1")
	l, err := s.Broker.Launch(ctx, broker.LaunchRequest{User: "u1", Resource: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if l.Session.Machine != "m2" || len(s.Control.Prepared("m1")) != 0 || len(s.Control.Prepared("m2")) != 1 {
		t.Fatalf("launched on %s; prepares m1 %d, m2 %d", l.Session.Machine, len(s.Control.Prepared("m1")), len(s.Control.Prepared("m2")))
	}
	if last, ok := s.Control.LastPrepared(); !ok || last.SessionID != l.Session.ID {
		t.Fatalf("last prepare %+v", last)
	}
}
