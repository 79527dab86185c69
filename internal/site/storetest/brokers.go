package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

func testBrokers(t *testing.T, open func(*testing.T) site.Store) {
	s := openBase(t, open)
	ctx := t.Context()
	now := ms(2026, 11, 25, 6, 0, 0, 0, nil)
	a := site.BrokerRecord{Name: "broker-a", Zone: "hq", Address: "10.0.0.9:8080", Instance: "i-1", StartedAt: now, LastSeen: now}

	t.Run("RecordsRoundTripWithoutMovingTheVersion", func(t *testing.T) {
		v := version(t, s)
		if err := site.ClaimBrokerName(ctx, s, a, now, 15*time.Second); err != nil {
			t.Fatal(err)
		}
		wantVersion(t, s, v)
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			got, err := tx.Brokers().Get(ctx, "broker-a")
			if err != nil || !same(got, a) {
				t.Errorf("get = %+v, %v; want %+v", got, err, a)
			}
			return nil
		})
	})

	t.Run("ALiveNameIsNotTaken", func(t *testing.T) {
		b := a
		b.Instance, b.Address = "i-2", "10.0.0.10:8080"
		err := site.ClaimBrokerName(ctx, s, b, now.Add(5*time.Second), 15*time.Second)
		wantMessage(t, err, site.EConflict, "10.0.0.9:8080")
		if err := site.BrokerAlive(ctx, s, "broker-a", "i-1", now.Add(10*time.Second)); err != nil {
			t.Fatalf("alive: %v", err)
		}
		// Past the stale bound, the name is free again.
		if err := site.ClaimBrokerName(ctx, s, b, now.Add(30*time.Second), 15*time.Second); err != nil {
			t.Fatalf("claim of a stale name: %v", err)
		}
		wantCode(t, site.BrokerAlive(ctx, s, "broker-a", "i-1", now.Add(31*time.Second)), site.EConflict)
	})

	t.Run("ListAndDelete", func(t *testing.T) {
		c := site.BrokerRecord{Name: "broker-c", Zone: "branch", Instance: "i-3", StartedAt: now, LastSeen: now}
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Brokers().Create(ctx, c) })
		view(t, s, func(ctx context.Context, tx site.Tx) error {
			p, err := tx.Brokers().List(ctx, site.ListOptions{})
			if err != nil || p.Total != 2 || p.Items[0].Name != "broker-a" || p.Items[1].Zone != "branch" {
				t.Errorf("list = %+v, %v", p, err)
			}
			return nil
		})
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Brokers().Delete(ctx, "broker-c") })
		wantCode(t, try(t, s, func(ctx context.Context, tx site.Tx) error {
			return tx.Brokers().Create(ctx, site.BrokerRecord{Name: "broker-d"})
		}), site.EInvalid)
	})
}
