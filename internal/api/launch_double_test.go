package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/demo"
)

// TestDoubleClickedLaunchGivesOneSession replays a double click in the
// portal (and a burst from several tabs): POSTs to a resource's launch
// URL at once give one session, each POST a ticket of its own for it, for
// an application, a pooled desktop and an assigned one, and for two
// applications of one delivery group, which share a session.
func TestDoubleClickedLaunchGivesOneSession(t *testing.T) {
	f := newFixture(t)
	f.registerAll()
	var office []string
	for _, a := range demo.Site().Applications {
		if a.DeliveryGroups[0] == demo.OfficeApps && len(office) < 2 {
			office = append(office, a.Name)
		}
	}
	for _, c := range []struct {
		name, user string
		resources  []string // clicked in turn
		clicks     int
	}{
		{"application", demo.UserName(1), office[:1], 2},
		{"pooled desktop", demo.UserName(2), []string{demo.PooledDesktop}, 2},
		{"assigned desktop", demo.UserName(991), []string{demo.Workstation}, 2},
		{"applications sharing a session from many tabs", demo.UserName(3), office, 8},
		{"desktop from many tabs", demo.UserName(4), []string{demo.PooledDesktop}, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			tok, r := f.login(c.user, userPassword)
			f.want(r, 200, "")
			as := "Bearer " + tok
			answers := make([]response, c.clicks)
			errs := make([]error, c.clicks)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range c.clicks {
				path := "/api/v1/resources/" + url.PathEscape(c.resources[i%len(c.resources)]) + "/launch"
				wg.Go(func() {
					<-start
					answers[i], errs[i] = post(f.srv.URL+path, `{"client_name":"laptop"}`, as)
				})
			}
			close(start)
			wg.Wait()

			ids := map[string]bool{}
			tickets := map[string]bool{}
			made := 0
			for i, a := range answers {
				if errs[i] != nil {
					t.Fatalf("click %d: %v", i, errs[i])
				}
				if a.status != 200 {
					t.Fatalf("click %d: status %d: %s", i, a.status, a.body)
				}
				var l api.LaunchResponse
				if err := json.Unmarshal(a.body, &l); err != nil {
					t.Fatal(err)
				}
				ids[l.SessionID] = true
				if l.Ticket == "" || tickets[l.Ticket] {
					t.Errorf("click %d: ticket %q is empty or another click's", i, l.Ticket)
				}
				tickets[l.Ticket] = true
				if !l.Reconnected {
					made++
				}
			}
			if len(ids) != 1 || made != 1 {
				t.Fatalf("%d clicks got sessions %v, %d of them new; want one session, made by one click", c.clicks, ids, made)
			}
			var ss api.SessionsResponse
			r = f.do("GET", "/api/v1/sessions", nil, as)
			f.want(r, 200, "")
			if err := json.Unmarshal(r.body, &ss); err != nil {
				t.Fatal(err)
			}
			if len(ss.Sessions) != 1 || !ids[ss.Sessions[0].ID] {
				t.Fatalf("%s's sessions after the clicks: %s; want the one they got", c.user, r.body)
			}
		})
	}
}

// post sends a JSON body with an Authorization header: fixture.do for
// goroutines other than the test's.
func post(url, body, authz string) (response, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", authz)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, raw}, err
}
