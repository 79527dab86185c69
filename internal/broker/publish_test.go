package broker_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
)

// TestPublish commits changes from the broker's configuration and
// publishes them out of order: the broker serves the newest, never goes
// back, and serves what a reload of the site gives.
func TestPublish(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, 5, 10, nil)
	addApp := func(name string) *site.Mutation {
		t.Helper()
		snap := h.b.Snapshot()
		var m *site.Mutation
		err := h.store.Update(ctx, func(tx site.Tx) (err error) {
			m, err = site.MutateFrom(ctx, tx, snap.Config(), snap.Version, func(c *site.Config) error {
				c.Applications = append(c.Applications, site.Resource{Name: name, DisplayName: name, CommandLine: "/bin/" + name,
					DeliveryGroups: []string{"Apps"}})
				return nil
			})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	v := h.b.Snapshot().Version
	first := addApp("first")
	second := addApp("second") // from the same snapshot: the site moved, so it loads
	if first.Version != v+1 || second.Version != v+2 {
		t.Fatalf("versions %d and %d, want %d and %d", first.Version, second.Version, v+1, v+2)
	}

	if !h.b.Publish(second.Version, second.Config) {
		t.Fatal("the newer configuration was not published")
	}
	if h.b.Publish(first.Version, first.Config) {
		t.Fatal("an older configuration was published after a newer one")
	}
	if h.b.Publish(second.Version, second.Config) {
		t.Fatal("a configuration was published twice")
	}
	s := h.b.Snapshot()
	if s.Version != v+2 {
		t.Fatalf("serving version %d, want %d", s.Version, v+2)
	}
	for _, name := range []string{"first", "second"} {
		if _, ok := s.Resource(name); !ok {
			t.Errorf("%s is not served", name)
		}
		if groups := s.EntitlementsOf("u0002").Groups(name); fmt.Sprint(groups) != "[Apps]" {
			t.Errorf("u0002 may use %s through %v, want [Apps]", name, groups)
		}
	}

	// Refresh finds the site at the version published, and keeps it.
	if err := h.b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if h.b.Snapshot() != s {
		t.Error("Refresh replaced the published snapshot of the site's version")
	}
	var loaded *site.Config
	h.store.View(ctx, func(tx site.Tx) (err error) { loaded, err = site.LoadConfig(ctx, tx); return err })
	if !reflect.DeepEqual(s.Config(), loaded) {
		t.Errorf("the published configuration is not the site's:\n%s", site.Diff(loaded, s.Config()))
	}
}
