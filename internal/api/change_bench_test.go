package api_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitegen"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// BenchmarkAdminChangeLarge measures one admin change on the large site
// (sitegen.LargeSize: 100,000 users in 200 groups, 40,000 machines, 2,000
// applications) in a SQLite site DB, built once. Case api is a POST
// /api/v1/admin/applications through the API handler, end to end:
// committed, and served by the broker's snapshot when the answer comes
// back. Case commit is the transaction alone, as the handler runs it,
// from the broker's configuration (which is then published untimed).
//
//	go test -run XXX -bench AdminChangeLarge -benchtime 20x ./internal/api
func BenchmarkAdminChangeLarge(b *testing.B) {
	size := sitegen.LargeSize
	if raceEnabled {
		size = sitegen.DemoSize
		b.Log("under the race detector: the demo site, not the large one")
	}
	s := sitetest.New(b, sitetest.Options{Config: sitegen.Generate(size, "")})
	signer, err := auth.NewSigner([]byte(strings.Repeat("k", 32)))
	if err != nil {
		b.Fatal(err)
	}
	a, err := api.New(api.Config{Store: s.Store, Signer: signer, PasswordParams: cheap, Broker: s.Broker, EnrolmentSecret: enrolmentSecret})
	if err != nil {
		b.Fatal(err)
	}
	authz := basic(sitetest.Admin, adminPassword)
	n := 0
	newApp := func() site.Resource {
		n++
		return site.Resource{Name: fmt.Sprintf("bench-app-%d", n), DisplayName: fmt.Sprintf("Bench App %d", n),
			CommandLine: `C:\bench.exe`, DeliveryGroups: []string{"dg-01"}}
	}

	b.Run("api", func(b *testing.B) {
		for b.Loop() {
			app := newApp()
			body := fmt.Sprintf(`{"name":%q,"display_name":%q,"command_line":"C:\\bench.exe","delivery_groups":["dg-01"]}`, app.Name, app.DisplayName)
			req := httptest.NewRequest("POST", "/api/v1/admin/applications", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", authz)
			rec := httptest.NewRecorder()
			a.ServeHTTP(rec, req)
			if rec.Code != 201 {
				b.Fatalf("POST: %d %s", rec.Code, rec.Body)
			}
			if _, ok := s.Broker.Snapshot().Resource(app.Name); !ok {
				b.Fatalf("%s is not served once the POST answered", app.Name)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
	})

	b.Run("commit", func(b *testing.B) {
		ctx := context.Background()
		for b.Loop() {
			app := newApp()
			snap := s.Broker.Snapshot()
			var m *site.Mutation
			err := s.Store.Update(ctx, func(tx site.Tx) (err error) {
				m, err = site.MutateFrom(ctx, tx, snap.Config(), snap.Version, func(c *site.Config) error {
					c.Applications = append(c.Applications, app)
					return nil
				})
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer() // the broker's part is the api case's
			s.Broker.Publish(m.Version, m.Config)
			b.StartTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
	})
}
