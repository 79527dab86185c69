package nfuse_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzHandler posts arbitrary bodies to a handler over the demo site: every
// answer must be a well-formed NFuse answer with HTTP 200.
func FuzzHandler(f *testing.F) {
	requests, _ := filepath.Glob("testdata/golden/*.request.xml")
	for _, path := range requests {
		if b, err := os.ReadFile(path); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(seed004))
	fx := newFixture(f, options{})
	f.Fuzz(func(t *testing.T, body []byte) {
		a := postTo(fx.handler, body)
		if a.status != 200 {
			t.Fatalf("status %d for %q", a.status, body)
		}
		mustWellFormed(t, a.body)
		if !strings.Contains(a.body, `<NFuseProtocol version="5.9"><Response`) {
			t.Fatalf("answer %s", a.body)
		}
	})
}
