package siteyaml_test

import (
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/siteyaml"
)

func TestTargets(t *testing.T) {
	doc, err := siteyaml.Decode("site.yaml", strings.NewReader(base+`targets:
  - name: pc01
    mac: 52-54-00-AB-CD-01
    image: win11
  - name: pc02
    mac: "52:54:00:ab:cd:02"
    image: win11
    version: 0
    cache: ram
    ram: 256MiB
`))
	if err != nil {
		t.Fatal(err)
	}
	c := doc.Config
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(c.Targets) != 2 || c.Targets[0].MAC != "52:54:00:ab:cd:01" || c.Targets[0].Cache != site.CacheRAMOverflow ||
		c.Targets[0].Version != nil || c.Targets[1].Version == nil || *c.Targets[1].Version != 0 {
		t.Fatalf("targets %+v", c.Targets)
	}

	// The file's line, and the field, of a target's errors.
	for _, tc := range []struct{ yaml, want string }{
		{"  - name: pc01\n    mac: 52:54:00:ab:cd\n    image: win11\n", `site.yaml:19: target "pc01": mac "52:54:00:ab:cd" is not a 48-bit MAC address`},
		{"  - name: pc01\n    mac: 52:54:00:ab:cd:01\n    image: w\n  - name: pc02\n    mac: 52-54-00-AB-CD-01\n    image: w\n",
			`site.yaml:22: target "pc02": mac 52:54:00:ab:cd:01 is already target "pc01"'s`},
		{"  - name: pc01\n    mac: 52:54:00:ab:cd:01\n    image: w\n    cache: disk\n", `site.yaml:19: target "pc01": cache "disk" is not one of`},
	} {
		doc, err := siteyaml.Decode("site.yaml", strings.NewReader(base+"targets:\n"+tc.yaml))
		if err != nil {
			t.Fatal(err)
		}
		err = doc.Annotate(doc.Config.Validate())
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("got %v, want %s...", err, tc.want)
		}
	}
	if _, err := siteyaml.Decode("site.yaml", strings.NewReader(base+"targets:\n  - name: pc01\n    mac: 52:54:00:ab:cd:01\n    image: w\n    version: latest\n")); err == nil ||
		!strings.Contains(err.Error(), "version") {
		t.Errorf("a version that is not a number: %v", err)
	}
	if _, err := siteyaml.Decode("site.yaml", strings.NewReader(base+"targets:\n  - name: pc01\n    mac: 52:54:00:ab:cd:01\n    image: w\n    colour: red\n")); err == nil ||
		!strings.Contains(err.Error(), "colour") {
		t.Errorf("an unknown field: %v", err)
	}
}
