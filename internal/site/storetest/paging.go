package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
)

func testResourceNamespace(t *testing.T, open func(*testing.T) site.Store) {
	s := openBase(t, open)

	t.Run("ApplicationWithDesktopNameIsConflict", func(t *testing.T) {
		err := try(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Applications().Create(ctx, site.Resource{Kind: site.Application, Name: "vdi-desktop", DisplayName: "X", CommandLine: "x.exe"})
		})
		wantMessage(t, err, site.EConflict, `"vdi-desktop"`)
	})

	t.Run("DesktopWithApplicationNameIsConflict", func(t *testing.T) {
		err := try(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Desktops().Create(ctx, site.Resource{Kind: site.Desktop, Name: "notepad", DisplayName: "X"})
		})
		wantMessage(t, err, site.EConflict, `"notepad"`)
	})

	t.Run("EachCollectionSeesOnlyItsKind", func(t *testing.T) {
		err := try(t, s, func(ctx context.Context, tx site.Tx) error {
			if _, err := tx.Desktops().Get(ctx, "notepad"); site.ErrorCode(err) != site.ENotFound {
				t.Errorf("desktops get notepad: %v, want not found", err)
			}
			if _, err := tx.Applications().Get(ctx, "vdi-desktop"); site.ErrorCode(err) != site.ENotFound {
				t.Errorf("applications get vdi-desktop: %v, want not found", err)
			}
			if err := tx.Desktops().Delete(ctx, "notepad"); site.ErrorCode(err) != site.ENotFound {
				t.Errorf("desktops delete notepad: %v, want not found", err)
			}
			if err := tx.Applications().Delete(ctx, "branch-desktop"); site.ErrorCode(err) != site.ENotFound {
				t.Errorf("applications delete branch-desktop: %v, want not found", err)
			}
			d := site.Resource{Kind: site.Desktop, Name: "calc", DisplayName: "Calc desktop", DeliveryGroups: []string{"vdi"}}
			if err := tx.Desktops().Update(ctx, d); site.ErrorCode(err) != site.ENotFound {
				t.Errorf("desktops update calc: %v, want not found", err)
			}
			return errTest
		})
		if err != errTest {
			t.Fatalf("update: %v", err)
		}
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			if _, err := tx.Applications().Get(ctx, "notepad"); err != nil {
				t.Errorf("notepad: %v", err)
			}
			if _, err := tx.Desktops().Get(ctx, "branch-desktop"); err != nil {
				t.Errorf("branch-desktop: %v", err)
			}
			apps, err := tx.Applications().List(ctx, site.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := names(apps.Items, resourceName), []string{"calc", "ledger", "notepad", "spare-app"}; !slices.Equal(got, want) || apps.Total != len(want) {
				t.Errorf("applications = %q (total %d), want %q", got, apps.Total, want)
			}
			desks, err := tx.Desktops().List(ctx, site.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := names(desks.Items, resourceName), []string{"branch-desktop", "vdi-desktop"}; !slices.Equal(got, want) || desks.Total != len(want) {
				t.Errorf("desktops = %q (total %d), want %q", got, desks.Total, want)
			}
			for _, r := range apps.Items {
				if r.Kind != site.Application {
					t.Errorf("application %s has kind %q", r.Name, r.Kind)
				}
			}
			for _, r := range desks.Items {
				if r.Kind != site.Desktop {
					t.Errorf("desktop %s has kind %q", r.Name, r.Kind)
				}
			}
			return nil
		})
	})

	t.Run("ResourceOfTheOtherKindIsInvalid", func(t *testing.T) {
		err := try(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Applications().Create(ctx, site.Resource{Kind: site.Desktop, Name: "misfiled", DisplayName: "X"})
		})
		wantCode(t, err, site.EInvalid)
		err = try(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Desktops().Create(ctx, site.Resource{Kind: site.Application, Name: "misfiled", DisplayName: "X", CommandLine: "x"})
		})
		wantCode(t, err, site.EInvalid)
	})
}

func resourceName(r site.Resource) string { return r.Name }

// walk lists every page of limit items and returns the items in order,
// checking Total and Next on every page.
func walk[T any](t *testing.T, list func(opts site.ListOptions) (site.Page[T], error), limit, total int, name func(T) string) []T {
	t.Helper()
	var all []T
	after := ""
	for pages := 0; ; pages++ {
		if pages > total+1 {
			t.Fatalf("more than %d pages", pages)
		}
		p, err := list(site.ListOptions{After: after, Limit: limit})
		if err != nil {
			t.Fatalf("list after %q: %v", after, err)
		}
		if p.Total != total {
			t.Fatalf("list after %q: total %d, want %d", after, p.Total, total)
		}
		if len(p.Items) > limit {
			t.Fatalf("list after %q: %d items, limit %d", after, len(p.Items), limit)
		}
		all = append(all, p.Items...)
		if p.Next == "" {
			if len(all) != total {
				t.Fatalf("Next is empty after %d of %d items", len(all), total)
			}
			return all
		}
		if len(p.Items) != limit {
			t.Fatalf("list after %q: short page of %d items with Next %q", after, len(p.Items), p.Next)
		}
		if last := name(p.Items[len(p.Items)-1]); p.Next != last {
			t.Fatalf("Next = %q, want the last item's name %q", p.Next, last)
		}
		after = p.Next
	}
}

