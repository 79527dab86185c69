package main

import (
	"flag"
	"os"
	"runtime"
	"strconv"
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
	parallelTests()
	goleak.VerifyTestMain(mainFunc(func() int {
		defer removeBootImports()
		return pgtest.Main(m)
	}))
}

type mainFunc func() int

func (f mainFunc) Run() int { return f() }

// minParallel is how many of the package's parallel tests run at once
// unless -test.parallel says otherwise.
const minParallel = 8

// parallelTests raises -test.parallel, when it was not given, from
// GOMAXPROCS (two on a 2-core machine) to minParallel. The package's
// parallel tests are the boot tests and the static builds: a boot test
// spends its time waiting for a VM slot (internal/vmrun bounds the VMs
// at one per CPU) and then for QEMU, a build for the go command, so that
// with two of them at once a build or a test that waits for a slot would
// leave the VM slots idle. The VM slots bound them, not the test runner.
func parallelTests() {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", strconv.Itoa(max(minParallel, runtime.GOMAXPROCS(0))))
	}
}
