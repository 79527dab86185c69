package storetest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

func testChangeHistory(t *testing.T, open func(*testing.T) site.Store) {

	t.Run("EmptyAtFirst", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		p := listChanges(t, s, site.ChangeFilter{}, site.ListOptions{})
		if len(p.Items) != 0 || p.Total != 0 || p.Next != "" {
			t.Errorf("a new site's history = %+v, want nothing", p)
		}
	})

	t.Run("RecordsCommitWithTheChangeUnderItsVersion", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		v := version(t, s)
		at := ms(2031, 5, 6, 7, 8, 9, 123, time.FixedZone("CEST", 2*3600))
		before := time.Now().Add(-time.Second)
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			if err := tx.History().Record(ctx, site.ChangeRecord{Actor: "admin:ada", Op: site.OpUpdate, Kind: site.KindSettings,
				Fields: []string{"name", "domain"}, Time: at}); err != nil {
				return err
			}
			// The record may come before the change it tells of.
			return tx.SetSettings(ctx, site.Settings{Name: "Recorded", Domain: "TEST"})
		})
		// A change that moves no version is recorded under the current one.
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.History().Record(ctx,
				site.ChangeRecord{Actor: "admin:ada", Op: site.OpCreate, Kind: site.KindAdmin, Name: "bob"},
				site.ChangeRecord{Actor: "admin:ada", Op: site.OpUpdate, Kind: site.KindAdmin, Name: "bob", Fields: []string{"password_hash"}})
		})
		after := time.Now().Add(time.Second)
		p := listChanges(t, s, site.ChangeFilter{}, site.ListOptions{})
		if len(p.Items) != 3 || p.Total != 3 || p.Next != "" {
			t.Fatalf("history = %+v, want 3 records on one page", p)
		}
		first, second, third := p.Items[2], p.Items[1], p.Items[0] // newest first
		if !(first.ID < second.ID && second.ID < third.ID) {
			t.Errorf("IDs %d, %d, %d do not grow in the order recorded", first.ID, second.ID, third.ID)
		}
		if first.Version != v+1 || second.Version != v+1 || third.Version != v+1 {
			t.Errorf("versions %d, %d, %d, want %d each", first.Version, second.Version, third.Version, v+1)
		}
		want := site.ChangeRecord{ID: first.ID, Version: v + 1, Time: at.UTC(), Actor: "admin:ada", Op: site.OpUpdate,
			Kind: site.KindSettings, Fields: []string{"name", "domain"}}
		if !same(first, want) || first.Time.Location() != time.UTC {
			t.Errorf("first record = %+v, want %+v in UTC", first, want)
		}
		if second.Op != site.OpCreate || second.Kind != site.KindAdmin || second.Name != "bob" || second.Fields != nil {
			t.Errorf("second record = %+v", second)
		}
		if !slices.Equal(third.Fields, []string{"password_hash"}) {
			t.Errorf("third record's fields = %q", third.Fields)
		}
		for _, r := range []site.ChangeRecord{second, third} {
			if r.Time.Before(before) || r.Time.After(after) || r.Time.Location() != time.UTC || r.Time.Nanosecond()%1000 != 0 {
				t.Errorf("record %d's time %v is not the time of Record, in UTC, to the microsecond", r.ID, r.Time)
			}
		}
	})

	t.Run("NothingWhenTheTransactionFails", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		err := try(t, s, func(ctx context.Context, tx site.Tx) error {
			if err := tx.History().Record(ctx, site.ChangeRecord{Actor: "apply", Op: site.OpUpdate, Kind: site.KindSettings}); err != nil {
				return err
			}
			if err := tx.SetSettings(ctx, site.Settings{Name: "Gone", Domain: "TEST"}); err != nil {
				return err
			}
			return errTest
		})
		if err != errTest {
			t.Fatalf("update: %v", err)
		}
		if p := listChanges(t, s, site.ChangeFilter{}, site.ListOptions{}); p.Total != 0 || len(p.Items) != 0 {
			t.Errorf("a rolled-back transaction left %+v", p)
		}
	})

	t.Run("InvalidRecordsAreRefused", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		ok := site.ChangeRecord{Actor: "apply", Op: site.OpCreate, Kind: site.KindZone, Name: "z"}
		for name, bad := range map[string]site.ChangeRecord{
			"NoActor": {Op: site.OpCreate, Kind: site.KindZone, Name: "z"},
			"BadOp":   {Actor: "apply", Op: "rename", Kind: site.KindZone, Name: "z"},
			"NoKind":  {Actor: "apply", Op: site.OpDelete, Name: "z"},
		} {
			var recErr error
			update(t, s, func(ctx context.Context, tx site.Tx) error {
				recErr = tx.History().Record(ctx, ok, bad)
				return nil
			})
			if site.ErrorCode(recErr) != site.EInvalid {
				t.Errorf("%s: Record = %v, want invalid", name, recErr)
			}
		}
		if p := listChanges(t, s, site.ChangeFilter{}, site.ListOptions{}); p.Total != 0 {
			t.Errorf("refused records left %+v", p)
		}
	})

	t.Run("ViewsCannotRecord", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		err := s.View(t.Context(), func(tx site.Tx) error {
			return tx.History().Record(t.Context(), site.ChangeRecord{Actor: "apply", Op: site.OpCreate, Kind: site.KindZone, Name: "z"})
		})
		if err == nil {
			t.Error("a View recorded a change")
		}
	})

	t.Run("FiltersAndPages", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		var recs []site.ChangeRecord
		for i := range 7 {
			actor := site.AdminActor("ada")
			if i%2 == 1 {
				actor = site.ActorApply
			}
			kind, name := site.KindZone, fmt.Sprint("z", i%3)
			if i >= 5 {
				kind = site.KindCatalog
			}
			recs = append(recs, site.ChangeRecord{Actor: actor, Op: site.OpUpdate, Kind: kind, Name: name})
		}
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.History().Record(ctx, recs...) })
		// recs[i] has the i-th smallest ID.
		all := listChanges(t, s, site.ChangeFilter{}, site.ListOptions{})
		if len(all.Items) != len(recs) {
			t.Fatalf("history has %d records, want %d", len(all.Items), len(recs))
		}
		index := func(p site.Page[site.ChangeRecord]) []int {
			var out []int
			for _, r := range p.Items {
				out = append(out, slices.IndexFunc(all.Items, func(a site.ChangeRecord) bool { return a.ID == r.ID }))
			}
			return out
		}
		for _, c := range []struct {
			name string
			f    site.ChangeFilter
			want []int // indexes into all (newest first)
		}{
			{"Kind", site.ChangeFilter{Kind: site.KindCatalog}, []int{0, 1}},
			{"KindAndName", site.ChangeFilter{Kind: site.KindZone, Name: "z0"}, []int{3, 6}},
			{"Name", site.ChangeFilter{Name: "z2"}, []int{1, 4}},
			{"Actor", site.ChangeFilter{Actor: site.ActorApply}, []int{1, 3, 5}},
			{"Nothing", site.ChangeFilter{Kind: site.KindUser}, nil},
		} {
			p := listChanges(t, s, c.f, site.ListOptions{})
			if got := index(p); !slices.Equal(got, c.want) || p.Total != len(c.want) {
				t.Errorf("%s: records %v (total %d), want %v", c.name, got, p.Total, c.want)
			}
		}

		var got []int
		after, pages := "", 0
		for {
			p := listChanges(t, s, site.ChangeFilter{}, site.ListOptions{After: after, Limit: 3})
			pages++
			if p.Total != len(recs) {
				t.Errorf("page %d: total %d, want %d", pages, p.Total, len(recs))
			}
			got = append(got, index(p)...)
			if p.Next == "" {
				break
			}
			if want := strconv.FormatInt(p.Items[len(p.Items)-1].ID, 10); p.Next != want {
				t.Fatalf("page %d: next %q, want the last ID %s", pages, p.Next, want)
			}
			after = p.Next
		}
		if want := []int{0, 1, 2, 3, 4, 5, 6}; !slices.Equal(got, want) || pages != 3 {
			t.Errorf("pages of 3 gave %v in %d pages, want %v in 3", got, pages, want)
		}
		p := listChanges(t, s, site.ChangeFilter{Actor: site.ActorApply}, site.ListOptions{Limit: 2})
		if got := index(p); !slices.Equal(got, []int{1, 3}) || p.Total != 3 || p.Next == "" {
			t.Errorf("a filtered first page: %v (total %d, next %q)", got, p.Total, p.Next)
		}

		err := s.View(t.Context(), func(tx site.Tx) error {
			_, err := tx.History().List(t.Context(), site.ChangeFilter{}, site.ListOptions{After: "zone"})
			return err
		})
		wantCode(t, err, site.EInvalid)
	})

	t.Run("ForgetsRecordsOlderThanMaxAge", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		old := time.Now().Add(-site.ChangeHistoryMaxAge - time.Hour)
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.History().Record(ctx,
				site.ChangeRecord{Actor: "apply", Op: site.OpCreate, Kind: site.KindZone, Name: "old", Time: old},
				site.ChangeRecord{Actor: "apply", Op: site.OpCreate, Kind: site.KindZone, Name: "new"})
		})
		p := listChanges(t, s, site.ChangeFilter{}, site.ListOptions{})
		if len(p.Items) != 1 || p.Items[0].Name != "new" {
			t.Errorf("history = %+v, want only the record within the maximum age", p.Items)
		}
	})
}

