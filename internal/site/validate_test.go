package site_test

import (
	"testing"

	"github.com/usher-vdi/usher/internal/site"
)

func TestValidateAddress(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"vda-01.example.com:3389", true},
		{"10.0.0.7", true},
		{"[fe80::1%eth0]:3389", true},
		{"host_name:1", true},
		{"", false},
		{"vda:3389\r\nalternate shell:s:calc", false},
		{"vda:3389\n", false},
		{"vda 3389", false},
		{"vda;x", false},
		{"vda\u2028x", false},
		{"vdä", false},
	} {
		if err := site.ValidateAddress(tc.addr); (err == nil) != tc.ok {
			t.Errorf("ValidateAddress(%q) = %v, want ok %v", tc.addr, err, tc.ok)
		}
	}
}

func TestValidateText(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"Office Writer — 2024 (ü)", true},
		{"", true},
		{"a\r\nb", false},
		{"a\tb", false},
		{"a\x85b", false},
		{"a\u2029b", false},
		{"a\xffb", false},
	} {
		if err := site.ValidateText("display_name", tc.v); (err == nil) != tc.ok {
			t.Errorf("ValidateText(%q) = %v, want ok %v", tc.v, err, tc.ok)
		}
	}
}

// TestErrorField checks that a validation error names the field at fault
// and the object it belongs to, so that a form marks the right field: the
// edited object's own, never one of another object the edit broke.
func TestErrorField(t *testing.T) {
	valid := func() *site.Config {
		return &site.Config{
			Settings:       site.Settings{Name: "s", Domain: "d"},
			Zones:          []site.Zone{{Name: "z", Primary: true}},
			Catalogs:       []site.Catalog{{Name: "c", Kind: site.MultiSession, Zone: "z"}},
			Groups:         []site.Group{{Name: "g"}},
			DeliveryGroups: []site.DeliveryGroup{func() site.DeliveryGroup { g := site.NewDeliveryGroup("dg"); g.Catalogs = []string{"c"}; return g }()},
			Applications: []site.Resource{{Kind: site.Application, Name: "app", DisplayName: "App", CommandLine: "/bin/app",
				DeliveryGroups: []string{"dg"}}},
			Entitlements: []site.Entitlement{{Name: "e", DeliveryGroup: "dg", Resources: []string{"app"}, Groups: []string{"g"}}},
		}
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("the base configuration is refused: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*site.Config)
		kind   site.Kind
		object string
		field  string
	}{
		{"own field", func(c *site.Config) { c.Applications[0].CommandLine = "" }, site.KindApplication, "app", "command_line"},
		{"nested field", func(c *site.Config) {
			c.DeliveryGroups[0].LoadRules.Memory = site.MemoryRule{Enabled: true, FullPercent: 101}
		}, site.KindDeliveryGroup, "dg", "load_rules.memory.full_percent"},
		{"reference", func(c *site.Config) { c.Entitlements[0].Groups = []string{"nobody"} }, site.KindEntitlement, "e", "groups"},
		{"name", func(c *site.Config) { c.Groups[0].Name = " g" }, site.KindGroup, " g", "name"},
		{"conflict", func(c *site.Config) { c.Groups = append(c.Groups, site.Group{Name: "G"}) }, site.KindGroup, "G", "name"},
		// Unpublishing the application breaks the entitlement: the
		// entitlement's field, not the application's.
		{"another object's", func(c *site.Config) { c.Applications[0].DeliveryGroups = nil }, site.KindEntitlement, "e", "resources"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.change(c)
			err := c.Validate()
			if err == nil {
				t.Fatal("validated")
			}
			if got := site.ErrorField(err, tc.kind, tc.object); got != tc.field {
				t.Fatalf("field %q of %s %q, want %q (%v)", got, tc.kind, tc.object, tc.field, err)
			}
			if tc.kind != site.KindApplication {
				if got := site.ErrorField(err, site.KindApplication, "app"); got != "" {
					t.Fatalf("the application is blamed for field %q (%v)", got, err)
				}
			}
		})
	}
}
