package benchkit

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when one leaves a goroutine behind;
// run by the Proc tests as their server, the binary serves instead.
func TestMain(m *testing.M) {
	if addr := os.Getenv(procServerEnv); addr != "" {
		procServer(addr)
		return
	}
	goleak.VerifyTestMain(m)
}
