package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
)

// changes returns the store's change log after since.
func changes(t *testing.T, s site.Store, since int64) (list []site.ConfigChange, complete bool) {
	t.Helper()
	view(t, s, func(ctx context.Context, tx site.Tx) (err error) {
		list, complete, err = tx.ConfigChanges(ctx, since)
		return err
	})
	return list, complete
}

// refreshed returns site.Refresh from base at baseVersion, failing the
// test unless it is what LoadConfig reads, leaves base as it was, and
// read the whole list of users only when whole says so.
func refreshed(t *testing.T, s site.Store, base *site.Config, baseVersion int64, whole bool) (*site.Config, int64) {
	t.Helper()
	before := deepCopy(t, base)
	var got, want *site.Config
	var v int64
	lists := 0
	view(t, s, func(ctx context.Context, tx site.Tx) (err error) {
		if got, v, err = site.Refresh(ctx, listCounter{tx, &lists}, base, baseVersion); err != nil {
			return err
		}
		want, err = site.LoadConfig(ctx, tx)
		return err
	})
	diffConfig(t, got, want)
	diffConfig(t, base, before)
	if read := lists > 0; read != whole {
		t.Errorf("refresh from version %d read the whole list of users: %v, want %v", baseVersion, read, whole)
	}
	return got, v
}

// listCounter counts the lists of users read through it.
type listCounter struct {
	site.Tx
	n *int
}

func (c listCounter) Users() site.Collection[site.User] {
	return countedList[site.User]{c.Tx.Users(), c.n}
}

type countedList[T any] struct {
	site.Collection[T]
	n *int
}

func (c countedList[T]) List(ctx context.Context, opts site.ListOptions) (site.Page[T], error) {
	*c.n++
	return c.Collection.List(ctx, opts)
}

