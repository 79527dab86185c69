package broker_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/usher-vdi/usher/internal/pgtest"
)

// TestMain runs the tests that need PostgreSQL on the server pgtest finds
// or starts, and fails the package's tests when one of them leaves a
// goroutine behind: a broker's Run loop, a launch or the site DB's
// connections.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(mainFunc(func() int { return pgtest.Main(m) }))
}

type mainFunc func() int

func (f mainFunc) Run() int { return f() }
