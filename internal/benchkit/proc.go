package benchkit

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"strconv"
)

// ProcSpec says how to start a server for a bench (StartProc).
type ProcSpec struct {
	// Name names the process in errors ("usher stream").
	Name string
	// Argv is the command and its arguments.
	Argv []string
	// Env is added to this process's environment.
	Env []string
	// CPUs, when set, pin the process to those CPUs with taskset, when
	// taskset is installed (a Plan's Server CPUs).
	CPUs []int
	// Network ("tcp" when empty, or "unix") and Addr are where the
	// process accepts connections once it is ready.
	Network, Addr string
	// Ready, when set, is asked too once Addr accepts connections, again
	// until it returns nil (a /metrics page that answers, say).
	Ready func(ctx context.Context) error
}

// Proc is a server that a bench started: it dies with the bench
// (SIGKILL when the bench's process dies), and the last 8 KiB it wrote to
// stdout and stderr are kept for its errors.
type Proc struct {
	Name   string
	cmd    *exec.Cmd
	out    *Tail
	exited chan struct{}
}

// StartProc starts spec's process and returns once it accepts connections
// at spec.Addr (and spec.Ready returns nil). It fails, the process killed,
// when the process exits before (the error holds what it wrote), when ctx
// ends, or when it is not ready within a minute.
func StartProc(ctx context.Context, spec ProcSpec) (*Proc, error) {
	argv := spec.Argv
	if len(spec.CPUs) > 0 {
		if ts, err := exec.LookPath("taskset"); err == nil {
			argv = append([]string{ts, "-c", CPUList(spec.CPUs)}, argv...)
		}
	}
	network := spec.Network
	if network == "" {
		network = "tcp"
	}
	p := &Proc{Name: spec.Name, out: &Tail{}, exited: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	if len(spec.Env) > 0 {
		p.cmd.Env = append(os.Environ(), spec.Env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", spec.Name, err)
	}
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := net.DialTimeout(network, spec.Addr, time.Second)
		if err == nil {
			c.Close()
			if spec.Ready == nil || spec.Ready(ctx) == nil {
				return p, nil
			}
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("%s exited before listening (%s): %s", spec.Name, p.cmd.ProcessState, p.out)
		case <-ctx.Done():
			p.Kill()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Kill()
			return nil, fmt.Errorf("%s did not listen at %s in a minute: %s", spec.Name, spec.Addr, p.out)
		}
	}
}

// Pid is the process's ID (taskset's, which runs the server in its own
// process).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// CPU is a meter of the process's CPU (it and its children).
func (p *Proc) CPU() Meter { return TreeCPU(p.cmd.Process.Pid) }

// Output is the last of what the process wrote.
func (p *Proc) Output() string { return p.out.String() }

// Stop asks the process to end (SIGTERM) and waits for it, killing it
// after 30 s; it reports an exit that was not clean, and a process that
// had exited before. A process that does not catch the signal (a test
// binary standing in for usher) and ends by it has stopped as asked.
func (p *Proc) Stop() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s had exited (%s): %s", p.Name, p.cmd.ProcessState, p.out)
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.Kill()
		return fmt.Errorf("%s did not stop in 30 s after SIGTERM; killed", p.Name)
	}
	st := p.cmd.ProcessState
	if ws, ok := st.Sys().(syscall.WaitStatus); st.Success() || ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
		return nil
	}
	return fmt.Errorf("%s: %s: %s", p.Name, st, p.out)
}

// Kill ends the process at once (SIGKILL) and waits for it.
func (p *Proc) Kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Kill()
	<-p.exited
}

// Alive returns an error, with what the process wrote, when it has
// exited.
func (p *Proc) Alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited (%s): %s", p.Name, p.cmd.ProcessState, p.out)
	default:
		return nil
	}
}

// Tail keeps the last Max bytes written to it (8 KiB when Max is 0), for
// a process's messages. It is safe for concurrent use.
type Tail struct {
	Max int
	mu  sync.Mutex
	b   []byte
}

func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	max := t.Max
	if max <= 0 {
		max = 8 << 10
	}
	t.b = append(t.b, p...)
	if len(t.b) > max {
		t.b = append(t.b[:0], t.b[len(t.b)-max:]...)
	}
	return len(p), nil
}

// String is what the Tail holds, spaces trimmed.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// FreePort returns a loopback TCP port that is free now (another process
// may take it before the caller's server does).
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// FreeAddr is FreePort as an address: "127.0.0.1:PORT".
func FreeAddr() (string, error) {
	port, err := FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}
