package siteyaml_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/siteyaml"
)

// base is a valid site; each case appends to it. Its last line is 17.
const base = `settings:
  name: test
  domain: TEST
zones:
  - name: primary
    primary: true
catalogs:
  - name: rdsh
    kind: multi-session
    zone: primary
delivery_groups:
  - name: Apps
    catalogs: [rdsh]
machines:
  - name: vda-01
    catalog: rdsh
    address: vda-01:3389
`

func TestAnnotate(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"missing reference", base + `  - name: vda-02
    catalog: nope
    address: vda-02:3389
`, `site.yaml:18: machine "vda-02": catalog refers to catalog "nope", which does not exist`},
		{"duplicate name points at the second", base + `  - name: vda-02
    catalog: rdsh
    address: vda-02:3389
  - name: vda-01
    catalog: rdsh
    address: vda-01:3389
`, `site.yaml:21: machine "vda-01" already exists`},
		{"desktop named like an application", base + `applications:
  - name: shared
    command_line: /usr/bin/gedit
    delivery_groups: [Apps]
desktops:
  - name: shared
    delivery_groups: [Apps]
`, `site.yaml:23: desktop "shared" already exists`},
		{"bad name", base + `  - name: "vda-02 "
    catalog: rdsh
    address: vda-02:3389
`, `site.yaml:18: machine name "vda-02 " has leading or trailing space`},
		{"no name", base + `  - catalog: rdsh
    address: vda-02:3389
`, `site.yaml:18: machine name is empty`},
		{"settings", strings.Replace(base, "name: test", `name: " "`, 1), `site.yaml:1: settings: site name is empty`},
		{"zones", strings.Replace(base, "primary: true", "primary: false", 1), `site.yaml:4: zones: exactly one zone must be primary, found 0`},
		{"entitlement", base + `applications:
  - name: editor
    command_line: /usr/bin/gedit
    delivery_groups: []
entitlements:
  - name: all
    delivery_group: Apps
    resources: [editor]
    groups: [staff]
groups:
  - name: staff
`, `site.yaml:23: entitlement "all": resource "editor" is not published on delivery group "Apps"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := siteyaml.Decode("site.yaml", strings.NewReader(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			verr := doc.Config.Validate()
			if verr == nil {
				t.Fatal("Validate succeeded")
			}
			err = doc.Annotate(verr)
			if got := err.Error(); got != tt.want {
				t.Errorf("Annotate:\n got %s\nwant %s", got, tt.want)
			}
			if !errors.Is(err, verr) {
				t.Errorf("annotated error does not wrap %v", verr)
			}
			if got, want := site.ErrorCode(err), site.ErrorCode(verr); got != want {
				t.Errorf("ErrorCode = %q, want %q", got, want)
			}
			if again := doc.Annotate(err); again != err {
				t.Errorf("annotating twice changed %v to %v", err, again)
			}
		})
	}
}

func TestAnnotateNameWithQuotes(t *testing.T) {
	doc, err := siteyaml.Decode("site.yaml", strings.NewReader(base+`  - name: 'vda "02": b'
    catalog: nope
    address: vda-02:3389
`))
	if err != nil {
		t.Fatal(err)
	}
	err = doc.Annotate(doc.Config.Validate())
	want := `site.yaml:18: machine "vda \"02\": b": catalog refers to catalog "nope", which does not exist`
	if err == nil || err.Error() != want {
		t.Errorf("Annotate:\n got %v\nwant %s", err, want)
	}
}

func TestAnnotateDuplicateNameWithQuotes(t *testing.T) {
	doc, err := siteyaml.Decode("site.yaml", strings.NewReader(base+`  - name: 'vda "02"'
    catalog: rdsh
    address: vda-02:3389
  - name: 'vda "02"'
    catalog: rdsh
    address: vda-02:3389
`))
	if err != nil {
		t.Fatal(err)
	}
	err = doc.Annotate(doc.Config.Validate())
	want := `site.yaml:21: machine "vda \"02\"" already exists`
	if err == nil || err.Error() != want {
		t.Errorf("Annotate:\n got %v\nwant %s", err, want)
	}
}

func TestAnnotateLeavesOtherErrors(t *testing.T) {
	doc, err := siteyaml.Decode("site.yaml", strings.NewReader(base))
	if err != nil {
		t.Fatal(err)
	}
	plain := errors.New(`machine "vda-01": not a site error`)
	for _, err := range []error{
		nil,
		plain,
		site.NotFound(site.KindMachine, "vda-01"), // "machine "vda-01" not found": not a validation message
		site.Errorf(site.EInvalid, `machine "vda-99": catalog is empty`),
		site.Errorf(site.EInvalid, `something else`),
	} {
		if got := doc.Annotate(err); got != err {
			t.Errorf("Annotate(%v) = %v, want it unchanged", err, got)
		}
	}
	wrapped := fmt.Errorf("apply: %w", site.Errorf(site.EInvalid, `machine "vda-01": address is empty`))
	if got, want := fmt.Sprint(doc.Annotate(wrapped)), `site.yaml:15: apply: invalid: machine "vda-01": address is empty`; got != want {
		t.Errorf("Annotate(wrapped) = %s, want %s", got, want)
	}
}

func TestDocumentLine(t *testing.T) {
	doc, err := siteyaml.Decode("site.yaml", strings.NewReader(base))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		kind site.Kind
		name string
		line int
	}{
		{site.KindZone, "primary", 5},
		{site.KindCatalog, "rdsh", 8},
		{site.KindDeliveryGroup, "Apps", 12},
		{site.KindMachine, "vda-01", 15},
		{site.KindMachine, "vda-02", 0},
		{site.KindCatalog, "primary", 0},
	}
	for _, tt := range tests {
		if got := doc.Line(tt.kind, tt.name); got != tt.line {
			t.Errorf("Line(%s, %q) = %d, want %d", tt.kind, tt.name, got, tt.line)
		}
	}
}