func testPaging(t *testing.T, open func(*testing.T) site.Store) {
	t.Run("WalkEveryPage", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		const n = 400
		var want []string
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			for i := range n {
				// Created out of order; names sort as numbers do.
				name := fmt.Sprintf("zone-%03d", (i*7)%n)
				if err := tx.Zones().Create(ctx, site.Zone{Name: name}); err != nil {
					return err
				}
			}
			return nil
		})
		for i := range n {
			want = append(want, fmt.Sprintf("zone-%03d", i))
		}
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			for _, limit := range []int{37, 40, 1, n, n + 1} {
				got := walk(t, func(o site.ListOptions) (site.Page[site.Zone], error) { return tx.Zones().List(ctx, o) },
					limit, n, func(z site.Zone) string { return z.Name })
				if !slices.Equal(names(got, func(z site.Zone) string { return z.Name }), want) {
					t.Fatalf("limit %d: pages do not hold every zone once, in order", limit)
				}
			}
			p, err := tx.Zones().List(ctx, site.ListOptions{})
			if err != nil || len(p.Items) != n || p.Total != n || p.Next != "" {
				t.Fatalf("list without limit: %d items, total %d, next %q, %v", len(p.Items), p.Total, p.Next, err)
			}
			p, err = tx.Zones().List(ctx, site.ListOptions{After: "zone-399"})
			if err != nil || len(p.Items) != 0 || p.Total != n || p.Next != "" {
				t.Fatalf("list after the last: %d items, total %d, next %q, %v", len(p.Items), p.Total, p.Next, err)
			}
			p, err = tx.Zones().List(ctx, site.ListOptions{After: "zone-1995", Limit: 3})
			if got := names(p.Items, func(z site.Zone) string { return z.Name }); err != nil || !slices.Equal(got, []string{"zone-200", "zone-201", "zone-202"}) {
				t.Fatalf("list after a name that does not exist = %q, %v", got, err)
			}
			return nil
		})
	})

	t.Run("PagesCarryListFields", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		const n = 100
		want := map[string]site.User{}
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			all := []string{"staff", "finance", "contractors", "auditors"}
			for i := range n {
				u := site.User{Name: fmt.Sprintf("pager%03d", i), Groups: all[:i%(len(all)+1)]}
				if i%2 == 1 {
					u.Groups = slices.Clone(u.Groups)
					slices.Reverse(u.Groups)
				}
				want[u.Name] = u
				if err := tx.Users().Create(ctx, u); err != nil {
					return err
				}
			}
			return nil
		})
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			total := n + len(base().Users)
			got := walk(t, func(o site.ListOptions) (site.Page[site.User], error) { return tx.Users().List(ctx, o) },
				7, total, func(u site.User) string { return u.Name })
			for _, u := range got {
				if w, ok := want[u.Name]; ok && !same(u, w) {
					t.Fatalf("listed %+v, want %+v", u, w)
				}
			}
			return nil
		})
	})

	t.Run("ResourcePagesCountOneKind", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			for i := range 30 {
				name := fmt.Sprintf("r%02d", i)
				var err error
				if i%3 == 0 {
					err = tx.Desktops().Create(ctx, site.Resource{Kind: site.Desktop, Name: name, DisplayName: name, DeliveryGroups: []string{"vdi", "branch"}})
				} else {
					err = tx.Applications().Create(ctx, site.Resource{Kind: site.Application, Name: name, DisplayName: name, CommandLine: "x", DeliveryGroups: []string{"apps"}})
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			apps := walk(t, func(o site.ListOptions) (site.Page[site.Resource], error) { return tx.Applications().List(ctx, o) },
				6, 20+len(base().Applications), resourceName)
			desks := walk(t, func(o site.ListOptions) (site.Page[site.Resource], error) { return tx.Desktops().List(ctx, o) },
				3, 10+len(base().Desktops), resourceName)
			for _, r := range apps {
				if r.Kind != site.Application || len(r.DeliveryGroups) != 1 {
					t.Fatalf("applications list %+v", r)
				}
			}
			for _, r := range desks {
				if r.Kind != site.Desktop || len(r.DeliveryGroups) != 1 && len(r.DeliveryGroups) != 2 {
					t.Fatalf("desktops list %+v", r)
				}
			}
			return nil
		})
	})
}
