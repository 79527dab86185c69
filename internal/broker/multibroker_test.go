package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/pgtest"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/pgstore"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// TestThreeBrokersOnePostgres: three brokers, each with its own
// connections to one PostgreSQL site DB as three processes would have,
// take 3,300 concurrent launches for 1,140 seats, 300 of them a second
// launch of a user already launching through another broker. No machine
// goes over its limit, every seat is given, every acknowledged launch is
// exactly one session (a user's two launches the same one), and none is
// lost; sessions started through one broker are logged off through
// another.
func TestThreeBrokersOnePostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	const users, limit, twice = 3000, 20, 300
	cfg := testSite(users, limit)
	seats := 57 * limit

	var brokers []*broker.Broker
	var stores []site.Store
	for i := range 3 {
		store, err := pgstore.Open(ctx, dsn, pgstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		if i == 0 {
			if err := store.Update(ctx, func(tx site.Tx) error { _, err := site.ApplyConfig(ctx, tx, cfg, false); return err }); err != nil {
				t.Fatal(err)
			}
		}
		b, err := broker.New(ctx, broker.Config{Store: store, Control: sitetest.NewControl(), AllowAddressChange: true, MaxConcurrent: -1})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			for j, m := range cfg.Machines {
				if err := b.Register(ctx, sitetest.Registration(j, m.Name)); err != nil {
					t.Fatal(err)
				}
			}
		}
		brokers, stores = append(brokers, b), append(stores, store)
	}

	type result struct {
		user string
		l    *broker.Launch
		err  error
	}
	results := make(chan result, users+twice)
	start := make(chan struct{})
	var wg sync.WaitGroup
	launch := func(user string, via int) {
		wg.Go(func() {
			<-start
			l, err := brokers[via].Launch(ctx, broker.LaunchRequest{User: user, Resource: "calc"})
			results <- result{user, l, err}
		})
	}
	for i := 1; i <= users; i++ {
		user := fmt.Sprintf("u%04d", i)
		launch(user, i%3)
		if i <= twice {
			launch(user, (i+1)%3)
		}
	}
	close(start)
	wg.Wait()
	close(results)

	ok := map[string]*broker.Launch{}
	failed := map[string]int{}
	for r := range results {
		if r.err != nil {
			failed[site.ErrorCode(r.err)]++
			continue
		}
		if prev, seen := ok[r.user]; seen && prev.Session.ID != r.l.Session.ID {
			t.Errorf("%s launched twice into two sessions: %s on %s and %s on %s", r.user, prev.Session.ID, prev.Session.Machine, r.l.Session.ID, r.l.Session.Machine)
		}
		ok[r.user] = r.l
	}
	for code := range failed {
		if code != site.ENoCapacity {
			t.Errorf("launches failed with %s: %v", code, failed)
		}
	}
	if len(ok) != seats {
		t.Errorf("%d users seated, want every one of the %d seats given (failures %v)", len(ok), seats, failed)
	}
	limits := map[string]int{}
	for _, m := range cfg.Machines {
		limits[m.Name] = limit
	}
	h := &harness{t: t, store: stores[0]}
	h.check(ok, limits)

	// Log a hundred sessions off through a broker other than the one
	// that started them; the rest stay.
	n := 0
	for user, l := range ok {
		if n == 100 {
			break
		}
		n++
		via := brokers[(n+1)%3]
		if err := via.Logoff(ctx, user, l.Session.ID); err != nil {
			t.Fatalf("log %s's session off through another broker: %v", user, err)
		}
		delete(ok, user)
	}
	h.check(ok, limits)
}
