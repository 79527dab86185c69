package siteyaml_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/siteyaml"
)

// FuzzDecode checks that Decode never panics, that every error it returns
// is located, and that whatever it accepts survives an Encode and Decode
// round trip unchanged.
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	more, _ := filepath.Glob("testdata/bad/*.yaml")
	for _, name := range append(files, more...) {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(MustEncode(f, tricky(), siteyaml.EncodeOptions{WithSecrets: true}))
	f.Add([]byte("users: [{name: a, groups: &g [x, y]}, {name: b, groups: *g}]"))

	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := siteyaml.Decode("fuzz.yaml", bytes.NewReader(data))
		if err != nil {
			var e *siteyaml.Error
			if !errors.As(err, &e) || e.File != "fuzz.yaml" || err.Error() == "" {
				t.Fatalf("error %v (%T) is not a located *siteyaml.Error", err, err)
			}
			return
		}
		_ = doc.Annotate(doc.Config.Validate()) // must not panic either

		again := MustRoundTrip(t, doc.Config, siteyaml.EncodeOptions{WithSecrets: true})
		if !reflect.DeepEqual(again, doc.Config) {
			t.Fatalf("round trip changed the configuration:\n got %+v\nwant %+v", again, doc.Config)
		}
		if site.ErrorCode(doc.Config.Validate()) != site.ErrorCode(again.Validate()) {
			t.Fatalf("round trip changed validity")
		}
	})
}