// RunChangeHistoryKeep checks that a store keeps the last keep change
// records and forgets the older ones as it records new ones. open returns
// a new, empty store that keeps keep records (a store's option: the
// default, site.ChangeHistoryKeep, is too many for a test).
func RunChangeHistoryKeep(t *testing.T, open func(t *testing.T, keep int) site.Store) {
	const keep = 5
	s := open(t, keep)
	recs := make([]site.ChangeRecord, keep+3)
	for i := range recs {
		recs[i] = site.ChangeRecord{Actor: "apply", Op: site.OpCreate, Kind: site.KindMachine, Name: fmt.Sprint("m", i)}
	}
	update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.History().Record(ctx, recs[:2]...) })
	update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.History().Record(ctx, recs[2:]...) })
	p := listChanges(t, s, site.ChangeFilter{}, site.ListOptions{})
	got := names(p.Items, func(r site.ChangeRecord) string { return r.Name })
	if want := []string{"m7", "m6", "m5", "m4", "m3"}; !slices.Equal(got, want) || p.Total != keep {
		t.Errorf("history = %q (total %d), want %q", got, p.Total, want)
	}
}

// listChanges lists the history in a View and fails the test on an error.
func listChanges(t *testing.T, s site.Store, f site.ChangeFilter, opts site.ListOptions) site.Page[site.ChangeRecord] {
	t.Helper()
	var p site.Page[site.ChangeRecord]
	view(t, s, func(ctx context.Context, tx site.Tx) (err error) {
		p, err = tx.History().List(ctx, f, opts)
		return err
	})
	return p
}
