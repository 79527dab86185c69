package ldapauth

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine (a connection's
// reader, a context watcher) outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
