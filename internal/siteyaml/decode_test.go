package siteyaml_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/siteyaml"
)

// MustDecodeFile decodes a file of testdata.
func MustDecodeFile(tb testing.TB, name string) *siteyaml.Document {
	tb.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	doc, err := siteyaml.Decode(name, f)
	if err != nil {
		tb.Fatalf("Decode(%s): %v", name, err)
	}
	return doc
}

const topKeys = "settings, directory, zones, catalogs, groups, users, machines, delivery_groups, applications, desktops, entitlements, targets"

func TestDecodeRejectsBadInput(t *testing.T) {
	tests := []struct {
		file string
		line int
		msg  string // after "FILE:LINE: "
	}{
		// Unknown fields.
		{"unknown-field.yaml", 10, `unknown field "maxsessions" in machine "vda-02" (known fields: name, catalog, address, max_sessions, maintenance, assigned_user); did you mean "max_sessions"?`},
		{"unknown-field-before-name.yaml", 3, `unknown field "maxsessions" in machine "vda-01" (known fields: name, catalog, address, max_sessions, maintenance, assigned_user); did you mean "max_sessions"?`},
		{"unknown-nested-field.yaml", 7, `unknown field "limt" in load_rules.max_sessions of delivery-group "Office Apps" (known fields: enabled, limit)`},
		{"unknown-top-level.yaml", 3, `unknown field "machine" at the top level (known fields: ` + topKeys + `)`},
		{"unknown-settings-field.yaml", 3, `unknown field "Domain" in settings (known fields: name, domain, trust_xml_requests, anonymous_app_data, server_data_credentials); did you mean "domain"?`},

		// Wrong types.
		{"wrong-type-int.yaml", 7, `delivery-group "Office Apps": load_rules.max_sessions.limit: cannot use "many" as an integer`},
		{"wrong-duration.yaml", 6, `delivery-group "Office Apps": session_timers.disconnected_logoff: "15" is not a duration like 15m, 8h or 1h30m`},
		{"wrong-type-float.yaml", 5, `machine "vda-01": max_sessions: cannot use "2.5" as an integer`},
		{"int-out-of-range.yaml", 3, `machine "vda-01": max_sessions: 99999999999999 is out of range`},
		{"wrong-type-bool.yaml", 3, `zone "primary": primary: cannot use "yes" as a boolean (true or false)`},
		{"wrong-type-string.yaml", 4, `catalog "rdsh": kind: cannot use a list as a string`},
		{"wrong-type-string-list.yaml", 3, `user "alice": groups: cannot use "domain-users" as a list of strings`},
		{"wrong-type-string-list-item.yaml", 5, `user "alice": groups[1]: cannot use a mapping as a string`},
		{"wrong-type-section.yaml", 4, `machines: cannot use a mapping as a list of machines`},
		{"wrong-type-item.yaml", 4, `zone #2: cannot use "branch" as a zone; want a mapping of its fields`},
		{"wrong-type-settings.yaml", 1, `settings: cannot use "usher" as a mapping`},
		{"top-level-list.yaml", 1, `cannot use a list as a site configuration; want a mapping with any of ` + topKeys},
		{"top-level-scalar.yaml", 1, `cannot use "just some text" as a site configuration; want a mapping with any of ` + topKeys},
		{"key-not-string.yaml", 3, `zone "primary": cannot use a list as a key; keys are field names`},
		{"merge-key.yaml", 5, `catalog "rdsh-2": merge keys (<<) are not supported`},

		// YAML syntax.
		{"syntax.yaml", 5, `invalid YAML: found unexpected end of stream`},
		{"syntax-indent.yaml", 3, `invalid YAML: mapping values are not allowed in this context`},
		{"syntax-tab.yaml", 2, `invalid YAML: found character that cannot start any token`},
		{"unknown-alias.yaml", 4, `invalid YAML: alias *primary refers to no anchor &primary defined before it`},

		// Duplicate keys.
		{"duplicate-key.yaml", 7, `duplicate key "display_name" in user "bob" (first at line 5)`},
		{"duplicate-nested-key.yaml", 6, `duplicate key "cpu" in load_rules of delivery-group "Office Apps" (first at line 4)`},
		{"duplicate-top-level-key.yaml", 5, `duplicate key "settings" at the top level (first at line 1)`},

		// Not exactly one document.
		{"empty.yaml", 0, `the file is empty; want a mapping with any of ` + topKeys},
		{"comments-only.yaml", 0, `the file holds only comments; want a mapping with any of ` + topKeys},
		{"null-document.yaml", 2, `the document is empty; want a mapping with any of ` + topKeys},
		{"multiple-documents.yaml", 3, `a second YAML document; a site file holds one`},
		{"multiple-documents-explicit.yaml", 5, `a second YAML document; a site file holds one`},
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.file] = true
		t.Run(strings.TrimSuffix(tt.file, ".yaml"), func(t *testing.T) {
			name := "bad/" + tt.file
			f, err := os.Open(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			doc, err := siteyaml.Decode(name, f)
			if err == nil {
				t.Fatalf("Decode succeeded: %v", doc.Config)
			}
			var e *siteyaml.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not a *siteyaml.Error", err, err)
			}
			if got, want := e.Line, tt.line; got != want {
				t.Errorf("line = %d, want %d", got, want)
			}
			want := name + ": " + tt.msg
			if tt.line > 0 {
				want = name + ":" + strconv.Itoa(tt.line) + ": " + tt.msg
			}
			if got := err.Error(); got != want {
				t.Errorf("error:\n got %s\nwant %s", got, want)
			}
			if got, want := site.ErrorCode(err), site.EInvalid; got != want {
				t.Errorf("ErrorCode = %q, want %q", got, want)
			}
		})
	}
	files, _ := filepath.Glob("testdata/bad/*.yaml")
	for _, f := range files {
		if !covered[filepath.Base(f)] {
			t.Errorf("%s has no test case", f)
		}
	}
}

