package storetest

import (
	"context"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
)

// put creates obj, or updates it when upd is set.
func put[T any](ctx context.Context, c site.Collection[T], obj T, upd bool) error {
	if upd {
		return c.Update(ctx, obj)
	}
	return c.Create(ctx, obj)
}

// modify reads the named object, lets fn change it and updates it.
func modify[T any](ctx context.Context, c site.Collection[T], name string, fn func(*T)) error {
	obj, err := c.Get(ctx, name)
	if err != nil {
		return err
	}
	fn(&obj)
	return c.Update(ctx, obj)
}

func testReferences(t *testing.T, open func(*testing.T) site.Store) {
	t.Run("MissingReferenceIsInvalidAndNamed", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		app := func(name string, dgs ...string) site.Resource {
			return site.Resource{Kind: site.Application, Name: name, DisplayName: name, CommandLine: "x.exe", DeliveryGroups: dgs}
		}
		cases := []struct {
			name     string
			kind     site.Kind
			existing string // an object of base() that Update tries to break
			ref      site.Ref
			write    func(ctx context.Context, tx site.Tx, name string, upd bool) error
		}{
			{"CatalogZone", site.KindCatalog, "spare-cat", site.Ref{Field: "zone", Kind: site.KindZone, Name: "nowhere"},
				func(ctx context.Context, tx site.Tx, name string, upd bool) error {
					return put(ctx, tx.Catalogs(), site.Catalog{Name: name, Kind: site.MultiSession, Zone: "nowhere"}, upd)
				}},
			{"MachineCatalog", site.KindMachine, "app1", site.Ref{Field: "catalog", Kind: site.KindCatalog, Name: "nowhere"},
				func(ctx context.Context, tx site.Tx, name string, upd bool) error {
					return put(ctx, tx.Machines(), site.Machine{Name: name, Catalog: "nowhere", Address: "h:1"}, upd)
				}},
			{"MachineAssignedUser", site.KindMachine, "vdi1", site.Ref{Field: "assigned_user", Kind: site.KindUser, Name: "nobody"},
				func(ctx context.Context, tx site.Tx, name string, upd bool) error {
					return put(ctx, tx.Machines(), site.Machine{Name: name, Catalog: "vdi-cat", Address: "h:1", AssignedUser: "nobody"}, upd)
				}},
			{"UserHomeZone", site.KindUser, "alice", site.Ref{Field: "home_zone", Kind: site.KindZone, Name: "nowhere"},
				func(ctx context.Context, tx site.Tx, name string, upd bool) error {
					return put(ctx, tx.Users(), site.User{Name: name, HomeZone: "nowhere"}, upd)
				}},
			{"UserGroups", site.KindUser, "alice", site.Ref{Field: "groups", Kind: site.KindGroup, Name: "nowhere"},
				func(ctx context.Context, tx site.Tx, name string, upd bool) error {
					return put(ctx, tx.Users(), site.User{Name: name, Groups: []string{"staff", "nowhere"}}, upd)
				}},
			{"DeliveryGroupCatalogs", site.KindDeliveryGroup, "apps", site.Ref{Field: "catalogs", Kind: site.KindCatalog, Name: "nowhere"},
				func(ctx context.Context, tx site.Tx, name string, upd bool) error {
					return put(ctx, tx.DeliveryGroups(), site.NewDeliveryGroup(name, "apps-cat", "nowhere"), upd)
				}},
			{"DeliveryGroupHomeZone", site.KindDeliveryGroup, "vdi", site.Ref{Field: "home_zone", Kind: site.KindZone, Name: "nowhere"},
				func(ctx context.Context, tx site.Tx, name string, upd bool) error {
					g := site.NewDeliveryGroup(name)
					g.ZonePreference, g.HomeZone = site.ZoneApplicationHome, "nowhere"
					return put(ctx, tx.DeliveryGroups(), g, upd)
				}},
			{"ApplicationDeliveryGroups", site.KindApplication, "notepad", site.Ref{Field: "delivery_groups", Kind: site.KindDeliveryGroup, Name: "nowhere"},
				func(ctx context.Context, tx site.Tx, name string, upd bool) error {
					return put(ctx, tx.Applications(), app(name, "apps", "nowhere"), upd)
				}},
			{"DesktopDeliveryGroups", site.KindDesktop, "vdi-desktop", site.Ref{Field: "delivery_groups", Kind: site.KindDeliveryGroup, Name: "nowhere"},
				func(ctx context.Context, tx site.Tx, name string, upd bool) error {
					d := site.Resource{Kind: site.Desktop, Name: name, DisplayName: name, DeliveryGroups: []string{"nowhere"}}
					return put(ctx, tx.Desktops(), d, upd)
				}},
			{"EntitlementDeliveryGroup", site.KindEntitlement, "apps-staff", site.Ref{Field: "delivery_group", Kind: site.KindDeliveryGroup, Name: "nowhere"},
				func(ctx context.Context, tx site.Tx, name string, upd bool) error {
					return put(ctx, tx.Entitlements(), site.Entitlement{Name: name, DeliveryGroup: "nowhere", Users: []string{"alice"}}, upd)
				}},
			{"EntitlementResources", site.KindEntitlement, "ledger-auditors", site.Ref{Field: "resources", Kind: site.KindApplication, Name: "nowhere"},
				func(ctx context.Context, tx site.Tx, name string, upd bool) error {
					e := site.Entitlement{Name: name, DeliveryGroup: "apps", Resources: []string{"notepad", "nowhere"}, Users: []string{"alice"}}
					return put(ctx, tx.Entitlements(), e, upd)
				}},
			{"EntitlementUsers", site.KindEntitlement, "apps-staff", site.Ref{Field: "users", Kind: site.KindUser, Name: "nobody"},
				func(ctx context.Context, tx site.Tx, name string, upd bool) error {
					return put(ctx, tx.Entitlements(), site.Entitlement{Name: name, DeliveryGroup: "apps", Users: []string{"alice", "nobody"}}, upd)
				}},
			{"EntitlementGroups", site.KindEntitlement, "apps-staff", site.Ref{Field: "groups", Kind: site.KindGroup, Name: "nowhere"},
				func(ctx context.Context, tx site.Tx, name string, upd bool) error {
					return put(ctx, tx.Entitlements(), site.Entitlement{Name: name, DeliveryGroup: "apps", Groups: []string{"nowhere"}}, upd)
				}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				for _, upd := range []bool{false, true} {
					name := "new-object"
					if upd {
						name = c.existing
					}
					err := try(t, s, func(ctx context.Context, tx site.Tx) error { return c.write(ctx, tx, name, upd) })
					wantCode(t, err, site.EInvalid)
					if got, want := site.ErrorMessage(err), site.MissingRef(c.kind, name, c.ref).Message; got != want {
						t.Fatalf("update=%v: error message %q, want %q", upd, got, want)
					}
				}
			})
		}
		t.Run("NothingWasWritten", func(t *testing.T) {
			want := base()
			want.Normalize()
			view(t, s, func(ctx context.Context, tx site.Tx) error {
				got, err := site.LoadConfig(ctx, tx)
				if err != nil {
					t.Fatal(err)
				}
				diffConfig(t, got, want)
				return nil
			})
		})
	})

	t.Run("EntitlementResourcesMayBeApplicationsOrDesktops", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		e := site.Entitlement{Name: "mixed", DeliveryGroup: "apps", Resources: []string{"vdi-desktop", "notepad"}, Users: []string{"alice"}}
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Entitlements().Create(ctx, e) })
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			got, err := tx.Entitlements().Get(ctx, "mixed")
			if err != nil || !same(got, e) {
				t.Fatalf("get = %+v, %v; want %+v", got, err, e)
			}
			return nil
		})
	})

	t.Run("DeleteOfReferredObjectIsConflict", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		// Cases run in order on one store; each touches only its own
		// objects of base().
		cases := []struct {
			name  string
			kind  site.Kind
			obj   string
			by    string // the referrer, as the message should name it
			del   func(ctx context.Context, tx site.Tx) error
			unref func(ctx context.Context, tx site.Tx) error // removes the reference
		}{
			{"ZoneUsedAsHomeZone", site.KindZone, "dr", q(site.KindDeliveryGroup, "vdi"),
				func(ctx context.Context, tx site.Tx) error { return tx.Zones().Delete(ctx, "dr") },
				func(ctx context.Context, tx site.Tx) error {
					return modify(ctx, tx.DeliveryGroups(), "vdi", func(g *site.DeliveryGroup) {
						g.ZonePreference, g.HomeZone = site.ZoneUserLocation, ""
					})
				}},
			{"ZoneUsedAsUserHomeZone", site.KindZone, "remote", q(site.KindUser, "frank"),
				func(ctx context.Context, tx site.Tx) error { return tx.Zones().Delete(ctx, "remote") },
				func(ctx context.Context, tx site.Tx) error {
					return modify(ctx, tx.Users(), "frank", func(u *site.User) { u.HomeZone = "" })
				}},
			{"ZoneUsedByCatalog", site.KindZone, "branch", q(site.KindCatalog, "branch-cat"),
				func(ctx context.Context, tx site.Tx) error { return tx.Zones().Delete(ctx, "branch") },
				func(ctx context.Context, tx site.Tx) error {
					return modify(ctx, tx.Catalogs(), "branch-cat", func(c *site.Catalog) { c.Zone = "hq" })
				}},
			{"CatalogUsedByMachine", site.KindCatalog, "spare-cat", q(site.KindMachine, "spare1"),
				func(ctx context.Context, tx site.Tx) error { return tx.Catalogs().Delete(ctx, "spare-cat") },
				func(ctx context.Context, tx site.Tx) error { return tx.Machines().Delete(ctx, "spare1") }},
			{"CatalogUsedByDeliveryGroup", site.KindCatalog, "branch-cat", q(site.KindDeliveryGroup, "branch"),
				func(ctx context.Context, tx site.Tx) error { return tx.Catalogs().Delete(ctx, "branch-cat") },
				func(ctx context.Context, tx site.Tx) error {
					return modify(ctx, tx.DeliveryGroups(), "branch", func(g *site.DeliveryGroup) { g.Catalogs = nil })
				}},
			{"GroupUsedByUser", site.KindGroup, "contractors", q(site.KindUser, "dave"),
				func(ctx context.Context, tx site.Tx) error { return tx.Groups().Delete(ctx, "contractors") },
				func(ctx context.Context, tx site.Tx) error {
					return modify(ctx, tx.Users(), "dave", func(u *site.User) { u.Groups = nil })
				}},
			{"GroupUsedByEntitlement", site.KindGroup, "auditors", q(site.KindEntitlement, "ledger-auditors"),
				func(ctx context.Context, tx site.Tx) error { return tx.Groups().Delete(ctx, "auditors") },
				func(ctx context.Context, tx site.Tx) error {
					return modify(ctx, tx.Entitlements(), "ledger-auditors", func(e *site.Entitlement) {
						e.Groups, e.Users = nil, []string{"bob"}
					})
				}},
			{"UserAssignedToMachine", site.KindUser, "erin", q(site.KindMachine, "vdi2"),
				func(ctx context.Context, tx site.Tx) error { return tx.Users().Delete(ctx, "erin") },
				func(ctx context.Context, tx site.Tx) error {
					return modify(ctx, tx.Machines(), "vdi2", func(m *site.Machine) { m.AssignedUser = "" })
				}},
			{"UserUsedByEntitlement", site.KindUser, "frank", q(site.KindEntitlement, "branch-all"),
				func(ctx context.Context, tx site.Tx) error { return tx.Users().Delete(ctx, "frank") },
				func(ctx context.Context, tx site.Tx) error {
					return modify(ctx, tx.Entitlements(), "branch-all", func(e *site.Entitlement) { e.Users = []string{"alice"} })
				}},
			{"DeliveryGroupUsedByResource", site.KindDeliveryGroup, "spare", q(site.KindApplication, "spare-app"),
				func(ctx context.Context, tx site.Tx) error { return tx.DeliveryGroups().Delete(ctx, "spare") },
				func(ctx context.Context, tx site.Tx) error {
					return modify(ctx, tx.Applications(), "spare-app", func(r *site.Resource) { r.DeliveryGroups = nil })
				}},
			{"DeliveryGroupUsedByEntitlement", site.KindDeliveryGroup, "kiosk", q(site.KindEntitlement, "kiosk-all"),
				func(ctx context.Context, tx site.Tx) error { return tx.DeliveryGroups().Delete(ctx, "kiosk") },
				func(ctx context.Context, tx site.Tx) error { return tx.Entitlements().Delete(ctx, "kiosk-all") }},
			{"ApplicationUsedByEntitlement", site.KindApplication, "ledger", q(site.KindEntitlement, "ledger-auditors"),
				func(ctx context.Context, tx site.Tx) error { return tx.Applications().Delete(ctx, "ledger") },
				func(ctx context.Context, tx site.Tx) error {
					return modify(ctx, tx.Entitlements(), "ledger-auditors", func(e *site.Entitlement) { e.Resources = nil })
				}},
			{"DesktopUsedByEntitlement", site.KindDesktop, "vdi-desktop", q(site.KindEntitlement, "vdi-carol"),
				func(ctx context.Context, tx site.Tx) error { return tx.Desktops().Delete(ctx, "vdi-desktop") },
				func(ctx context.Context, tx site.Tx) error {
					return modify(ctx, tx.Entitlements(), "vdi-carol", func(e *site.Entitlement) { e.Resources = nil })
				}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				v := version(t, s)
				err := try(t, s, c.del)
				wantMessage(t, err, site.EConflict, q(c.kind, c.obj), c.by)
				wantVersion(t, s, v)
				update(t, s, c.unref)
				update(t, s, c.del)
				wantVersion(t, s, v+2)
			})
		}
	})

	t.Run("FailedDeleteChangesNothing", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		v := version(t, s)
		// bob is in entitlement apps-staff: the delete fails, the
		// transaction goes on and commits, and bob keeps his groups.
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			wantCode(t, tx.Users().Delete(ctx, "bob"), site.EConflict)
			wantCode(t, tx.Zones().Delete(ctx, "hq"), site.EConflict)
			return nil
		})
		wantVersion(t, s, v)
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			got, err := site.LoadConfig(ctx, tx)
			if err != nil {
				t.Fatal(err)
			}
			want := base()
			want.Normalize()
			diffConfig(t, got, want)
			return nil
		})
	})
}
