package demo_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/siteyaml"
)

var update = flag.Bool("update", false, "rewrite examples/site.yaml from demo.Site()")

// exampleFile is the committed encoding of the demo site.
var exampleFile = filepath.Join("..", "..", "examples", "site.yaml")

func TestExampleFileIsCurrent(t *testing.T) {
	var buf bytes.Buffer
	if err := siteyaml.Encode(&buf, demo.Site()); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(exampleFile, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	committed, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatalf("%v; run go test ./internal/demo -update", err)
	}
	if !bytes.Equal(committed, buf.Bytes()) {
		t.Fatalf("%s differs from siteyaml.Encode(demo.Site()); run go test ./internal/demo -update", exampleFile)
	}
}

func TestExampleFile(t *testing.T) {
	f, err := os.Open(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := siteyaml.Decode(exampleFile, f)
	if err != nil {
		t.Fatal(err)
	}
	c := doc.Config
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", doc.Annotate(err))
	}
	if !reflect.DeepEqual(c, demo.Site()) {
		t.Errorf("%s decodes to a configuration other than demo.Site()", exampleFile)
	}

	if got, want := len(c.Applications), 400; got != want {
		t.Errorf("%d applications, want %d", got, want)
	}
	if got, want := len(c.Machines), 57; got != want {
		t.Errorf("%d machines, want %d", got, want)
	}
	if got, want := len(c.Users), 1000; got != want {
		t.Errorf("%d users, want %d", got, want)
	}
	if got := len(c.DeliveryGroups); got < 3 {
		t.Errorf("%d delivery groups, want at least 3", got)
	}
	if got := len(c.Groups); got < 3 {
		t.Errorf("%d groups, want at least 3", got)
	}

	entitled := Entitled(c, "user0001")
	n := 0
	for _, a := range c.Applications {
		if entitled[a.Name] {
			n++
		}
	}
	if n != 400 {
		t.Errorf("user0001 may use %d applications, want all 400", n)
	}
	CheckSizes(t, c)
	CheckEntitlements(t, c)
}
