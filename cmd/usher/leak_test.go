package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/usher-vdi/usher/internal/pgtest"
)

// runAsUsher, set in the environment, makes the test binary run as usher
// with its arguments, so that the benches' clients in their own
// processes (Main.Self) run in tests too.
const runAsUsher = "USHER_TEST_RUN_AS_USHER"

// testSelf is the command line that runs this test binary as usher.
var testSelf = []string{"/usr/bin/env", runAsUsher + "=1", os.Args[0]}

// TestMain runs the binary as usher when asked to; otherwise it fails the
// package's tests when one of them leaves a goroutine behind.
func TestMain(m *testing.M) {
	if os.Getenv(runAsUsher) == "1" {
		os.Exit(runProcess())
	}
	goleak.VerifyTestMain(mainFunc(func() int {
		defer removeBootImports()
		return pgtest.Main(m)
	}))
}

type mainFunc func() int

func (f mainFunc) Run() int { return f() }
