package benchkit

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Command returns a command for a load generator: under taskset, pinned
// to the plan's client CPUs, when the plan pins and taskset is installed.
// The note says how it runs, for the report.
func Command(p Plan, name string, args ...string) (cmd *exec.Cmd, note string) {
	if p.Pinned() {
		if ts, err := exec.LookPath("taskset"); err == nil {
			return exec.Command(ts, append([]string{"-c", CPUList(p.Client), name}, args...)...),
				fmt.Sprintf("%s in its own process on CPU %s", filepath.Base(name), CPUList(p.Client))
		}
	}
	return exec.Command(name, args...), filepath.Base(name) + " in its own process, not pinned"
}

// Run runs cmd to its end, killing it (and its process group) when ctx
// ends, and returns its combined output and the CPU it used: the
// rusage of it and its waited-for children, over its wall-clock time.
func Run(ctx context.Context, cmd *exec.Cmd) ([]byte, Usage, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, Usage{}, err
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		case <-done:
		}
	}()
	err := cmd.Wait()
	close(done)
	u := Usage{Wall: time.Since(start)}
	if ps := cmd.ProcessState; ps != nil {
		u.User, u.Sys = ps.UserTime(), ps.SystemTime()
	}
	return out.Bytes(), u, err
}
