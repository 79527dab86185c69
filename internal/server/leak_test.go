package server_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/usher-vdi/usher/internal/pgtest"
)

// TestMain fails the package's tests when one of them leaves a goroutine
// behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(mainFunc(func() int { return pgtest.Main(m) }))
}

type mainFunc func() int

func (f mainFunc) Run() int { return f() }
