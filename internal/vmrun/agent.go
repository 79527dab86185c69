package vmrun

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/usher-vdi/usher/internal/atomicfile"
)

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
		return "", fmt.Errorf("vmrun: boot agent: %w", err)
	}
	out := filepath.Join(dir, "usher")
	tmp := fmt.Sprintf("%s.%d", out, os.Getpid())
	cmd := exec.CommandContext(ctx, gocmd, "build", "-trimpath", "-ldflags=-s -w", "-o", tmp, "github.com/usher-vdi/usher/cmd/usher")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("vmrun: build the boot agent: %v\n%s", err, b)
	}
	if err := atomicfile.Replace(tmp, out); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("vmrun: boot agent: %w", err)
	}
	return out, nil
}
