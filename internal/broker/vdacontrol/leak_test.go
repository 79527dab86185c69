package vdacontrol_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when one of them leaves a goroutine
// behind: a test server, or a connection of the client's transport.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
