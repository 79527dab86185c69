package brokerprom_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when one of them leaves a goroutine
// behind: a registry's Gather collects on goroutines of its own.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
