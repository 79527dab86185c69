package api_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/site"
)

// prefs reads a preferences document from a response.
func prefs(t *testing.T, r response) site.Preferences {
	t.Helper()
	var p site.Preferences
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("preferences %s: %v", r.body, err)
	}
	if p.Favourites == nil || p.Recent == nil {
		t.Fatalf("preferences %s: a list is null, want [] when empty", r.body)
	}
	return p
}

// someResources returns the names of n resources user0001 may launch.
func (f *fixture) someResources(as string, n int) []string {
	f.t.Helper()
	r := f.do("GET", "/api/v1/resources", nil, as)
	f.want(r, 200, "")
	var res api.ResourcesResponse
	json.Unmarshal(r.body, &res)
	if len(res.Resources) < n {
		f.t.Fatalf("%d resources, want at least %d", len(res.Resources), n)
	}
	out := make([]string, n)
	for i := range out {
		out[i] = res.Resources[i*3].Name
	}
	return out
}

// TestPreferences: a user's favourites and recent launches are kept on
// the server, whole, for that user alone; they move no configuration
// version; names of resources the user may not launch are dropped.
func TestPreferences(t *testing.T) {
	f := newFixture(t)
	tok, _ := f.login("user0001", userPassword)
	as := "Bearer " + tok
	other, _ := f.login("user0002", userPassword)
	asOther := "Bearer " + other
	names := f.someResources(as, 5)
	at := time.Date(2026, 11, 27, 8, 30, 0, 0, time.UTC)

	t.Run("none at first", func(t *testing.T) {
		r := f.do("GET", "/api/v1/preferences", nil, as)
		f.want(r, 200, "")
		if p := prefs(t, r); len(p.Favourites) != 0 || len(p.Recent) != 0 || strings.Contains(string(r.body), "updated_at") {
			t.Fatalf("a new user's preferences: %s, want empty lists and no updated_at", r.body)
		}
	})

	version := f.configVersion()
	doc := site.Preferences{Favourites: []string{names[2], names[0], names[1]},
		Recent: []site.RecentLaunch{{Resource: names[3], At: at.Add(-time.Hour)}, {Resource: names[4], At: at}}}
	t.Run("a PUT is read back whole", func(t *testing.T) {
		before := time.Now().Add(-time.Second)
		r := f.do("PUT", "/api/v1/preferences", doc, as)
		f.want(r, 200, "")
		put := prefs(t, r)
		got := prefs(t, f.do("GET", "/api/v1/preferences", nil, as))
		for _, p := range []site.Preferences{put, got} {
			if !slices.Equal(p.Favourites, doc.Favourites) {
				t.Fatalf("favourites %q, want %q in the order given", p.Favourites, doc.Favourites)
			}
			// Recent launches come back newest first.
			if len(p.Recent) != 2 || p.Recent[0].Resource != names[4] || !p.Recent[0].At.Equal(at) || p.Recent[1].Resource != names[3] {
				t.Fatalf("recent %+v, want %s then %s", p.Recent, names[4], names[3])
			}
			if p.UpdatedAt.Before(before) {
				t.Fatalf("updated_at %v, want the time of the PUT", p.UpdatedAt)
			}
		}
		if v := f.configVersion(); v != version {
			t.Fatalf("configuration version %d after a PUT of preferences, want %d", v, version)
		}
		if ch := f.changes(""); len(ch.Items) != 0 && ch.Items[0].Kind == "preferences" {
			t.Fatalf("the change history records preferences: %+v", ch.Items[0])
		}
	})

	t.Run("another user's are never visible", func(t *testing.T) {
		r := f.do("GET", "/api/v1/preferences", nil, asOther)
		f.want(r, 200, "")
		if p := prefs(t, r); len(p.Favourites) != 0 || len(p.Recent) != 0 {
			t.Fatalf("user0002 reads %s", r.body)
		}
		f.want(f.do("PUT", "/api/v1/preferences", site.Preferences{Favourites: names[:1]}, asOther), 200, "")
		if p := prefs(t, f.do("GET", "/api/v1/preferences", nil, as)); !slices.Equal(p.Favourites, doc.Favourites) {
			t.Fatalf("user0001's favourites %q after user0002's PUT, want %q", p.Favourites, doc.Favourites)
		}
		// There is no way to name another user: the query and the path
		// name none, and unknown fields are refused.
		if p := prefs(t, f.do("GET", "/api/v1/preferences?user=user0001", nil, asOther)); !slices.Equal(p.Favourites, names[:1]) {
			t.Fatalf("user0002 asking for user0001's got %q", p.Favourites)
		}
		f.want(f.do("PUT", "/api/v1/preferences", `{"user":"user0001","favourites":[]}`, asOther), 400, site.EInvalid)
		f.want(f.do("GET", "/api/v1/preferences/user0001", nil, asOther), 404, "")
	})

	t.Run("a user token is required", func(t *testing.T) {
		f.want(f.do("GET", "/api/v1/preferences", nil, "none"), 401, site.EUnauthorized)
		f.want(f.do("PUT", "/api/v1/preferences", doc, "none"), 401, site.EUnauthorized)
		f.want(f.do("GET", "/api/v1/preferences", nil, "Bearer not-a-token"), 401, site.EUnauthorized)
		// An admin is not a user of the portal.
		if r := f.do("GET", "/api/v1/preferences", nil); r.status != 401 {
			t.Fatalf("an admin's basic auth: %d %s", r.status, r.body)
		}
	})

	t.Run("resources the user may not launch are dropped", func(t *testing.T) {
		// My Workstation is helpdesk's only; nonexistent is no one's.
		r := f.do("PUT", "/api/v1/preferences", site.Preferences{
			Favourites: []string{demo.Workstation, names[0], "nonexistent"},
			Recent:     []site.RecentLaunch{{Resource: "nonexistent", At: at}, {Resource: names[1], At: at}}}, as)
		f.want(r, 200, "")
		for _, p := range []site.Preferences{prefs(t, r), prefs(t, f.do("GET", "/api/v1/preferences", nil, as))} {
			if !slices.Equal(p.Favourites, []string{names[0]}) || len(p.Recent) != 1 || p.Recent[0].Resource != names[1] {
				t.Fatalf("preferences %+v, want only %s and a launch of %s", p, names[0], names[1])
			}
		}
		f.want(f.do("PUT", "/api/v1/preferences", doc, as), 200, "")
	})

	t.Run("invalid input is refused and changes nothing", func(t *testing.T) {
		many := make([]string, site.MaxFavourites+1)
		for i := range many {
			many[i] = fmt.Sprintf("app-%03d", i)
		}
		for _, c := range []struct {
			name   string
			body   any
			status int
			field  string
			says   string
		}{
			{"twice", site.Preferences{Favourites: []string{names[0], names[0]}}, 400, "favourites", "twice"},
			{"too many", site.Preferences{Favourites: many}, 400, "favourites", "more than the 200"},
			{"bad name", site.Preferences{Favourites: []string{"a/b"}}, 400, "favourites", "slash"},
			{"empty name", `{"favourites":[""]}`, 400, "favourites", "empty"},
			{"recent without time", `{"recent":[{"resource":"` + names[0] + `"}]}`, 400, "recent", "no time"},
			{"recent twice", site.Preferences{Recent: []site.RecentLaunch{{Resource: names[0], At: at}, {Resource: names[0], At: at}}}, 400, "recent", "twice"},
			{"favourites not a list", `{"favourites":"` + names[0] + `"}`, 400, "favourites", "must be"},
			{"unknown field", `{"favorites":[]}`, 400, "favorites", "unknown field"},
			{"not JSON", `favourites=notepad`, 400, "", "not valid JSON"},
			{"empty body", ``, 400, "", "empty"},
			{"too large", `{"favourites":["` + strings.Repeat("x", 70<<10) + `"]}`, 413, "", "larger than"},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := f.do("PUT", "/api/v1/preferences", c.body, as)
				f.want(r, c.status, site.EInvalid)
				if r.errorField() != c.field || !strings.Contains(r.errorMessage(), c.says) {
					t.Fatalf("error %s, want field %q and a message that says %q", r.body, c.field, c.says)
				}
			})
		}
		if p := prefs(t, f.do("GET", "/api/v1/preferences", nil, as)); !slices.Equal(p.Favourites, doc.Favourites) || len(p.Recent) != 2 {
			t.Fatalf("after refused PUTs: %+v, want the last saved", p)
		}
	})

	t.Run("a cross-site PUT with the portal's cookie is refused", func(t *testing.T) {
		c := newCookieClient(t, f.srv)
		if code, _, body := c.do("POST", "/api/v1/login", api.LoginRequest{Username: "user0001", Password: userPassword, SessionCookie: true}); code != 200 {
			t.Fatalf("login: %d %s", code, body)
		}
		if code, _, body := c.do("GET", "/api/v1/preferences", nil); code != 200 || !strings.Contains(string(body), names[2]) {
			t.Fatalf("GET with the cookie: %d %s", code, body)
		}
		c.site = "cross-site"
		if code, _, body := c.do("PUT", "/api/v1/preferences", site.Preferences{}); code != 403 {
			t.Fatalf("cross-site PUT: %d %s", code, body)
		}
		if p := prefs(t, f.do("GET", "/api/v1/preferences", nil, as)); !slices.Equal(p.Favourites, doc.Favourites) {
			t.Fatalf("after a cross-site PUT: %+v", p)
		}
	})
}

