package vda_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a machine, agent or simulator
// leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
