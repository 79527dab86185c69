package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
)

// diffConfig fails the test unless got and want are deeply equal, naming
// the first objects that differ.
func diffConfig(t *testing.T, got, want *site.Config) {
	t.Helper()
	if reflect.DeepEqual(got, want) {
		return
	}
	if got.Settings != want.Settings {
		t.Errorf("settings = %+v, want %+v", got.Settings, want.Settings)
	}
	gv, wv := reflect.ValueOf(got).Elem(), reflect.ValueOf(want).Elem()
	for i := range gv.NumField() {
		g, w := gv.Field(i), wv.Field(i)
		if g.Kind() != reflect.Slice || reflect.DeepEqual(g.Interface(), w.Interface()) {
			continue
		}
		field := gv.Type().Field(i).Name
		if g.Len() != w.Len() {
			t.Errorf("%s: %d objects, want %d", field, g.Len(), w.Len())
		}
		for j := range min(g.Len(), w.Len()) {
			if !reflect.DeepEqual(g.Index(j).Interface(), w.Index(j).Interface()) {
				t.Errorf("%s[%d] = %+v\nwant %+v", field, j, g.Index(j).Interface(), w.Index(j).Interface())
				break
			}
		}
	}
	if !t.Failed() {
		t.Errorf("configurations differ: got %+v, want %+v", got, want)
	}
}

// apply applies desired in one Update and returns the plan.
func apply(t *testing.T, s site.Store, desired *site.Config) *site.Plan {
	t.Helper()
	var plan *site.Plan
	update(t, s, func(ctx context.Context, tx site.Tx) (err error) {
		plan, err = site.ApplyConfig(ctx, tx, desired, false)
		return err
	})
	return plan
}

// wantConfig fails the test unless the store's configuration is want.
func wantConfig(t *testing.T, s site.Store, want *site.Config) {
	t.Helper()
	view(t, s, func(ctx context.Context, tx site.Tx) error {
		got, err := site.LoadConfig(ctx, tx)
		if err != nil {
			return err
		}
		diffConfig(t, got, want)
		return nil
	})
}

func testConfig(t *testing.T, open func(*testing.T) site.Store) {
	t.Run("FixturesAreValid", func(t *testing.T) {
		t.Parallel()
		for name, c := range map[string]*site.Config{"base": base(), "mid": GenerateConfig(MidSize), "demo": GenerateConfig(DemoSize)} {
			c.Normalize()
			if err := c.Validate(); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	})

	t.Run("ApplyThenLoadReturnsTheDesiredConfig", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		desired := GenerateConfig(MidSize)
		plan := apply(t, s, desired)
		if c, u, d := plan.Counts(); c == 0 || u != 0 || d != 0 {
			t.Errorf("plan on an empty site: %d creates, %d updates, %d deletes", c, u, d)
		}
		wantConfig(t, s, GenerateConfig(MidSize))
		wantVersion(t, s, 2)

		// The same configuration again changes nothing.
		if plan := apply(t, s, GenerateConfig(MidSize)); !plan.Empty() {
			t.Errorf("second apply plans:\n%s", plan)
		}
		wantVersion(t, s, 2)

		// A changed configuration: creates, updates and deletes of every
		// kind, in one transaction, one version.
		next := GenerateConfig(MidSize)
		next.Settings.Name = "Renamed Farm"
		next.Zones = append(next.Zones, site.Zone{Name: "zone-new"})
		next.Catalogs[0].Description = "changed"
		next.Groups = next.Groups[:len(next.Groups)-1] // delete the last group
		gone := GenerateConfig(MidSize).Groups[len(next.Groups)].Name
		for i := range next.Users {
			next.Users[i].Groups = without(next.Users[i].Groups, gone)
		}
		for i := range next.Entitlements {
			next.Entitlements[i].Groups = without(next.Entitlements[i].Groups, gone)
			if len(next.Entitlements[i].Groups)+len(next.Entitlements[i].Users) == 0 {
				next.Entitlements[i].Users = []string{next.Users[0].Name}
			}
		}
		next.Users = next.Users[1:]                  // delete a user...
		next.Users[0].PasswordHash = testHash + "AA" // ...and change a password
		for i := range next.Entitlements {
			next.Entitlements[i].Users = without(next.Entitlements[i].Users, GenerateConfig(MidSize).Users[0].Name)
			if len(next.Entitlements[i].Groups)+len(next.Entitlements[i].Users) == 0 {
				next.Entitlements[i].Users = []string{next.Users[0].Name}
			}
		}
		next.Machines[3].Maintenance = !next.Machines[3].Maintenance
		next.Machines = next.Machines[:len(next.Machines)-2]
		next.DeliveryGroups[0].LoadRules.MaxSessions.Limit = 99
		next.Applications[5].DeliveryGroups = []string{next.DeliveryGroups[1].Name}
		next.Applications = append(next.Applications[:10], next.Applications[12:]...)
		next.Desktops[0].DisplayName = "Renamed desktop"
		next.Entitlements = next.Entitlements[:len(next.Entitlements)-1]
		next.Normalize()
		if err := next.Validate(); err != nil {
			t.Fatalf("changed fixture: %v", err)
		}
		want := deepCopy(t, next)
		plan = apply(t, s, next)
		if c, u, d := plan.Counts(); c == 0 || u == 0 || d == 0 {
			t.Errorf("plan: %d creates, %d updates, %d deletes; want some of each", c, u, d)
		}
		wantConfig(t, s, want)
		wantVersion(t, s, 3)

		// And back to the first, from the changed one.
		apply(t, s, GenerateConfig(MidSize))
		first := GenerateConfig(MidSize)
		first.Users[1].PasswordHash = want.Users[0].PasswordHash // kept: the file has none
		wantConfig(t, s, first)
		wantVersion(t, s, 4)
	})

	t.Run("FailedApplyChangesNothing", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		before := takeSnapshot(t, s)
		desired := GenerateConfig(MidSize)
		err := try(t, s, func(ctx context.Context, tx site.Tx) error {
			if _, err := site.ApplyConfig(ctx, tx, desired, false); err != nil {
				return err
			}
			return errTest
		})
		if !errors.Is(err, errTest) {
			t.Fatalf("apply: %v", err)
		}
		wantSnapshot(t, s, before)
	})
}

