package storetest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// kindCase describes one collection for the CRUD tests, on top of base().
type kindCase[T any] struct {
	kind site.Kind
	col  func(site.Tx) site.Collection[T]
	name func(T) string
	// valid returns a new valid object whose references base() satisfies.
	valid func(name string) T
	// change returns obj with every field but the name changed, still valid.
	change func(obj T) T
	// invalid returns an object named name that fails its own validation.
	invalid func(name string) T
	// config says whether writes move the configuration version.
	config bool
}

func testCollections(t *testing.T, open func(*testing.T) site.Store) {
	created := ms(2024, 3, 1, 12, 30, 15, 250, nil)
	runKind(t, open, kindCase[site.Zone]{
		kind:    site.KindZone,
		col:     site.Tx.Zones,
		name:    func(z site.Zone) string { return z.Name },
		valid:   func(n string) site.Zone { return site.Zone{Name: n, Description: "A zone"} },
		change:  func(z site.Zone) site.Zone { z.Description, z.Primary = "Changed", !z.Primary; return z },
		invalid: func(n string) site.Zone { return site.Zone{Name: n + "/bad"} },
		config:  true,
	})
	runKind(t, open, kindCase[site.Catalog]{
		kind: site.KindCatalog,
		col:  site.Tx.Catalogs,
		name: func(c site.Catalog) string { return c.Name },
		valid: func(n string) site.Catalog {
			return site.Catalog{Name: n, Kind: site.MultiSession, Zone: "hq", Description: "A catalog"}
		},
		change: func(c site.Catalog) site.Catalog {
			c.Kind, c.Zone, c.Description = site.SingleSessionPooled, "branch", "Changed"
			return c
		},
		invalid: func(n string) site.Catalog { return site.Catalog{Name: n, Kind: "bogus", Zone: "hq"} },
		config:  true,
	})
	runKind(t, open, kindCase[site.Group]{
		kind: site.KindGroup,
		col:  site.Tx.Groups,
		name: func(g site.Group) string { return g.Name },
		valid: func(n string) site.Group {
			return site.Group{Name: n, Description: "A group", DN: "cn=Staff,ou=Groups,dc=example,dc=com"}
		},
		change:  func(g site.Group) site.Group { g.Description = ""; return g },
		invalid: func(n string) site.Group { return site.Group{Name: " " + n} },
		config:  true,
	})
	runKind(t, open, kindCase[site.User]{
		kind: site.KindUser,
		col:  site.Tx.Users,
		name: func(u site.User) string { return u.Name },
		valid: func(n string) site.User {
			return site.User{Name: n, DisplayName: "A User", Groups: []string{"staff", "finance", "auditors"}, PasswordHash: testHash}
		},
		change: func(u site.User) site.User {
			u.DisplayName, u.Disabled, u.Groups, u.PasswordHash = "Changed", true, []string{"contractors", "finance"}, ""
			return u
		},
		invalid: func(n string) site.User { return site.User{Name: n, Groups: []string{"staff", "staff"}} },
		config:  true,
	})
	runKind(t, open, kindCase[site.Machine]{
		kind: site.KindMachine,
		col:  site.Tx.Machines,
		name: func(m site.Machine) string { return m.Name },
		valid: func(n string) site.Machine {
			return site.Machine{Name: n, Catalog: "apps-cat", Address: "192.0.2.1:1494", MaxSessions: 20}
		},
		change: func(m site.Machine) site.Machine {
			m.Catalog, m.Address, m.MaxSessions, m.Maintenance, m.AssignedUser = "vdi-cat", "192.0.2.2:2598", 1, true, "bob"
			return m
		},
		invalid: func(n string) site.Machine { return site.Machine{Name: n, Catalog: "apps-cat"} },
		config:  true,
	})
	runKind(t, open, kindCase[site.DeliveryGroup]{
		kind: site.KindDeliveryGroup,
		col:  site.Tx.DeliveryGroups,
		name: func(g site.DeliveryGroup) string { return g.Name },
		valid: func(n string) site.DeliveryGroup {
			g := site.NewDeliveryGroup(n)
			g.Description = "A delivery group"
			return g
		},
		change: func(g site.DeliveryGroup) site.DeliveryGroup {
			g.Description = "Changed"
			g.Reconnect, g.ZonePreference, g.HomeZone = site.ReconnectSameEndpointOnly, site.ZoneApplicationHome, "branch"
			g.LoadRules = site.LoadRules{
				MaxSessions:      site.MaxSessionsRule{Enabled: false, Limit: 7},
				CPU:              site.UsageRule{Enabled: true, FullPercent: 75},
				Memory:           site.MemoryRule{Enabled: true, FullPercent: 70, BaseLoadMB: 2048},
				ConcurrentLogons: site.LogonRule{Enabled: true, Tolerance: 4, Hard: true},
			}
			g.SessionTimers = site.SessionTimers{IdleDisconnect: site.Duration(15 * time.Minute),
				DisconnectedLogoff: site.Duration(90 * time.Minute), MaxSession: site.Duration(30 * 24 * time.Hour)}
			return g
		},
		invalid: func(n string) site.DeliveryGroup { g := site.NewDeliveryGroup(n); g.Reconnect = "never"; return g },
		config:  true,
	})
	runKind(t, open, kindCase[site.Resource]{
		kind: site.KindApplication,
		col:  site.Tx.Applications,
		name: func(r site.Resource) string { return r.Name },
		valid: func(n string) site.Resource {
			return site.Resource{Kind: site.Application, Name: n, DisplayName: "An App", Folder: "Office/Tools", Description: "Does things",
				CommandLine: `C:\app.exe /x`, Icon: "builtin:app", DeliveryGroups: []string{"spare", "apps"}}
		},
		change: func(r site.Resource) site.Resource {
			r.DisplayName, r.Folder, r.Description, r.CommandLine = "Changed", "", "", "other.exe"
			r.Icon, r.DeliveryGroups, r.Disabled = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAADklEQVR4nGJiAAQAAP//AAYAA/rQWa4AAAAASUVORK5CYII=", []string{"kiosk"}, true
			return r
		},
		invalid: func(n string) site.Resource {
			return site.Resource{Kind: site.Application, Name: n, DisplayName: "No command"}
		},
		config: true,
	})
	runKind(t, open, kindCase[site.Resource]{
		kind: site.KindDesktop,
		col:  site.Tx.Desktops,
		name: func(r site.Resource) string { return r.Name },
		valid: func(n string) site.Resource {
			return site.Resource{Kind: site.Desktop, Name: n, DisplayName: "A Desktop", DeliveryGroups: []string{"vdi"}}
		},
		change: func(r site.Resource) site.Resource {
			r.DisplayName, r.Folder, r.Icon, r.DeliveryGroups, r.Disabled = "Changed", "Desktops", "builtin:desktop", []string{"branch", "vdi"}, true
			return r
		},
		invalid: func(n string) site.Resource {
			return site.Resource{Kind: site.Desktop, Name: n, DisplayName: "D", CommandLine: "desktops have none"}
		},
		config: true,
	})
	runKind(t, open, kindCase[site.Entitlement]{
		kind: site.KindEntitlement,
		col:  site.Tx.Entitlements,
		name: func(e site.Entitlement) string { return e.Name },
		valid: func(n string) site.Entitlement {
			return site.Entitlement{Name: n, DeliveryGroup: "apps", Resources: []string{"notepad", "calc"}, Users: []string{"bob", "alice"}, Groups: []string{"staff"}}
		},
		change: func(e site.Entitlement) site.Entitlement {
			e.DeliveryGroup, e.Resources, e.Users, e.Groups = "vdi", []string{"vdi-desktop"}, []string{"carol"}, nil
			return e
		},
		invalid: func(n string) site.Entitlement { return site.Entitlement{Name: n, DeliveryGroup: "apps"} },
		config:  true,
	})
	runKind(t, open, kindCase[site.Admin]{
		kind:  site.KindAdmin,
		col:   site.Tx.Admins,
		name:  func(a site.Admin) string { return a.Name },
		valid: func(n string) site.Admin { return site.Admin{Name: n, PasswordHash: testHash, CreatedAt: created} },
		change: func(a site.Admin) site.Admin {
			a.PasswordHash, a.CreatedAt = "$argon2id$other", created.Add(36*time.Hour+time.Millisecond)
			return a
		},
		invalid: func(n string) site.Admin { return site.Admin{Name: n} },
		config:  false,
	})

	t.Run("BaseRoundTrips", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		want := base()
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			got, err := tx.Settings(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got != want.Settings {
				t.Errorf("settings = %+v, want %+v", got, want.Settings)
			}
			checkGets(ctx, t, tx.Zones(), want.Zones, func(z site.Zone) string { return z.Name })
			checkGets(ctx, t, tx.Catalogs(), want.Catalogs, func(c site.Catalog) string { return c.Name })
			checkGets(ctx, t, tx.Groups(), want.Groups, func(g site.Group) string { return g.Name })
			checkGets(ctx, t, tx.Users(), want.Users, func(u site.User) string { return u.Name })
			checkGets(ctx, t, tx.Machines(), want.Machines, func(m site.Machine) string { return m.Name })
			checkGets(ctx, t, tx.DeliveryGroups(), want.DeliveryGroups, func(g site.DeliveryGroup) string { return g.Name })
			checkGets(ctx, t, tx.Applications(), want.Applications, func(r site.Resource) string { return r.Name })
			checkGets(ctx, t, tx.Desktops(), want.Desktops, func(r site.Resource) string { return r.Name })
			checkGets(ctx, t, tx.Entitlements(), want.Entitlements, func(e site.Entitlement) string { return e.Name })
			return nil
		})
	})
}

