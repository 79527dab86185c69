package broker_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when one of them leaves a goroutine
// behind: a broker's Run loop, a launch or the site DB's connections.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
