package storetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// testPreferences checks users' own preferences: user data kept whole
// per user (matched as account names are, with or without a user of the
// site), validated, never moving the configuration version nor recorded
// in the change history, and deleted with their user.
func testPreferences(t *testing.T, open func(*testing.T) site.Store) {
	at := time.Date(2026, 11, 26, 9, 0, 0, 123456789, time.FixedZone("CET", 3600))
	alices := site.Preferences{
		Favourites: []string{"notepad", "vdi-desktop", "calc"},
		Recent:     []site.RecentLaunch{{Resource: "calc", At: at}, {Resource: "notepad", At: at.Add(-time.Hour)}},
	}
	get := func(t *testing.T, s site.Store, user string) (p site.Preferences) {
		t.Helper()
		view(t, s, func(ctx context.Context, tx site.Tx) (err error) {
			p, err = tx.Preferences().Get(ctx, user)
			return err
		})
		return p
	}
	put := func(t *testing.T, s site.Store, user string, p site.Preferences) (stored site.Preferences) {
		t.Helper()
		update(t, s, func(ctx context.Context, tx site.Tx) (err error) {
			stored, err = tx.Preferences().Put(ctx, user, p)
			return err
		})
		return stored
	}
	wantNone := func(t *testing.T, p site.Preferences, who string) {
		t.Helper()
		if p.Favourites == nil || p.Recent == nil || len(p.Favourites) != 0 || len(p.Recent) != 0 || !p.UpdatedAt.IsZero() {
			t.Fatalf("%s's preferences = %+v, want empty lists and no time", who, p)
		}
	}
	wantSame := func(t *testing.T, got, want site.Preferences) {
		t.Helper()
		if !slices.Equal(got.Favourites, want.Favourites) || len(got.Recent) != len(want.Recent) {
			t.Fatalf("preferences = %+v, want %+v", got, want)
		}
		for i, r := range want.Recent {
			if g := got.Recent[i]; g.Resource != r.Resource || !g.At.Equal(r.At.Truncate(time.Microsecond)) || g.At.Location() != time.UTC {
				t.Fatalf("recent launch %d = %+v, want %+v in UTC to the microsecond", i, g, r)
			}
		}
	}

	t.Run("NoneAtFirst", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		wantNone(t, get(t, s, "alice"), "alice")
		// A user the site does not hold (one from a directory) too.
		wantNone(t, get(t, s, "from-the-directory"), "a directory user")
	})

	t.Run("PutKeepsTheWholeDocumentAndMovesNoVersion", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		v := version(t, s)
		before := time.Now().Add(-time.Second)
		stored := put(t, s, "alice", alices)
		after := time.Now().Add(time.Second)
		wantSame(t, stored, alices)
		if stored.UpdatedAt.Before(before) || stored.UpdatedAt.After(after) || stored.UpdatedAt.Location() != time.UTC {
			t.Errorf("updated at %v, want the time of Put in UTC", stored.UpdatedAt)
		}
		got := get(t, s, "alice")
		wantSame(t, got, alices)
		if !got.UpdatedAt.Equal(stored.UpdatedAt) {
			t.Errorf("read updated at %v, want %v as Put returned", got.UpdatedAt, stored.UpdatedAt)
		}
		wantVersion(t, s, v)
		if p := listChanges(t, s, site.ChangeFilter{}, site.ListOptions{}); p.Total != 0 {
			t.Errorf("the change history holds %d records after a Put, want none", p.Total)
		}
		// A second Put replaces the whole document, lists and all.
		fewer := site.Preferences{Favourites: []string{"calc"}}
		wantSame(t, put(t, s, "alice", fewer), site.Preferences{Favourites: []string{"calc"}, Recent: []site.RecentLaunch{}})
		if got := get(t, s, "alice"); !slices.Equal(got.Favourites, []string{"calc"}) || got.Recent == nil || len(got.Recent) != 0 {
			t.Errorf("after a second Put: %+v, want only calc and no recent launches", got)
		}
		// Emptied preferences are still stored: they have a time.
		if got := put(t, s, "alice", site.Preferences{}); len(got.Favourites) != 0 || got.UpdatedAt.IsZero() {
			t.Errorf("emptied preferences = %+v, want empty with a time", got)
		}
		if got := get(t, s, "alice"); got.Favourites == nil || len(got.Favourites) != 0 || got.UpdatedAt.IsZero() {
			t.Errorf("emptied preferences read back as %+v, want empty lists with a time", got)
		}
		wantVersion(t, s, v)
	})

	t.Run("RecentLaunchesComeNewestFirst", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		oldestFirst := site.Preferences{Recent: []site.RecentLaunch{{Resource: "notepad", At: at.Add(-time.Hour)},
			{Resource: "calc", At: at}, {Resource: "vdi-desktop", At: at.Add(-time.Minute)}}}
		want := site.Preferences{Favourites: []string{}, Recent: []site.RecentLaunch{oldestFirst.Recent[1], oldestFirst.Recent[2], oldestFirst.Recent[0]}}
		wantSame(t, put(t, s, "alice", oldestFirst), want)
		wantSame(t, get(t, s, "alice"), want)
	})

	t.Run("UsersAreKeptApartAndMatchedAsAccountNames", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		put(t, s, "alice", alices)
		wantNone(t, get(t, s, "bob"), "bob")
		wantSame(t, get(t, s, "ALICE"), alices)
		put(t, s, "Bob", site.Preferences{Favourites: []string{"notepad"}})
		wantSame(t, get(t, s, "alice"), alices)
		if got := get(t, s, "bob"); !slices.Equal(got.Favourites, []string{"notepad"}) {
			t.Errorf("bob's favourites %q, want notepad", got.Favourites)
		}
	})

	t.Run("InvalidIsRefusedAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		put(t, s, "alice", alices)
		many := func(n int) []string {
			out := make([]string, n)
			for i := range out {
				out[i] = fmt.Sprintf("app-%03d", i)
			}
			return out
		}
		recent := func(n int) []site.RecentLaunch {
			out := make([]site.RecentLaunch, n)
			for i, name := range many(n) {
				out[i] = site.RecentLaunch{Resource: name, At: at}
			}
			return out
		}
		for _, c := range []struct {
			name, user string
			p          site.Preferences
			parts      []string
		}{
			{"EmptyFavourite", "alice", site.Preferences{Favourites: []string{"calc", ""}}, []string{"favourite 2", "empty"}},
			{"SlashInFavourite", "alice", site.Preferences{Favourites: []string{"a/b"}}, []string{"slash"}},
			{"LongFavourite", "alice", site.Preferences{Favourites: []string{strings.Repeat("x", site.MaxNameLen+1)}}, []string{"longer than"}},
			{"TwiceFavourite", "alice", site.Preferences{Favourites: []string{"calc", "notepad", "calc"}}, []string{"calc", "twice"}},
			{"TooManyFavourites", "alice", site.Preferences{Favourites: many(site.MaxFavourites + 1)}, []string{"favourites", fmt.Sprint(site.MaxFavourites)}},
			{"TooManyRecent", "alice", site.Preferences{Recent: recent(site.MaxRecent + 1)}, []string{"recent", fmt.Sprint(site.MaxRecent)}},
			{"TwiceRecent", "alice", site.Preferences{Recent: []site.RecentLaunch{{Resource: "calc", At: at}, {Resource: "calc", At: at}}}, []string{"calc", "twice"}},
			{"RecentWithoutTime", "alice", site.Preferences{Recent: []site.RecentLaunch{{Resource: "calc"}}}, []string{"calc", "no time"}},
			{"BadRecentName", "alice", site.Preferences{Recent: []site.RecentLaunch{{Resource: " calc", At: at}}}, []string{"recent launch 1"}},
			{"EmptyUser", "", site.Preferences{}, []string{"user name"}},
			{"SlashInUser", `TEST\alice`, site.Preferences{}, []string{"slash"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				err := try(t, s, func(ctx context.Context, tx site.Tx) error {
					_, err := tx.Preferences().Put(ctx, c.user, c.p)
					return err
				})
				wantMessage(t, err, site.EInvalid, c.parts...)
			})
		}
		// The most allowed are taken.
		most := site.Preferences{Favourites: many(site.MaxFavourites), Recent: recent(site.MaxRecent)}
		wantSame(t, put(t, s, "bob", most), most)
		wantSame(t, get(t, s, "alice"), alices)
		err := s.View(t.Context(), func(tx site.Tx) error {
			_, err := tx.Preferences().Get(t.Context(), "")
			return err
		})
		wantCode(t, err, site.EInvalid)
	})

	t.Run("WritesNeedAnUpdateAndRollBack", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		err := s.View(t.Context(), func(tx site.Tx) error {
			_, err := tx.Preferences().Put(t.Context(), "alice", alices)
			return err
		})
		if err == nil {
			t.Fatal("Put in a View succeeded")
		}
		if err := s.View(t.Context(), func(tx site.Tx) error { return tx.Preferences().Delete(t.Context(), "alice") }); err == nil {
			t.Fatal("Delete in a View succeeded")
		}
		err = try(t, s, func(ctx context.Context, tx site.Tx) error {
			if _, err := tx.Preferences().Put(ctx, "alice", alices); err != nil {
				return err
			}
			// The transaction sees its own write.
			if got, err := tx.Preferences().Get(ctx, "alice"); err != nil || len(got.Favourites) != 3 {
				return fmt.Errorf("own write read back as %+v, %v", got, err)
			}
			return errTest
		})
		if err != errTest {
			t.Fatalf("update: %v, want the rollback's", err)
		}
		wantNone(t, get(t, s, "alice"), "alice after a rollback")
	})

	t.Run("DeleteAndDeletingTheUser", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		put(t, s, "alice", alices)
		put(t, s, "dave", alices)
		put(t, s, "from-the-directory", alices)
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Preferences().Delete(ctx, "Alice") })
		wantNone(t, get(t, s, "alice"), "alice after Delete")
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Preferences().Delete(ctx, "nobody") })

		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Users().Delete(ctx, "dave") })
		wantNone(t, get(t, s, "dave"), "dave once deleted")
		wantSame(t, get(t, s, "from-the-directory"), alices)
		// A user of that name created again starts with none.
		update(t, s, func(ctx context.Context, tx site.Tx) error { return tx.Users().Create(ctx, site.User{Name: "Dave"}) })
		wantNone(t, get(t, s, "dave"), "a new Dave")
		// A user's update leaves them.
		put(t, s, "bob", alices)
		update(t, s, func(ctx context.Context, tx site.Tx) error {
			u, err := tx.Users().Get(ctx, "bob")
			if err != nil {
				return err
			}
			u.DisplayName = "Robert"
			return tx.Users().Update(ctx, u)
		})
		wantSame(t, get(t, s, "bob"), alices)
	})

	t.Run("ConcurrentPutsOfOneUserNeverMix", func(t *testing.T) {
		t.Parallel()
		s := openBase(t, open)
		const writers = 8
		docs := make([]site.Preferences, writers)
		for i := range docs {
			for j := range 5 + i {
				docs[i].Favourites = append(docs[i].Favourites, fmt.Sprintf("w%d-app%d", i, j))
			}
			docs[i].Recent = []site.RecentLaunch{{Resource: fmt.Sprintf("w%d-app0", i), At: at.Add(time.Duration(i) * time.Minute)}}
		}
		var wg sync.WaitGroup
		errs := make([]error, writers)
		for i := range writers {
			wg.Go(func() {
				for range 5 {
					err := s.Update(t.Context(), func(tx site.Tx) error {
						_, err := tx.Preferences().Put(t.Context(), "alice", docs[i])
						return err
					})
					// A busy store may ask for a retry; a mix is never allowed.
					if err != nil && site.ErrorCode(err) != site.EUnavailable {
						errs[i] = err
						return
					}
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("writer %d: %v", i, err)
			}
		}
		got := get(t, s, "alice")
		for _, d := range docs {
			if slices.Equal(got.Favourites, d.Favourites) {
				wantSame(t, got, d)
				return
			}
		}
		t.Fatalf("alice's preferences %+v are no one writer's whole document", got)
	})
}
