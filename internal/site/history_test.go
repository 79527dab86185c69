package site_test

import (
	"reflect"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
)

func TestPlanRecords(t *testing.T) {
	current := &site.Config{
		Settings: site.Settings{Name: "Farm", Domain: "TEST"},
		Zones:    []site.Zone{{Name: "hq", Primary: true}, {Name: "old"}},
		Users:    []site.User{{Name: "ada", PasswordHash: testHash}},
	}
	desired := &site.Config{
		Settings: site.Settings{Name: "Renamed", Domain: "TEST"},
		Zones:    []site.Zone{{Name: "branch"}, {Name: "hq", Primary: true}},
		Users:    []site.User{{Name: "ada", DisplayName: "Ada", PasswordHash: testHash + "x"}},
	}
	plan := site.Diff(current, desired)
	got := site.PlanRecords(plan, site.AdminActor("root"))
	want := []site.ChangeRecord{
		{Actor: "admin:root", Op: site.OpUpdate, Kind: site.KindSettings, Fields: []string{"name"}},
		{Actor: "admin:root", Op: site.OpCreate, Kind: site.KindZone, Name: "branch"},
		{Actor: "admin:root", Op: site.OpDelete, Kind: site.KindZone, Name: "old"},
		{Actor: "admin:root", Op: site.OpUpdate, Kind: site.KindUser, Name: "ada", Fields: []string{"display_name", "password_hash"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("PlanRecords =\n%+v\nwant\n%+v", got, want)
	}
	for _, r := range got {
		if err := r.Validate(); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
}

func TestChangeRecordValidate(t *testing.T) {
	ok := site.ChangeRecord{Actor: site.ActorApply, Op: site.OpCreate, Kind: site.KindZone, Name: "hq"}
	for _, tc := range []struct {
		name  string
		edit  func(*site.ChangeRecord)
		valid bool
	}{
		{"Valid", func(*site.ChangeRecord) {}, true},
		{"SettingsHaveNoName", func(r *site.ChangeRecord) { r.Kind, r.Name, r.Op = site.KindSettings, "", site.OpUpdate }, true},
		{"NoActor", func(r *site.ChangeRecord) { r.Actor = "" }, false},
		{"LongActor", func(r *site.ChangeRecord) { r.Actor = string(make([]byte, 301)) }, false},
		{"UnknownOp", func(r *site.ChangeRecord) { r.Op = "rename" }, false},
		{"NoKind", func(r *site.ChangeRecord) { r.Kind = "" }, false},
		{"NameNotUTF8", func(r *site.ChangeRecord) { r.Name = "\xff" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			err := r.Validate()
			if tc.valid != (err == nil) || err != nil && site.ErrorCode(err) != site.EInvalid {
				t.Errorf("Validate = %v, want valid %v (else invalid)", err, tc.valid)
			}
		})
	}
}
