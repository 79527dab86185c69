package blockbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/usher-vdi/usher/internal/benchkit"
)

// tail keeps the last bytes written to it, for a process's messages.
type tail struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// proc is a server the bench started (usher stream, usher hostcache,
// nbdkit), pinned to the servers' CPUs, serving NBD at addr and, for
// usher's, /metrics at metrics.
type proc struct {
	name          string
	addr, metrics string
	cmd           *exec.Cmd
	out           *tail
	exited        chan struct{}
}

// startProc starts argv (with env added to this process's) pinned to
// plan's server CPUs when taskset is installed, and waits until it
// accepts connections at addr.
func startProc(ctx context.Context, plan benchkit.Plan, name string, argv, env []string, addr, metrics string) (*proc, error) {
	if len(plan.Server) > 0 {
		if ts, err := exec.LookPath("taskset"); err == nil {
			argv = append([]string{ts, "-c", cpuList(plan.Server)}, argv...)
		}
	}
	p := &proc{name: name, addr: addr, metrics: metrics, out: &tail{max: 8 << 10}, exited: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return p, nil
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("%s exited before listening (%s): %s", name, p.cmd.ProcessState, p.out)
		case <-ctx.Done():
			p.kill()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, fmt.Errorf("%s did not listen at %s in a minute: %s", name, addr, p.out)
		}
	}
}

// pid is the server's process ID (taskset runs it in its own process).
func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop asks the server to end (SIGTERM) and waits for it, killing it
// after 30 s; it reports an exit that was not clean. A server that does
// not catch the signal (a test binary running as usher) and ends by it
// has stopped as asked.
func (p *proc) stop() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s had exited (%s): %s", p.name, p.cmd.ProcessState, p.out)
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.kill()
		return fmt.Errorf("%s did not stop in 30 s after SIGTERM; killed", p.name)
	}
	st := p.cmd.ProcessState
	if ws, ok := st.Sys().(syscall.WaitStatus); st.Success() || ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
		return nil
	}
	return fmt.Errorf("%s: %s: %s", p.name, st, p.out)
}

// kill ends the server at once and waits for it.
func (p *proc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Kill()
	<-p.exited
}

// alive returns an error when the server has exited.
func (p *proc) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited (%s): %s", p.name, p.cmd.ProcessState, p.out)
	default:
		return nil
	}
}

// blockMetrics are the meter's counters of one process:
// usher_block_ops_total and usher_block_bytes_total by layer and op,
// and the NBD connections it serves (usher_nbd_connections).
type blockMetrics struct {
	ops, bytes map[[2]string]int64
	conns      int64
}

func (m blockMetrics) op(layer, op string) int64      { return m.ops[[2]string{layer, op}] }
func (m blockMetrics) bytesOf(layer, op string) int64 { return m.bytes[[2]string{layer, op}] }

var metricsClient = &http.Client{Timeout: 10 * time.Second}

// scrapeBlocks reads the meter's counters from a /metrics endpoint.
func scrapeBlocks(ctx context.Context, addr string) (blockMetrics, error) {
	m := blockMetrics{ops: map[[2]string]int64{}, bytes: map[[2]string]int64{}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return m, err
	}
	resp, err := metricsClient.Do(req)
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return m, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	return m, parseBlockMetrics(resp.Body, &m)
}

// parseBlockMetrics reads Prometheus text lines into m.
func parseBlockMetrics(r io.Reader, m *blockMetrics) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var dst map[[2]string]int64
		var rest string
		switch {
		case strings.HasPrefix(line, "usher_nbd_connections "):
			f, err := strconv.ParseFloat(strings.TrimPrefix(line, "usher_nbd_connections "), 64)
			if err != nil {
				return fmt.Errorf("metrics line %q: %w", line, err)
			}
			m.conns = int64(f)
			continue
		case strings.HasPrefix(line, "usher_block_ops_total{"):
			dst, rest = m.ops, line[len("usher_block_ops_total{"):]
		case strings.HasPrefix(line, "usher_block_bytes_total{"):
			dst, rest = m.bytes, line[len("usher_block_bytes_total{"):]
		default:
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			return fmt.Errorf("metrics line %q", line)
		}
		var layer, op string
		for _, l := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(l, "=")
			v = strings.Trim(v, `"`)
			switch k {
			case "layer":
				layer = v
			case "op":
				op = v
			}
		}
		f, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return fmt.Errorf("metrics line %q: %w", line, err)
		}
		dst[[2]string{layer, op}] = int64(f)
	}
	return sc.Err()
}

// waitIdle waits until the servers serve no NBD connection: the last
// pass's VMs have gone, so that their exports can boot again.
func waitIdle(ctx context.Context, procs []*proc) error {
	deadline := time.Now().Add(time.Minute)
	for _, p := range procs {
		for {
			m, err := scrapeBlocks(ctx, p.metrics)
			if err != nil {
				return err
			}
			if m.conns == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s still serves %d connections a minute after its VMs left", p.name, m.conns)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}
