package site_test

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
	"github.com/usher-vdi/usher/internal/sitegen"
)

// countingTx counts the reads of the whole list of users, which
// LoadConfig makes.
type countingTx struct {
	site.Tx
	loads *int
}

func (t countingTx) Users() site.Collection[site.User] { return countingUsers{t.Tx.Users(), t.loads} }

type countingUsers struct {
	site.Collection[site.User]
	loads *int
}

func (c countingUsers) List(ctx context.Context, opts site.ListOptions) (site.Page[site.User], error) {
	*c.loads++
	return c.Collection.List(ctx, opts)
}

// openSite returns a SQLite site DB holding c.
func openSite(t *testing.T, c *site.Config) *sqlitestore.Store {
	t.Helper()
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, t.TempDir()+"/site.db", sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Update(ctx, func(tx site.Tx) error { _, err := site.ApplyConfig(ctx, tx, c, false); return err }); err != nil {
		t.Fatal(err)
	}
	return s
}

// load returns the site's configuration and its version.
func load(t *testing.T, s site.Store) (c *site.Config, v int64) {
	t.Helper()
	ctx := context.Background()
	err := s.View(ctx, func(tx site.Tx) (err error) {
		if v, err = tx.ConfigVersion(ctx); err != nil {
			return err
		}
		c, err = site.LoadConfig(ctx, tx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, v
}

// wantLoaded fails the test unless m is what the site holds now.
func wantLoaded(t *testing.T, s site.Store, m *site.Mutation) {
	t.Helper()
	got, v := load(t, s)
	if m.Version != v {
		t.Errorf("mutation's version %d, the site's %d", m.Version, v)
	}
	if !reflect.DeepEqual(m.Config, got) {
		t.Errorf("the mutation's configuration is not the site's; from the site to it:\n%s", site.DiffReflect(got, m.Config))
	}
}

// readConcurrently reads every list of c, and of its objects, until the
// returned function is called, so that the race detector sees any write
// into them meanwhile.
func readConcurrently(c *site.Config) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		n := 0
		for {
			select {
			case <-done:
				return
			default:
			}
			for _, u := range c.Users {
				n += len(u.Name) + len(u.PasswordHash) + len(slices.Concat(u.Groups))
			}
			for _, m := range c.Machines {
				n += len(m.Name) + len(m.AssignedUser)
			}
			for _, g := range c.DeliveryGroups {
				n += len(g.Name) + len(slices.Concat(g.Catalogs))
			}
			for _, r := range slices.Concat(c.Applications, c.Desktops) {
				n += len(r.Name) + len(r.Kind) + len(r.DisplayName) + len(slices.Concat(r.DeliveryGroups))
			}
			for _, e := range c.Entitlements {
				n += len(e.Name) + len(slices.Concat(e.Resources, e.Users, e.Groups))
			}
			for _, l := range [][]site.Group{c.Groups} {
				n += len(l)
			}
			n += len(c.Zones) + len(c.Catalogs)
		}
	}()
	return func() { close(done); <-finished }
}

func indexOf[T any](list []T, name func(T) string, n string) int {
	return slices.IndexFunc(list, func(o T) bool { return name(o) == n })
}

func userNamed(u site.User) string { return u.Name }

// TestMutateFrom changes a site from the configuration a broker would
// hold, while something reads that configuration: nothing of the site is
// loaded, the configuration is left as it was, and the mutation's is
// what the site holds once committed.
func TestMutateFrom(t *testing.T) {
	ctx := context.Background()
	s := openSite(t, sitegen.Generate(sitegen.MidSize, testHash))
	for _, tc := range []struct {
		name    string
		fn      func(*site.Config) error
		code    string // the error code wanted, "" for none
		changes bool
	}{
		{name: "create an application", changes: true, fn: func(c *site.Config) error {
			c.Applications = append(c.Applications, site.Resource{Name: "new-app", DisplayName: "New",
				CommandLine: `C:\new.exe`, DeliveryGroups: []string{"dg-02", "dg-01"}})
			return nil
		}},
		{name: "replace a user without a password hash: the site keeps it", changes: true, fn: func(c *site.Config) error {
			i := indexOf(c.Users, userNamed, "user0001")
			if c.Users[i].PasswordHash == "" {
				t.Fatal("user0001 has no password hash")
			}
			c.Users[i] = site.User{Name: "user0001", DisplayName: "Renamed", Groups: []string{"GROUP-02", "group-01"}}
			return nil
		}},
		{name: "an entitlement naming users in any spelling", changes: true, fn: func(c *site.Config) error {
			c.Entitlements = append(c.Entitlements, site.Entitlement{Name: "e-new", DeliveryGroup: "dg-01",
				Users: []string{"USER0040", "User0041"}, Groups: []string{"Group-03"}})
			return nil
		}},
		{name: "set a password", changes: true, fn: func(c *site.Config) error {
			c.Users[indexOf(c.Users, userNamed, "user0002")].PasswordHash = testHash + "AA"
			return nil
		}},
		{name: "delete a machine", changes: true, fn: func(c *site.Config) error {
			c.Machines = slices.Delete(c.Machines, 3, 4)
			return nil
		}},
		{name: "delete an entitlement and a user it named", changes: true, fn: func(c *site.Config) error {
			i := indexOf(c.Entitlements, func(e site.Entitlement) string { return e.Name }, "e-new")
			c.Entitlements = slices.Delete(c.Entitlements, i, i+1)
			i = indexOf(c.Users, userNamed, "user0040")
			c.Users = slices.Delete(c.Users, i, i+1)
			return nil
		}},
		{name: "settings", changes: true, fn: func(c *site.Config) error { c.Settings.Name = "Renamed"; return nil }},
		{name: "no change", fn: func(c *site.Config) error { return nil }},
		{name: "fn's error", code: site.ENotFound, fn: func(c *site.Config) error { return site.NotFound(site.KindZone, "nowhere") }},
		{name: "a dangling reference", code: site.EInvalid, fn: func(c *site.Config) error {
			c.DeliveryGroups = slices.Delete(c.DeliveryGroups, 0, 1)
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, v := load(t, s)
			pristine, _ := load(t, s)
			stop := readConcurrently(base)
			var m *site.Mutation
			loads := 0
			err := s.Update(ctx, func(tx site.Tx) (err error) {
				m, err = site.MutateFrom(ctx, countingTx{tx, &loads}, base, v, tc.fn)
				return err
			})
			stop()
			if loads != 0 {
				t.Errorf("MutateFrom loaded the configuration %d times; want none", loads)
			}
			if !reflect.DeepEqual(base, pristine) {
				t.Errorf("MutateFrom changed its base:\n%s", site.DiffReflect(pristine, base))
			}
			if tc.code != "" {
				if site.ErrorCode(err) != tc.code {
					t.Fatalf("error %v, want code %s", err, tc.code)
				}
				if _, after := load(t, s); after != v {
					t.Errorf("version %d after a failed mutation, want %d", after, v)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Plan.Empty() == tc.changes {
				t.Errorf("plan:\n%s", m.Plan)
			}
			wantLoaded(t, s, m)
		})
	}

	t.Run("a moved version loads the site", func(t *testing.T) {
		base, v := load(t, s)
		err := s.Update(ctx, func(tx site.Tx) error {
			_, err := site.Mutate(ctx, tx, func(c *site.Config) error { c.Settings.Domain = "ELSEWHERE"; return nil })
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		var m *site.Mutation
		loads := 0
		err = s.Update(ctx, func(tx site.Tx) (err error) {
			m, err = site.MutateFrom(ctx, countingTx{tx, &loads}, base, v, func(c *site.Config) error {
				c.Zones[1].Description = "moved"
				return nil
			})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if loads != 1 {
			t.Errorf("MutateFrom from version %d of a site at %d loaded it %d times; want once", v, v+1, loads)
		}
		if m.Config.Settings.Domain != "ELSEWHERE" {
			t.Error("the mutation lost the change made meanwhile")
		}
		wantLoaded(t, s, m)
	})
}
