package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// TestCheckDoubledAtTheCut: a user's second live session is reported as
// doubled wherever the two were made or acknowledged, at the cut too, with
// the cut's time: the checker tolerates no race.
func TestCheckDoubledAtTheCut(t *testing.T) {
	cut := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
	for _, tc := range []struct {
		name    string
		created [2]time.Duration // after the cut
		acked   [2]time.Duration
	}{
		// Made at the cut, its client told only when it went back to it.
		{"made at the cut, acknowledged later", [2]time.Duration{300 * time.Millisecond, 3 * time.Second}, [2]time.Duration{9 * time.Second, 5 * time.Second}},
		{"acknowledged at the cut", [2]time.Duration{-2 * time.Second, 3 * time.Second}, [2]time.Duration{-800 * time.Millisecond, 5 * time.Second}},
		{"far from the cut", [2]time.Duration{2 * time.Second, 3 * time.Second}, [2]time.Duration{9 * time.Second, 5 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sitetest.New(t, sitetest.Options{})
			ctx := context.Background()
			h := NewHistory("", demo.OfficeDesktop)
			h.Mark(cut)
			err := s.Store.Update(ctx, func(tx site.Tx) error {
				for i, id := range []string{"first", "second"} {
					at := cut.Add(tc.created[i])
					err := tx.Sessions().Create(ctx, site.Session{ID: id, User: "user0001", Resource: demo.OfficeDesktop, DeliveryGroup: demo.OfficeApps,
						Machine: "office-vda-0" + string(rune('1'+i)), State: site.SessionActive, CreatedAt: at, UpdatedAt: at})
					if err != nil {
						return err
					}
					h.launched[id] = cut.Add(tc.acked[i])
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			v, err := h.Check(ctx, s.Store)
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Duplicated) != 1 || !strings.Contains(v.Duplicated[0], "user0001") || !strings.Contains(v.Duplicated[0], "marked (the cut) at") {
				t.Fatalf("not reported as doubled: duplicated %v, notes %v", v.Duplicated, v.Notes)
			}
		})
	}
}
