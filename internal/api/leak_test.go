package api_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when one of them leaves a goroutine
// behind: a test server, a broker's Run loop or the site DB's connections.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
