package server_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/usher-vdi/usher/internal/pgtest"
)

// TestMain fails the package's tests when one of them leaves a goroutine
// behind. toxiproxy's own pipes are let be: a link held by a timeout
// toxic (TestUnansweringSiteDB's silent site DB) keeps a goroutine
// blocked after the toxic is removed and the proxy restarted, in the
// library, not in usher.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(mainFunc(func() int { return pgtest.Main(m) }),
		goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe"))
}

type mainFunc func() int

func (f mainFunc) Run() int { return f() }