func TestDecodeRejectsAliasExpansion(t *testing.T) {
	// Each user's groups list is an alias to the first user's 2,000-name
	// list: a small file that would expand to 4 million nodes.
	var b strings.Builder
	b.WriteString("users:\n  - name: u\n    groups: &g [")
	for i := range 2000 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("g")
		b.WriteString(strconv.Itoa(i))
	}
	b.WriteString("]\n")
	for i := range 2000 {
		b.WriteString("  - {name: u" + strconv.Itoa(i) + ", groups: *g}\n")
	}
	_, err := siteyaml.Decode("bomb.yaml", strings.NewReader(b.String()))
	if err == nil || !strings.Contains(err.Error(), "aliases expand the document by more than") {
		t.Fatalf("Decode = %v, want an alias expansion error", err)
	}
}

func TestDecodeAcceptsAliases(t *testing.T) {
	doc, err := siteyaml.Decode("aliases.yaml", strings.NewReader(`
users:
  - name: alice
    groups: &staff [staff, domain-users]
  - name: bob
    groups: *staff
`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := doc.Config.Users[1].Groups, []string{"domain-users", "staff"}; !reflect.DeepEqual(got, want) {
		t.Errorf("bob's groups = %q, want %q", got, want)
	}
}

func TestDecodeAppliesDefaults(t *testing.T) {
	doc := MustDecodeFile(t, "defaults.yaml")
	c := doc.Config

	t.Run("settings", func(t *testing.T) {
		want := site.DefaultSettings()
		want.Name = "partial settings"
		if got := c.Settings; got != want {
			t.Errorf("settings = %+v, want %+v", got, want)
		}
	})
	t.Run("settings omitted", func(t *testing.T) {
		doc, err := siteyaml.Decode("zones.yaml", strings.NewReader("zones: [{name: primary, primary: true}]\n"))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := doc.Config.Settings, site.DefaultSettings(); got != want {
			t.Errorf("settings = %+v, want %+v", got, want)
		}
	})
	t.Run("delivery group with no options", func(t *testing.T) {
		want := site.NewDeliveryGroup("Bare", "rdsh")
		if got := findGroup(t, c, "Bare"); !reflect.DeepEqual(got, want) {
			t.Errorf("delivery group = %+v\nwant %+v", got, want)
		}
	})
	t.Run("delivery group with partial load rules", func(t *testing.T) {
		want := site.NewDeliveryGroup("Partial", "vdi")
		want.LoadRules.MaxSessions.Limit = 100
		want.LoadRules.CPU.Enabled = true
		want.Reconnect = site.ReconnectDisconnectedOnly
		if got := findGroup(t, c, "Partial"); !reflect.DeepEqual(got, want) {
			t.Errorf("delivery group = %+v\nwant %+v", got, want)
		}
	})
	t.Run("null keeps defaults", func(t *testing.T) {
		want := site.NewDeliveryGroup("Nulls", "rdsh-2")
		if got := findGroup(t, c, "Nulls"); !reflect.DeepEqual(got, want) {
			t.Errorf("delivery group = %+v\nwant %+v", got, want)
		}
	})
	t.Run("resource kinds and display names", func(t *testing.T) {
		if got, want := len(c.Applications), 1; got != want {
			t.Fatalf("%d applications, want %d", got, want)
		}
		if got, want := len(c.Desktops), 1; got != want {
			t.Fatalf("%d desktops, want %d", got, want)
		}
		app, desk := c.Applications[0], c.Desktops[0]
		if app.Kind != site.Application || desk.Kind != site.Desktop {
			t.Errorf("kinds = %q, %q; want %q, %q", app.Kind, desk.Kind, site.Application, site.Desktop)
		}
		if got, want := app.DisplayName, "editor"; got != want {
			t.Errorf("display name = %q, want %q (the name)", got, want)
		}
	})
	t.Run("scalars as strings", func(t *testing.T) {
		// YAML reads 0042 as a number and true as a boolean; a name keeps the text.
		if got, want := c.Users[0].Name, "0042"; got != want {
			t.Errorf("user name = %q, want %q", got, want)
		}
		if got, want := c.Users[0].DisplayName, "true"; got != want {
			t.Errorf("display name = %q, want %q", got, want)
		}
	})
	t.Run("normalized", func(t *testing.T) {
		var names []string
		for _, g := range c.DeliveryGroups {
			names = append(names, g.Name)
		}
		if want := []string{"Bare", "Nulls", "Partial"}; !reflect.DeepEqual(names, want) {
			t.Errorf("delivery groups = %q, want sorted %q", names, want)
		}
	})
	t.Run("valid", func(t *testing.T) {
		if err := c.Validate(); err != nil {
			t.Errorf("Validate: %v", doc.Annotate(err))
		}
	})
}

func findGroup(t *testing.T, c *site.Config, name string) site.DeliveryGroup {
	t.Helper()
	for _, g := range c.DeliveryGroups {
		if g.Name == name {
			return g
		}
	}
	t.Fatalf("no delivery group %q", name)
	return site.DeliveryGroup{}
}

func TestDecodeEmptyMapping(t *testing.T) {
	doc, err := siteyaml.Decode("empty-site.yaml", strings.NewReader("{}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := *doc.Config, (site.Config{Settings: site.DefaultSettings()}); !reflect.DeepEqual(got, want) {
		t.Errorf("config = %+v, want %+v", got, want)
	}
}