func without(list []string, name string) []string {
	var out []string
	for _, s := range list {
		if s != name {
			out = append(out, s)
		}
	}
	return out
}

// deepCopy copies a normalized configuration, so that ApplyConfig cannot
// change the expectation.
func deepCopy(t *testing.T, c *site.Config) *site.Config {
	t.Helper()
	out := canonical(reflect.ValueOf(c)).Interface().(*site.Config)
	out.Normalize()
	return out
}

func testConcurrency(t *testing.T, open func(*testing.T) site.Store) {
	t.Run("ConcurrentUpdatesAreSerialized", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		const workers, perWorker = 8, 25
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			committed = map[string]bool{}
			errs      = make(chan error, workers*perWorker)
		)
		for w := range workers {
			wg.Go(func() {
				ctx := context.Background()
				for i := range perWorker {
					name := fmt.Sprintf("w%d-%02d", w, i)
					fail := i%5 == 4 // every fifth update rolls back
					err := s.Update(ctx, func(tx site.Tx) error {
						if err := tx.Zones().Create(ctx, site.Zone{Name: name}); err != nil {
							return err
						}
						if err := tx.Groups().Create(ctx, site.Group{Name: name}); err != nil {
							return err
						}
						if fail {
							return errTest
						}
						return nil
					})
					switch {
					case fail && errors.Is(err, errTest):
					case err != nil:
						errs <- fmt.Errorf("update %s: %w", name, err)
					default:
						mu.Lock()
						committed[name] = true
						mu.Unlock()
					}
					// Readers run beside the writers.
					if err := s.View(ctx, func(tx site.Tx) error {
						_, err := tx.Zones().List(ctx, site.ListOptions{Limit: 10})
						return err
					}); err != nil {
						errs <- fmt.Errorf("view: %w", err)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		want := workers * perWorker * 4 / 5
		if len(committed) != want {
			t.Fatalf("%d updates committed, want %d", len(committed), want)
		}
		wantVersion(t, s, int64(1+len(committed)))
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			for _, col := range []func() ([]string, error){
				func() ([]string, error) {
					p, err := tx.Zones().List(ctx, site.ListOptions{})
					return names(p.Items, zoneName), err
				},
				func() ([]string, error) {
					p, err := tx.Groups().List(ctx, site.ListOptions{})
					return names(p.Items, func(g site.Group) string { return g.Name }), err
				},
			} {
				got, err := col()
				if err != nil {
					return err
				}
				if len(got) != len(committed) {
					t.Errorf("%d objects, want %d", len(got), len(committed))
				}
				for _, n := range got {
					if !committed[n] {
						t.Errorf("%s is stored but its update failed", n)
					}
				}
			}
			return nil
		})
	})
}