// checkGets checks that Get returns each of want, and List all of them in
// name order with the same contents.
func checkGets[T any](ctx context.Context, t *testing.T, c site.Collection[T], want []T, name func(T) string) {
	t.Helper()
	for _, w := range want {
		got, err := c.Get(ctx, name(w))
		if err != nil {
			t.Errorf("get %s: %v", name(w), err)
			continue
		}
		if !same(got, w) {
			t.Errorf("get %s = %+v, want %+v", name(w), got, w)
		}
	}
	page, err := c.List(ctx, site.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	sorted := slices.Clone(want)
	slices.SortFunc(sorted, func(a, b T) int { return strings.Compare(name(a), name(b)) })
	if !same(page.Items, sorted) {
		t.Errorf("list = %+v, want %+v", page.Items, sorted)
	}
	if page.Total != len(want) || page.Next != "" {
		t.Errorf("list total %d, next %q; want %d, \"\"", page.Total, page.Next, len(want))
	}
}

// runKind runs the CRUD behaviours of one collection on one store holding
// base(). Each behaviour uses its own object names.
func runKind[T any](t *testing.T, open func(*testing.T) site.Store, k kindCase[T]) {
	t.Run(string(k.kind), func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)

		t.Run("GetOfMissingNameIsNotFound", func(t *testing.T) {
			view(t, s, func(ctx context.Context, tx site.Tx) error {
				_, err := k.col(tx).Get(ctx, "no-such")
				wantMessage(t, err, site.ENotFound, `"no-such"`)
				return nil
			})
		})

		t.Run("CreateThenGetReturnsTheObject", func(t *testing.T) {
			obj := k.valid("created")
			update(t, s, func(ctx context.Context, tx site.Tx) error { return k.col(tx).Create(ctx, obj) })
			view(t, s, func(ctx context.Context, tx site.Tx) error {
				got, err := k.col(tx).Get(ctx, "created")
				if err != nil {
					t.Fatalf("get: %v", err)
				}
				if !same(got, obj) {
					t.Fatalf("get = %+v, want %+v", got, obj)
				}
				return nil
			})
		})

		t.Run("CreateOfTakenNameIsConflict", func(t *testing.T) {
			update(t, s, func(ctx context.Context, tx site.Tx) error { return k.col(tx).Create(ctx, k.valid("taken")) })
			err := try(t, s, func(ctx context.Context, tx site.Tx) error {
				return k.col(tx).Create(ctx, k.change(k.valid("taken")))
			})
			wantMessage(t, err, site.EConflict, `"taken"`)
			view(t, s, func(ctx context.Context, tx site.Tx) error {
				got, err := k.col(tx).Get(ctx, "taken")
				if err != nil || !same(got, k.valid("taken")) {
					t.Fatalf("after conflict: get = %+v, %v; want the first object", got, err)
				}
				return nil
			})
		})

		t.Run("CreateOfInvalidObjectReturnsItsValidationError", func(t *testing.T) {
			obj := k.invalid("bad")
			wantErr := any(obj).(interface{ Validate() error }).Validate()
			if wantErr == nil {
				t.Fatalf("fixture %+v is valid", obj)
			}
			err := try(t, s, func(ctx context.Context, tx site.Tx) error { return k.col(tx).Create(ctx, obj) })
			wantCode(t, err, site.EInvalid)
			if got, want := site.ErrorMessage(err), site.ErrorMessage(wantErr); got != want {
				t.Fatalf("error message %q, want %q", got, want)
			}
			view(t, s, func(ctx context.Context, tx site.Tx) error {
				_, err := k.col(tx).Get(ctx, k.name(obj))
				wantCode(t, err, site.ENotFound)
				return nil
			})
		})

		t.Run("UpdateReplacesTheObject", func(t *testing.T) {
			update(t, s, func(ctx context.Context, tx site.Tx) error { return k.col(tx).Create(ctx, k.valid("replaced")) })
			changed := k.change(k.valid("replaced"))
			update(t, s, func(ctx context.Context, tx site.Tx) error { return k.col(tx).Update(ctx, changed) })
			view(t, s, func(ctx context.Context, tx site.Tx) error {
				got, err := k.col(tx).Get(ctx, "replaced")
				if err != nil {
					t.Fatalf("get: %v", err)
				}
				if !same(got, changed) {
					t.Fatalf("get = %+v, want %+v", got, changed)
				}
				return nil
			})
			// And back: lists that grew and shrank are replaced, not merged.
			update(t, s, func(ctx context.Context, tx site.Tx) error { return k.col(tx).Update(ctx, k.valid("replaced")) })
			view(t, s, func(ctx context.Context, tx site.Tx) error {
				got, err := k.col(tx).Get(ctx, "replaced")
				if err != nil || !same(got, k.valid("replaced")) {
					t.Fatalf("get = %+v, %v; want %+v", got, err, k.valid("replaced"))
				}
				return nil
			})
		})

		t.Run("UpdateOfMissingNameIsNotFound", func(t *testing.T) {
			err := try(t, s, func(ctx context.Context, tx site.Tx) error { return k.col(tx).Update(ctx, k.valid("never-created")) })
			wantMessage(t, err, site.ENotFound, `"never-created"`)
		})

		t.Run("UpdateWithInvalidObjectIsInvalid", func(t *testing.T) {
			update(t, s, func(ctx context.Context, tx site.Tx) error { return k.col(tx).Create(ctx, k.valid("kept")) })
			err := try(t, s, func(ctx context.Context, tx site.Tx) error { return k.col(tx).Update(ctx, k.invalid("kept")) })
			wantCode(t, err, site.EInvalid)
			view(t, s, func(ctx context.Context, tx site.Tx) error {
				got, err := k.col(tx).Get(ctx, "kept")
				if err != nil || !same(got, k.valid("kept")) {
					t.Fatalf("get = %+v, %v; want it unchanged", got, err)
				}
				return nil
			})
		})

		t.Run("DeleteRemovesTheObject", func(t *testing.T) {
			update(t, s, func(ctx context.Context, tx site.Tx) error { return k.col(tx).Create(ctx, k.valid("deleted")) })
			update(t, s, func(ctx context.Context, tx site.Tx) error { return k.col(tx).Delete(ctx, "deleted") })
			view(t, s, func(ctx context.Context, tx site.Tx) error {
				_, err := k.col(tx).Get(ctx, "deleted")
				wantCode(t, err, site.ENotFound)
				page, err := k.col(tx).List(ctx, site.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if slices.Contains(names(page.Items, k.name), "deleted") {
					t.Fatalf("list still has the deleted object")
				}
				return nil
			})
			// The name is free again.
			update(t, s, func(ctx context.Context, tx site.Tx) error {
				return k.col(tx).Create(ctx, k.change(k.valid("deleted")))
			})
		})

		t.Run("DeleteOfMissingNameIsNotFound", func(t *testing.T) {
			err := try(t, s, func(ctx context.Context, tx site.Tx) error { return k.col(tx).Delete(ctx, "never-created") })
			wantMessage(t, err, site.ENotFound, `"never-created"`)
		})

		t.Run("ListIsInNameOrder", func(t *testing.T) {
			update(t, s, func(ctx context.Context, tx site.Tx) error {
				for _, n := range []string{"order-c", "order-a", "order-b"} {
					if err := k.col(tx).Create(ctx, k.valid(n)); err != nil {
						return err
					}
				}
				return nil
			})
			view(t, s, func(ctx context.Context, tx site.Tx) error {
				page, err := k.col(tx).List(ctx, site.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				got := names(page.Items, k.name)
				if !slices.IsSorted(got) {
					t.Fatalf("list is not in name order: %q", got)
				}
				if page.Total != len(got) || page.Next != "" {
					t.Fatalf("total %d, next %q for %d items", page.Total, page.Next, len(got))
				}
				return nil
			})
		})

		t.Run("WritesMoveConfigVersionOnlyForConfiguration", func(t *testing.T) {
			step := int64(0)
			if k.config {
				step = 1
			}
			v := version(t, s)
			update(t, s, func(ctx context.Context, tx site.Tx) error { return k.col(tx).Create(ctx, k.valid("versioned")) })
			wantVersion(t, s, v+step)
			update(t, s, func(ctx context.Context, tx site.Tx) error {
				return k.col(tx).Update(ctx, k.change(k.valid("versioned")))
			})
			wantVersion(t, s, v+2*step)
			update(t, s, func(ctx context.Context, tx site.Tx) error { return k.col(tx).Delete(ctx, "versioned") })
			wantVersion(t, s, v+3*step)
			try(t, s, func(ctx context.Context, tx site.Tx) error { return k.col(tx).Delete(ctx, "versioned") })
			wantVersion(t, s, v+3*step)
		})
	})
}
