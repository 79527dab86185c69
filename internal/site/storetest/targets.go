package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

func testTargets(t *testing.T, open func(*testing.T) site.Store) {
	pin := func(n int) *int { return &n }

	t.Run("CreateGetUpdateDelete", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		v := version(t, s)
		// A MAC in another form is stored normalised; a missing cache
		// mode takes the default.
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Targets().Create(ctx, site.Target{Name: "pc01", MAC: "52-54-00-AB-CD-EF", Image: "win11"})
		})
		wantVersion(t, s, v+1)
		want := site.Target{Name: "pc01", MAC: "52:54:00:ab:cd:ef", Image: "win11", Cache: site.CacheRAMOverflow}
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			got, err := tx.Targets().Get(ctx, "pc01")
			if err != nil {
				return err
			}
			if !same(got, want) {
				t.Errorf("Get = %+v, want %+v", got, want)
			}
			return nil
		})
		// A pinned version, version 0 included, reads back as pinned.
		for _, n := range []int{0, 7} {
			update(t, s, func(ctx context.Context, tx site.Tx) error {
				return tx.Targets().Update(ctx, site.Target{Name: "pc01", MAC: "52:54:00:ab:cd:ef", Image: "win11",
					Version: pin(n), Cache: site.CacheRAM, RAM: "256MiB", Description: "desk 1"})
			})
			view(t, s, func(ctx context.Context, tx site.Tx) error {
				got, err := tx.Targets().Get(ctx, "pc01")
				if err != nil {
					return err
				}
				if got.Version == nil || *got.Version != n || got.Cache != site.CacheRAM || got.RAM != "256MiB" || got.Description != "desk 1" {
					t.Errorf("after update: %+v (version %v), want version %d", got, got.Version, n)
				}
				return nil
			})
		}
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Targets().Delete(ctx, "pc01") })
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			_, err := tx.Targets().Get(ctx, "pc01")
			wantCode(t, err, site.ENotFound)
			return nil
		})
	})

	t.Run("BadFieldsAreRefused", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for _, tc := range []struct {
			target site.Target
			field  string
		}{
			{site.Target{Name: "a", MAC: "not-a-mac", Image: "win11"}, "mac"},
			{site.Target{Name: "a", MAC: "02:00:5e:10:00:00:00:01", Image: "win11"}, "mac"}, // EUI-64
			{site.Target{Name: "a", MAC: "52:54:00:00:00:01", Image: ""}, "image"},
			{site.Target{Name: "a", MAC: "52:54:00:00:00:01", Image: "../etc"}, "image"},
			{site.Target{Name: "a", MAC: "52:54:00:00:00:01", Image: "w", Cache: "tmpfs"}, "cache"},
			{site.Target{Name: "a", MAC: "52:54:00:00:00:01", Image: "w", RAM: "lots"}, "ram"},
			{site.Target{Name: "a", MAC: "52:54:00:00:00:01", Image: "w", Version: pin(-1)}, "version"},
		} {
			err := try(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Targets().Create(ctx, tc.target) })
			wantCode(t, err, site.EInvalid)
			if got := site.ErrorField(err, site.KindTarget, "a"); got != tc.field {
				t.Errorf("%+v: error %v at field %q, want %q", tc.target, err, got, tc.field)
			}
		}
	})

	t.Run("ApplyChecksUniqueMACsAndMovesOne", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		c := base()
		c.Targets = []site.Target{
			{Name: "pc01", MAC: "52:54:00:00:00:01", Image: "win11"},
			{Name: "pc02", MAC: "52:54:00:00:00:01", Image: "win11"},
		}
		err := try(t, s, func(ctx context.Context, tx site.Tx) error {
			_, err := site.ApplyConfig(ctx, tx, c, false)
			return err
		})
		wantCode(t, err, site.EConflict)
		if got := site.ErrorField(err, site.KindTarget, "pc02"); got != "mac" {
			t.Errorf("duplicate MAC: %v at field %q, want mac", err, got)
		}
		// One plan renames a target: the MAC moves from the deleted one
		// to the created one.
		c.Targets = c.Targets[:1]
		apply(t, s, c)
		c = base()
		c.Targets = []site.Target{{Name: "pc-one", MAC: "52:54:00:00:00:01", Image: "win11", Version: pin(2)}}
		apply(t, s, c)
		// MACs swapped between two targets in one plan.
		c.Targets = append(c.Targets, site.Target{Name: "pc-two", MAC: "52:54:00:00:00:02", Image: "win11"})
		apply(t, s, c)
		c.Targets[0].MAC, c.Targets[1].MAC = c.Targets[1].MAC, c.Targets[0].MAC
		apply(t, s, c)
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			cfg, err := site.LoadConfig(ctx, tx)
			if err != nil {
				return err
			}
			if len(cfg.Targets) != 2 || cfg.Targets[0].MAC != "52:54:00:00:00:02" || cfg.Targets[1].MAC != "52:54:00:00:00:01" {
				t.Errorf("targets after the swap: %+v", cfg.Targets)
			}
			return nil
		})
	})

	t.Run("BootLog", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		v := version(t, s)
		at := ms(2031, 5, 6, 7, 8, 9, 123, time.UTC)
		for i, step := range []site.BootStep{site.BootScript, site.BootKernel, site.BootInitrd} {
			update(t, s, func(ctx context.Context, tx site.Tx) error {
				return tx.Boots().Record(ctx, site.BootRecord{Time: at.Add(time.Duration(i) * time.Second), Target: "pc01",
					MAC: "52:54:00:00:00:01", Image: "win11", Version: 3, Cache: site.CacheServerDisk, Step: step, Remote: "10.0.0.5:40000"})
			})
		}
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Boots().Record(ctx, site.BootRecord{Target: "pc02", MAC: "52:54:00:00:00:02", Image: "gone",
				Cache: site.CacheRAM, Step: site.BootScript, Remote: "10.0.0.6:1", Error: `image "gone" is not in the image store`})
		})
		wantVersion(t, s, v) // runtime data

		all := listBoots(t, s, site.BootFilter{}, site.ListOptions{})
		if len(all.Items) != 4 || all.Total != 4 {
			t.Fatalf("boot log = %+v, want 4 records", all)
		}
		if all.Items[0].Target != "pc02" || all.Items[0].Error == "" || all.Items[0].Time.IsZero() {
			t.Errorf("newest record = %+v", all.Items[0])
		}
		want := site.BootRecord{ID: all.Items[3].ID, Time: at, Target: "pc01", MAC: "52:54:00:00:00:01", Image: "win11",
			Version: 3, Cache: site.CacheServerDisk, Step: site.BootScript, Remote: "10.0.0.5:40000"}
		if got := all.Items[3]; !same(got, want) || got.Time.Location() != time.UTC {
			t.Errorf("oldest record = %+v, want %+v", got, want)
		}
		p1 := listBoots(t, s, site.BootFilter{Target: "pc01"}, site.ListOptions{Limit: 2})
		if len(p1.Items) != 2 || p1.Total != 3 || p1.Next == "" || p1.Items[0].Step != site.BootInitrd {
			t.Fatalf("first page of pc01 = %+v", p1)
		}
		p2 := listBoots(t, s, site.BootFilter{Target: "pc01"}, site.ListOptions{Limit: 2, After: p1.Next})
		if len(p2.Items) != 1 || p2.Next != "" || p2.Items[0].Step != site.BootScript {
			t.Fatalf("second page of pc01 = %+v", p2)
		}
		if p := listBoots(t, s, site.BootFilter{MAC: "52:54:00:00:00:02"}, site.ListOptions{}); len(p.Items) != 1 {
			t.Errorf("by MAC: %+v", p)
		}
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			_, err := tx.Boots().List(ctx, site.BootFilter{}, site.ListOptions{After: "x"})
			wantCode(t, err, site.EInvalid)
			if err := tx.Boots().Record(ctx, site.BootRecord{Target: "a", Step: site.BootScript}); err == nil {
				t.Error("Record in a View succeeded")
			}
			return nil
		})
		err := try(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Boots().Record(ctx, site.BootRecord{Target: "pc01", Step: "firmware"})
		})
		wantCode(t, err, site.EInvalid)
	})

	t.Run("BootLogKeepsTheLastRecordsOfEachTarget", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			for i := range site.BootLogKeep + 5 {
				if err := tx.Boots().Record(ctx, site.BootRecord{Target: "busy", MAC: "52:54:00:00:00:09", Image: "w",
					Step: site.BootScript, Remote: fmt.Sprint(i)}); err != nil {
					return err
				}
			}
			// Another target's record, and one too old to keep.
			if err := tx.Boots().Record(ctx, site.BootRecord{Target: "quiet", Image: "w", Step: site.BootScript, Remote: "q"}); err != nil {
				return err
			}
			return tx.Boots().Record(ctx, site.BootRecord{Target: "old", Image: "w", Step: site.BootScript,
				Time: time.Now().Add(-site.BootLogMaxAge - time.Hour)})
		})
		p := listBoots(t, s, site.BootFilter{Target: "busy"}, site.ListOptions{})
		if p.Total != site.BootLogKeep || p.Items[0].Remote != fmt.Sprint(site.BootLogKeep+4) || p.Items[len(p.Items)-1].Remote != "5" {
			t.Errorf("busy target: %d records, newest %q, oldest %q; want the last %d", p.Total, p.Items[0].Remote, p.Items[len(p.Items)-1].Remote, site.BootLogKeep)
		}
		if p := listBoots(t, s, site.BootFilter{Target: "quiet"}, site.ListOptions{}); p.Total != 1 {
			t.Errorf("another target's records: %d, want 1", p.Total)
		}
		if p := listBoots(t, s, site.BootFilter{Target: "old"}, site.ListOptions{}); p.Total != 0 {
			t.Errorf("a record older than %s is kept", site.BootLogMaxAge)
		}
	})
}

func listBoots(t *testing.T, s site.Store, f site.BootFilter, opts site.ListOptions) site.Page[site.BootRecord] {
	t.Helper()
	var p site.Page[site.BootRecord]
	view(t, s, func(ctx context.Context, tx site.Tx) (err error) {
		p, err = tx.Boots().List(ctx, f, opts)
		return err
	})
	return p
}
