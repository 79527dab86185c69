package api_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/site"
)

// changes lists the change history with the query q ("" for none).
func (f *fixture) changes(q string, authz ...string) api.ListResponse[site.ChangeRecord] {
	f.t.Helper()
	r := f.do("GET", "/api/v1/admin/changes?"+q, nil, authz...)
	f.want(r, 200, "")
	var out api.ListResponse[site.ChangeRecord]
	if err := json.Unmarshal(r.body, &out); err != nil {
		f.t.Fatalf("changes: %v; body %s", err, r.body)
	}
	return out
}

// summary is what a test compares of a record.
func summary(r site.ChangeRecord) string {
	s := fmt.Sprintf("v%d %s %s %s %q", r.Version, r.Actor, r.Op, r.Kind, r.Name)
	if len(r.Fields) > 0 {
		s += " " + strings.Join(r.Fields, ",")
	}
	return s
}

func summaries(rs []site.ChangeRecord) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = summary(r)
	}
	return out
}

func TestChangeHistoryRecordsAdminChanges(t *testing.T) {
	f := newFixture(t)
	if h := f.changes(""); h.Total != 0 || len(h.Items) != 0 {
		t.Fatalf("history before any change = %+v, want empty", h)
	}
	before := time.Now().Add(-time.Second)
	bob := basic("bob", "bob-password-1")
	f.want(f.do("POST", "/api/v1/admin/admins", api.AdminRequest{Name: "bob", Password: "bob-password-1"}), 201, "")
	v := f.configVersion()

	// Two admins change a zone in turn.
	f.want(f.do("POST", "/api/v1/admin/zones", site.Zone{Name: "east", Description: "East"}), 201, "")
	f.want(f.do("PUT", "/api/v1/admin/zones/east", site.Zone{Name: "east", Description: "East coast"}, bob), 200, "")

	// Refused changes record nothing.
	f.want(f.do("POST", "/api/v1/admin/zones", site.Zone{Name: "east/west"}), 400, site.EInvalid)
	f.want(f.do("PUT", "/api/v1/admin/zones/east", site.Zone{Name: "east", Primary: true}, bob), 400, site.EInvalid) // a second primary
	f.want(f.do("POST", "/api/v1/admin/zones", site.Zone{Name: "east"}), 409, site.EConflict)
	f.want(f.do("DELETE", "/api/v1/admin/zones/nowhere", nil), 404, site.ENotFound)
	f.want(f.do("PUT", "/api/v1/admin/admins/bob/password", api.PasswordRequest{Password: "short"}), 400, site.EInvalid)
	if got := f.configVersion(); got != v+2 {
		t.Fatalf("configuration version %d after two changes from %d", got, v)
	}

	h := f.changes("kind=zone")
	want := []string{
		fmt.Sprintf(`v%d admin:bob update zone "east" description`, v+2),
		fmt.Sprintf(`v%d admin:admin create zone "east"`, v+1),
	}
	if got := summaries(h.Items); !slices.Equal(got, want) || h.Total != 2 || h.Next != "" {
		t.Fatalf("zone changes = %q (total %d, next %q), want %q", got, h.Total, h.Next, want)
	}
	for _, r := range h.Items {
		if r.Time.Before(before) || r.Time.After(time.Now().Add(time.Second)) || r.Time.Location() != time.UTC {
			t.Errorf("record %d's time %v is not now in UTC", r.ID, r.Time)
		}
	}
	if h.Items[0].ID <= h.Items[1].ID {
		t.Errorf("IDs %d, %d: the newest record's is not the greatest", h.Items[0].ID, h.Items[1].ID)
	}

	// Passwords, settings and a machine delete (through the broker).
	f.want(f.do("PUT", "/api/v1/admin/admins/bob/password", api.PasswordRequest{Password: "bob-password-2"}, bob), 204, "")
	f.want(f.do("PUT", "/api/v1/admin/users/USER0001/password", api.PasswordRequest{Password: "a-new-password"}), 204, "")
	r := f.do("GET", "/api/v1/admin/settings", nil)
	f.want(r, 200, "")
	var st site.Settings
	json.Unmarshal(r.body, &st)
	st.Name = "Renamed farm"
	f.want(f.do("PUT", "/api/v1/admin/settings", st), 200, "")
	var machines api.ListResponse[site.MachineState]
	r = f.do("GET", "/api/v1/admin/machines?limit=1", nil)
	f.want(r, 200, "")
	json.Unmarshal(r.body, &machines)
	machine := machines.Items[0].Name
	f.want(f.do("DELETE", "/api/v1/admin/machines/"+machine, nil), 204, "")
	f.want(f.do("DELETE", "/api/v1/admin/admins/bob", nil), 204, "")

	h = f.changes("")
	want = []string{
		fmt.Sprintf(`v%d admin:admin delete admin "bob"`, v+5),
		fmt.Sprintf(`v%d admin:admin delete machine %q`, v+5, machine),
		fmt.Sprintf(`v%d admin:admin update settings "" name`, v+4),
		fmt.Sprintf(`v%d admin:admin update user "user0001" password_hash`, v+3),
		fmt.Sprintf(`v%d admin:bob update admin "bob" password_hash`, v+2),
		fmt.Sprintf(`v%d admin:bob update zone "east" description`, v+2),
		fmt.Sprintf(`v%d admin:admin create zone "east"`, v+1),
		fmt.Sprintf(`v%d admin:admin create admin "bob"`, v),
	}
	if got := summaries(h.Items); !slices.Equal(got, want) {
		t.Fatalf("history =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if strings.Contains(string(f.do("GET", "/api/v1/admin/changes", nil).body), "argon2") {
		t.Error("the history shows a password hash")
	}

	// Filters.
	if h := f.changes("actor=" + url.QueryEscape("admin:bob")); h.Total != 2 {
		t.Errorf("bob's changes: %q", summaries(h.Items))
	}
	if h := f.changes("kind=admin&name=bob"); h.Total != 3 {
		t.Errorf("admin bob's changes: %q", summaries(h.Items))
	}

	// Pages, newest first.
	var got []string
	after := ""
	for pages := 1; ; pages++ {
		h := f.changes("limit=3&after=" + after)
		if h.Total != len(want) {
			t.Fatalf("page %d: total %d, want %d", pages, h.Total, len(want))
		}
		got = append(got, summaries(h.Items)...)
		if h.Next == "" {
			if pages != 3 {
				t.Errorf("%d pages of 3 for %d records", pages, len(want))
			}
			break
		}
		after = h.Next
	}
	if !slices.Equal(got, want) {
		t.Errorf("paged history =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestChangeHistoryRefusals(t *testing.T) {
	f := newFixture(t)
	f.want(f.do("GET", "/api/v1/admin/changes", nil, "none"), 401, site.EUnauthorized)
	token, r := f.login("user0001", userPassword)
	f.want(r, 200, "")
	f.want(f.do("GET", "/api/v1/admin/changes", nil, "Bearer "+token), 401, site.EUnauthorized)
	f.want(f.do("GET", "/api/v1/admin/changes?limit=1001", nil), 400, site.EInvalid)
	f.want(f.do("GET", "/api/v1/admin/changes?limit=0", nil), 400, site.EInvalid)
	f.want(f.do("GET", "/api/v1/admin/changes?after=east", nil), 400, site.EInvalid)
}
