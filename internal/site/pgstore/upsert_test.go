package pgstore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// TestUpsertSessions: one batch creates the sessions the store lacks,
// replaces the live ones, leaves the ended ones ended, and refuses, by
// ID, a new session whose machine does not exist, writing the others; in
// one round trip.
func TestUpsertSessions(t *testing.T) {
	ctx := context.Background()
	s, _ := openWire(t, Options{})
	fill(t, s)
	at := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	sess := func(id string, state site.SessionState) site.Session {
		x := site.Session{ID: id, User: "u", Resource: "app", DeliveryGroup: "dg", Machine: "m1", State: state, CreatedAt: at, UpdatedAt: at}
		if state == site.SessionLoggedOff {
			x.EndedAt = at
		}
		return x
	}
	if err := s.Update(ctx, func(tx site.Tx) error {
		for _, x := range []site.Session{sess("live", site.SessionActive), sess("ended", site.SessionLoggedOff)} {
			if err := tx.Sessions().Create(ctx, x); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	live := sess("live", site.SessionDisconnected)
	live.UpdatedAt = at.Add(time.Minute)
	revived := sess("ended", site.SessionActive) // an end is never undone
	orphan := sess("orphan", site.SessionActive)
	orphan.Machine = "gone"
	batch := []site.Session{sess("new", site.SessionPending), live, revived, orphan}
	var refused []string
	var trips int
	err := s.Update(ctx, func(stx site.Tx) (err error) {
		refused, err = stx.(site.SessionUpserter).UpsertSessions(ctx, batch)
		trips = stx.(*tx).roundTrips
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(refused, []string{"orphan"}) {
		t.Errorf("refused %v, want [orphan]", refused)
	}
	if trips != 1 {
		t.Errorf("%d round trips for a batch of %d, want 1", trips, len(batch))
	}
	want := map[string]site.Session{"new": sess("new", site.SessionPending), "live": live, "ended": sess("ended", site.SessionLoggedOff)}
	err = s.View(ctx, func(tx site.Tx) error {
		for id, w := range want {
			got, err := tx.Sessions().Get(ctx, id)
			if err != nil {
				return err
			}
			if got != w {
				t.Errorf("session %s after the upsert: %+v, want %+v", id, got, w)
			}
		}
		if _, err := tx.Sessions().Get(ctx, "orphan"); site.ErrorCode(err) != site.ENotFound {
			t.Errorf("the refused session: %v, want %s", err, site.ENotFound)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A batch that names a session twice is refused whole.
	err = s.Update(ctx, func(tx site.Tx) error {
		_, err := tx.(site.SessionUpserter).UpsertSessions(ctx, []site.Session{live, live})
		return err
	})
	if site.ErrorCode(err) != site.EInvalid {
		t.Errorf("a batch naming a session twice: %v, want %s", err, site.EInvalid)
	}
}
