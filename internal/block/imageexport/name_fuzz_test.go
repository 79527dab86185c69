package imageexport_test

import (
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/block/imageexport"
)

// FuzzParseName checks ParseName on any export name a client sends: it
// never panics; a name it accepts is the one Name writes (one name per
// export, IMAGE or IMAGE@N); and Name's names parse back to their image
// and version.
func FuzzParseName(f *testing.F) {
	for _, s := range []string{"win11", "win11@3", "win11@0", "win11@x", "win11@", "", "@", "a@b@3", "win11@-1", "win11@99999999999999999999"} {
		f.Add(s, "win11", 3)
	}
	f.Fuzz(func(t *testing.T, name, img string, n int) {
		gotImg, gotN, has, err := imageexport.ParseName(name)
		switch {
		case err != nil:
		case has:
			if back := imageexport.Name(gotImg, gotN); back != name {
				t.Fatalf("ParseName(%q) = %q, %d; but Name(%q, %d) = %q", name, gotImg, gotN, gotImg, gotN, back)
			}
		case gotImg != name || gotN != 0:
			t.Fatalf("ParseName(%q) = %q, %d, no version; want %q, 0", name, gotImg, gotN, name)
		}
		if strings.Contains(img, "@") || n < 0 {
			return // no image's name holds an "@", no version is negative
		}
		gotImg, gotN, has, err = imageexport.ParseName(imageexport.Name(img, n))
		if err != nil || gotImg != img || gotN != n || !has {
			t.Fatalf("ParseName(Name(%q, %d)) = %q, %d, %v, %v", img, n, gotImg, gotN, has, err)
		}
	})
}
