package lhc

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when one leaves a goroutine behind:
// a probe loop, a copy or the copy's database.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
