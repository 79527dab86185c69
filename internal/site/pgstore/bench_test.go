package pgstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/storetest"
)

// The benchmarks report the round trips of an operation beside its time:
// on a WAN, each costs the latency between broker and database.

// openDemo opens a store over a wire, holding the demo-size configuration.
func openDemo(b *testing.B) (*Store, *wire) {
	ctx := context.Background()
	s, w := openWire(b, Options{})
	if err := s.Update(ctx, func(tx site.Tx) error {
		_, err := site.ApplyConfig(ctx, tx, storetest.GenerateConfig(storetest.DemoSize), false)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return s, w
}

// reportRoundTrips reports the wire's round trips per operation since
// before.
func reportRoundTrips(b *testing.B, w *wire, before int64) {
	b.ReportMetric(float64(w.turns.Load()-before)/float64(b.N), "round-trips/op")
}

// BenchmarkApplyDemoSize applies the demo-size configuration to an empty
// database in one Update, as `usher apply` does on a new site: one round
// trip per object.
func BenchmarkApplyDemoSize(b *testing.B) {
	ctx := context.Background()
	var turns int64
	for b.Loop() {
		b.StopTimer()
		s, w := openWire(b, Options{})
		desired := storetest.GenerateConfig(storetest.DemoSize)
		before := w.turns.Load()
		b.StartTimer()
		if err := s.Update(ctx, func(tx site.Tx) error {
			_, err := site.ApplyConfig(ctx, tx, desired, false)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		turns += w.turns.Load() - before
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(turns)/float64(b.N), "round-trips/op")
}

// BenchmarkLoadConfigDemoSize reads the whole demo-size configuration, as
// every admin write and every broker snapshot does.
func BenchmarkLoadConfigDemoSize(b *testing.B) {
	ctx := context.Background()
	s, w := openDemo(b)
	before := w.turns.Load()
	for b.Loop() {
		if err := s.View(ctx, func(tx site.Tx) error {
			_, err := site.LoadConfig(ctx, tx)
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
	s.ending.Wait()
	reportRoundTrips(b, w, before)
}

// BenchmarkMutateDemoSize is one admin API write on the demo site: load,
// change one application, validate, diff and apply.
func BenchmarkMutateDemoSize(b *testing.B) {
	ctx := context.Background()
	s, w := openDemo(b)
	before := w.turns.Load()
	n := 0
	for b.Loop() {
		n++
		if err := s.Update(ctx, func(tx site.Tx) error {
			_, err := site.Mutate(ctx, tx, func(c *site.Config) error {
				c.Applications[0].Description = fmt.Sprint("edit ", n)
				return nil
			})
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
	reportRoundTrips(b, w, before)
}

// BenchmarkClaim is a broker's launch on the demo site: lock and read a
// machine's status, count a session on it, record the session.
func BenchmarkClaim(b *testing.B) {
	ctx := context.Background()
	s, w := openDemo(b)
	var machine, user, resource, dg string
	if err := s.View(ctx, func(tx site.Tx) error {
		c, err := site.LoadConfig(ctx, tx)
		if err != nil {
			return err
		}
		machine, user = c.Machines[0].Name, c.Users[0].Name
		resource, dg = c.Applications[0].Name, c.Applications[0].DeliveryGroups[0]
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	s.ending.Wait()
	before := w.turns.Load()
	n := 0
	for b.Loop() {
		n++
		if err := s.Update(ctx, func(tx site.Tx) error {
			st, err := tx.MachineStatus(ctx, machine)
			if err != nil {
				return err
			}
			st.Sessions++
			if err := tx.SetMachineStatus(ctx, machine, st); err != nil {
				return err
			}
			return tx.Sessions().Create(ctx, site.Session{ID: fmt.Sprint("bench-", n), User: user, Resource: resource,
				DeliveryGroup: dg, Machine: machine, State: site.SessionPending})
		}); err != nil {
			b.Fatal(err)
		}
	}
	reportRoundTrips(b, w, before)
}

// BenchmarkPlace is a broker's launch on the demo site with Place: a
// reconnection check that finds nothing, a candidate refused (not
// registered) and the claim of the next, with the session recorded. The
// launches go round the site's users, so that each has a few sessions, as
// users do.
func BenchmarkPlace(b *testing.B) {
	ctx := context.Background()
	s, w := openDemo(b)
	var refused, machine, resource, dg string
	var users []string
	if err := s.Update(ctx, func(tx site.Tx) error {
		c, err := site.LoadConfig(ctx, tx)
		if err != nil {
			return err
		}
		refused, machine = c.Machines[0].Name, c.Machines[1].Name
		for _, u := range c.Users {
			users = append(users, u.Name)
		}
		resource, dg = c.Applications[0].Name, c.Applications[0].DeliveryGroups[0]
		return tx.SetMachineStatus(ctx, machine, site.MachineStatus{Registration: site.Registered})
	}); err != nil {
		b.Fatal(err)
	}
	n := 0
	place := func() {
		n++
		placed, err := s.Place(ctx, site.Placement{
			Session: site.Session{ID: fmt.Sprint("bench-", n), User: users[n%len(users)], Resource: resource, DeliveryGroup: dg,
				State: site.SessionPending},
			// The user's sessions are of resource; none of them serves
			// the rule's.
			Reconnect:  &site.ReconnectRule{Groups: []string{dg}, Policies: []site.ReconnectPolicy{site.ReconnectAlways}, Resources: []string{"none"}},
			Candidates: []site.Candidate{{Machine: refused}, {Machine: machine, LoadIndex: 100}},
		})
		if err != nil {
			b.Fatal(err)
		}
		if placed.Session.Machine != machine {
			b.Fatalf("placed %+v, want a session on %s", placed, machine)
		}
	}
	place() // prepares the statements
	s.ending.Wait()
	before := w.turns.Load()
	for b.Loop() {
		place()
	}
	reportRoundTrips(b, w, before)
}
