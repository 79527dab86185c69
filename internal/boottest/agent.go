package boottest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/atomicfile"
)

// agents memoises BuildAgent within a test binary.
var agents struct {
	sync.Mutex
	path string
	err  error
}

// BuildAgent builds usher statically linked (CGO_ENABLED=0, stripped)
// as dir/usher (written under another name, then renamed), as a device-side write cache's boot agent (usher serve
// --boot-agent), with the go command on PATH, from the module the
// working directory is in. It returns an error wrapping ErrUnavailable
// when there is no go command.
func BuildAgent(ctx context.Context, dir string) (string, error) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		return "", unavailable("the go command is not on PATH, to build the boot agent")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("boottest: boot agent: %w", err)
	}
	out := filepath.Join(dir, "usher")
	tmp := fmt.Sprintf("%s.%d", out, os.Getpid())
	cmd := exec.CommandContext(ctx, gocmd, "build", "-trimpath", "-ldflags=-s -w", "-o", tmp, "github.com/usher-vdi/usher/cmd/usher")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("boottest: build the boot agent: %v\n%s", err, b)
	}
	if err := atomicfile.Replace(tmp, out); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("boottest: boot agent: %w", err)
	}
	return out, nil
}

// Agent returns a statically linked usher for tb's boots (BuildAgent),
// built once per test binary, from the code under test, into the cache
// directory's agent/ (the go command's build cache makes it take
// seconds after the first). It skips tb without a go command (fails it
// under CI=true).
func Agent(tb TB) string {
	tb.Helper()
	agents.Lock()
	defer agents.Unlock()
	if agents.path == "" && agents.err == nil {
		start := time.Now()
		agents.path, agents.err = BuildAgent(context.Background(), filepath.Join(CacheDir(), "agent"))
		tb.Logf("boottest: built the boot agent in %v", time.Since(start).Round(time.Millisecond))
	}
	if agents.err != nil {
		skipOrFail(tb, agents.err)
	}
	return agents.path
}