// TestPreferencesConcurrentPuts: PUTs of one user at once (several tabs,
// several devices) leave one of them whole, never a mix.
func TestPreferencesConcurrentPuts(t *testing.T) {
	f := newFixture(t)
	tok, _ := f.login("user0001", userPassword)
	as := "Bearer " + tok
	names := f.someResources(as, 40)
	const writers = 8
	docs := make([]site.Preferences, writers)
	for i := range docs {
		docs[i].Favourites = slices.Clone(names[i : i+3+i])
		docs[i].Recent = []site.RecentLaunch{{Resource: names[i], At: time.Now().Add(time.Duration(i) * time.Second)}}
	}
	var wg sync.WaitGroup
	statuses := make([][]int, writers)
	for i := range writers {
		wg.Go(func() {
			for range 5 {
				r := f.do("PUT", "/api/v1/preferences", docs[i], as)
				statuses[i] = append(statuses[i], r.status)
			}
		})
	}
	wg.Wait()
	ok := 0
	for i, ss := range statuses {
		for _, s := range ss {
			switch s {
			case 200:
				ok++
			case 503: // a busy store may ask for a retry
			default:
				t.Fatalf("writer %d: status %d", i, s)
			}
		}
	}
	if ok == 0 {
		t.Fatal("no PUT succeeded")
	}
	got := prefs(t, f.do("GET", "/api/v1/preferences", nil, as))
	for _, d := range docs {
		if slices.Equal(got.Favourites, d.Favourites) {
			if len(got.Recent) != 1 || got.Recent[0].Resource != d.Recent[0].Resource {
				t.Fatalf("favourites of one writer, recent launches of another: %+v", got)
			}
			return
		}
	}
	t.Fatalf("preferences %+v are no one writer's whole document", got)
}
