package lhc

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/usher-vdi/usher/internal/pgtest"
)

// TestMain fails the package's tests when one leaves a goroutine behind:
// a probe loop, a copy or the copy's database. The tests that need a
// PostgreSQL site DB get it from pgtest, which Main runs them through.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(mainFunc(func() int { return pgtest.Main(m) }))
}

type mainFunc func() int

func (f mainFunc) Run() int { return f() }