func testConfigChanges(t *testing.T, open func(*testing.T) site.Store) {
	t.Run("EachWriteIsLoggedUnderItsVersion", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		since := version(t, s)
		want := map[int64][]site.ConfigChange{
			since + 1: {{Kind: site.KindSettings}},
			since + 2: {{Kind: site.KindZone, Name: "new-zone"}},
			since + 3: {{Kind: site.KindCatalog, Name: "spare-cat"}},
			since + 4: {{Kind: site.KindGroup, Name: "new-group"}},
			since + 5: {{Kind: site.KindUser, Name: "alice"}},
			since + 6: {{Kind: site.KindMachine, Name: "app2"}},
			since + 7: {{Kind: site.KindDeliveryGroup, Name: "new-dg"}},
			since + 8: {{Kind: site.KindApplication, Name: "new-app"}},
			since + 9: {{Kind: site.KindDesktop, Name: "branch-desktop"}},
			// The entitlement's update, then runtime writes, which log
			// nothing.
			since + 10: {{Kind: site.KindEntitlement, Name: "apps-staff"}},
		}
		for _, w := range writes {
			update(t, s, w.do)
		}
		// One transaction writing several objects, one of them twice, and
		// a secret.
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			for _, name := range []string{"z2", "z1"} {
				if err := tx.Zones().Create(ctx, site.Zone{Name: name}); err != nil {
					return err
				}
			}
			if err := tx.Zones().Update(ctx, site.Zone{Name: "z1", Description: "again"}); err != nil {
				return err
			}
			return tx.SetSecret(ctx, "token-key", []byte("k"))
		})
		want[since+11] = []site.ConfigChange{{Kind: site.KindSecret, Name: "token-key"}, {Kind: site.KindZone, Name: "z1"}, {Kind: site.KindZone, Name: "z2"}}
		got, complete := changes(t, s, since)
		if !complete {
			t.Errorf("changes after %d: not complete", since)
		}
		var flat []site.ConfigChange
		for v := since + 1; v <= since+11; v++ {
			for _, c := range want[v] {
				c.Version = v
				flat = append(flat, c)
			}
		}
		if !slices.Equal(got, flat) {
			t.Errorf("changes after %d:\n got %v\nwant %v", since, got, flat)
		}
		// From later on, only what came after.
		if got, complete := changes(t, s, since+9); !complete || len(got) != 4 || got[0].Version != since+10 {
			t.Errorf("changes after %d: %v, complete %v", since+9, got, complete)
		}
		if got, complete := changes(t, s, since+11); !complete || len(got) != 0 {
			t.Errorf("changes after the last version: %v, complete %v", got, complete)
		}
	})

	t.Run("NotCompleteBeforeTheLog", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		// Version 1 is the new site's, which no change wrote.
		if got, complete := changes(t, s, 0); complete {
			t.Errorf("changes after 0: complete, %v", got)
		}
	})

	t.Run("RefreshIsLoad", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		snap := takeSnapshot(t, s)
		cfg, v := snap.Config, snap.Version
		steps := []struct {
			name string
			do   func(ctx context.Context, tx site.Tx) error
		}{
			{"AnUpdateOfEachKind", func(ctx context.Context, tx site.Tx) error {
				for _, w := range writes {
					if err := w.do(ctx, tx); err != nil {
						return fmt.Errorf("%s: %w", w.name, err)
					}
				}
				return nil
			}},
			{"AnApplicationBecomesADesktop", func(ctx context.Context, tx site.Tx) error {
				if err := tx.Applications().Delete(ctx, "spare-app"); err != nil {
					return err
				}
				return tx.Desktops().Create(ctx, site.Resource{Kind: site.Desktop, Name: "spare-app", DisplayName: "Spare", DeliveryGroups: []string{"spare"}})
			}},
			{"AUserRespelled", func(ctx context.Context, tx site.Tx) error {
				if err := tx.Users().Delete(ctx, "DAVE"); err != nil {
					return err
				}
				return tx.Users().Create(ctx, site.User{Name: "Dave", Groups: []string{"staff"}})
			}},
			{"ObjectsFirstAndLastInTheirLists", func(ctx context.Context, tx site.Tx) error {
				if err := tx.Groups().Create(ctx, site.Group{Name: "aaa"}); err != nil {
					return err
				}
				if err := tx.Groups().Create(ctx, site.Group{Name: "zzz"}); err != nil {
					return err
				}
				return tx.Zones().Delete(ctx, "new-zone")
			}},
			{"NothingButRuntime", func(ctx context.Context, tx site.Tx) error {
				return tx.SetMachineStatus(ctx, "app1", site.MachineStatus{Registration: site.Registered})
			}},
		}
		for _, st := range steps {
			update(t, s, st.do)
			prev := v
			cfg, v = refreshed(t, s, cfg, v, false)
			if t.Failed() {
				t.Fatalf("after %s (version %d to %d)", st.name, prev, v)
			}
		}
		// Several versions at once, and a base older than the log.
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Groups().Delete(ctx, "aaa") })
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Groups().Delete(ctx, "zzz") })
		refreshed(t, s, cfg, v, false)
		refreshed(t, s, snap.Config, 0, true)
	})

	for _, tc := range []struct {
		name  string
		size  Sizes
		whole bool
	}{
		{"RefreshOfASmallApply", MidSize, false},
		{"RefreshOfALargeApply", Sizes{Zones: 3, Groups: 5, Users: site.MaxIncrementalChanges, Machines: 12, DeliveryGroups: 3, Applications: 40, Desktops: 3, Entitlements: 6}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			var empty *site.Config
			view(t, s, func(ctx context.Context, tx site.Tx) (err error) {
				empty, err = site.LoadConfig(ctx, tx)
				return err
			})
			apply(t, s, GenerateConfig(tc.size))
			got, _ := refreshed(t, s, empty, 1, tc.whole)
			if len(got.Users) != tc.size.Users {
				t.Errorf("%d users, want %d", len(got.Users), tc.size.Users)
			}
		})
	}

	t.Run("TheLogKeepsTheLastVersions", func(t *testing.T) {
		t.Parallel()
		if testing.Short() {
			t.Skip("a thousand transactions")
		}
		s := openBase(t, open)
		first := version(t, s)
		for i := range site.ConfigLogKeep + 1 {
			update(t, s, func(ctx context.Context, tx site.Tx) error {
				return tx.SetSettings(ctx, site.Settings{Name: fmt.Sprint("farm ", i), Domain: "TEST"})
			})
		}
		last := version(t, s)
		if _, complete := changes(t, s, last-site.ConfigLogKeep); !complete {
			t.Errorf("the log does not hold the last %d versions", site.ConfigLogKeep)
		}
		if _, complete := changes(t, s, first); complete {
			t.Errorf("the log holds more than %d versions (%d)", site.ConfigLogKeep, last-first)
		}
	})
}
