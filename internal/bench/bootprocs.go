package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
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

	"golang.org/x/sys/unix"

	"github.com/usher-vdi/usher/internal/benchkit"
)

// The boot bench's helpers: the usher processes it starts (usher stream,
// usher target), their meters on /metrics, and the QEMU monitor (QMP)
// that gives each VM's own disk counters.

// bootProc is an usher process of the boot bench.
type bootProc struct {
	name    string
	metrics string // its /metrics address
	cmd     *exec.Cmd
	out     *lastBytes
	exited  chan struct{}
}

// lastBytes keeps the last bytes a process wrote, for its errors.
type lastBytes struct {
	mu sync.Mutex
	b  []byte
}

func (l *lastBytes) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	if len(l.b) > 8<<10 {
		l.b = append(l.b[:0], l.b[len(l.b)-8<<10:]...)
	}
	return len(p), nil
}

func (l *lastBytes) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.TrimSpace(string(l.b))
}

// startBootProc starts self with args and waits until it accepts
// connections at dial ("tcp" or "unix" address) and serves /metrics.
func startBootProc(ctx context.Context, name string, self, args []string, network, addr, metrics string) (*bootProc, error) {
	argv := append(append([]string{}, self...), args...)
	p := &bootProc{name: name, metrics: metrics, out: &lastBytes{}, exited: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
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
		c, err := net.DialTimeout(network, addr, time.Second)
		if err == nil {
			c.Close()
			if _, err := scrapeLayers(ctx, metrics); err == nil {
				return p, nil
			}
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

// cpu is a meter of the process's CPU (it and its children).
func (p *bootProc) cpu() benchkit.Meter { return benchkit.TreeCPU(p.cmd.Process.Pid) }

// stop asks the process to end (SIGTERM) and waits, killing it after
// 30 s.
func (p *bootProc) stop() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s had exited (%s): %s", p.name, p.cmd.ProcessState, p.out)
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(30 * time.Second):
		p.kill()
		return fmt.Errorf("%s did not stop in 30 s after SIGTERM; killed", p.name)
	}
}

func (p *bootProc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Kill()
	<-p.exited
}

// freeTCP returns a loopback address with a port free now.
func freeTCP() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// LayerIO is what a meter counted at one layer: operations and bytes.
// Zeros are NBD WRITE_ZEROES requests, which the meters count apart from
// writes (QEMU's counters count a guest's write-zeroes as writes).
type LayerIO struct {
	Reads      int64 `json:"reads"`
	Writes     int64 `json:"writes"`
	ReadBytes  int64 `json:"read_bytes"`
	WriteBytes int64 `json:"write_bytes"`
	Zeros      int64 `json:"zeros,omitempty"`
	ZeroBytes  int64 `json:"zero_bytes,omitempty"`
}

// Add returns the sum of two counts.
func (l LayerIO) Add(o LayerIO) LayerIO {
	return LayerIO{l.Reads + o.Reads, l.Writes + o.Writes, l.ReadBytes + o.ReadBytes, l.WriteBytes + o.WriteBytes,
		l.Zeros + o.Zeros, l.ZeroBytes + o.ZeroBytes}
}

var bootMetricsClient = &http.Client{Timeout: 10 * time.Second}

// scrapeLayers reads usher_block_ops_total and usher_block_bytes_total
// from a /metrics endpoint, by layer.
func scrapeLayers(ctx context.Context, addr string) (map[string]LayerIO, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := bootMetricsClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	return parseLayers(resp.Body)
}

// parseLayers reads the meter's Prometheus lines into counts by layer.
func parseLayers(r io.Reader) (map[string]LayerIO, error) {
	out := map[string]LayerIO{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var bytes bool
		var rest string
		switch {
		case strings.HasPrefix(line, "usher_block_ops_total{"):
			rest = line[len("usher_block_ops_total{"):]
		case strings.HasPrefix(line, "usher_block_bytes_total{"):
			rest, bytes = line[len("usher_block_bytes_total{"):], true
		default:
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			return nil, fmt.Errorf("metrics line %q", line)
		}
		var layer, op string
		for _, l := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(l, "=")
			switch v = strings.Trim(v, `"`); k {
			case "layer":
				layer = v
			case "op":
				op = v
			}
		}
		f, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		n, c := int64(f), out[layer]
		switch {
		case op == "read" && bytes:
			c.ReadBytes = n
		case op == "read":
			c.Reads = n
		case op == "write" && bytes:
			c.WriteBytes = n
		case op == "write":
			c.Writes = n
		case op == "zero" && bytes:
			c.ZeroBytes = n
		case op == "zero":
			c.Zeros = n
		}
		out[layer] = c
	}
	return out, sc.Err()
}

// qmp is a connection to a QEMU monitor (QMP).
type qmp struct {
	conn net.Conn
	r    *bufio.Reader
}

// dialQMP connects to the QMP socket at path and leaves capabilities
// negotiation.
func dialQMP(ctx context.Context, path string) (*qmp, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("qmp: %w", err)
	}
	q := &qmp{conn: conn, r: bufio.NewReader(conn)}
	if _, err := q.line(); err != nil { // the greeting
		conn.Close()
		return nil, err
	}
	if _, err := q.do("qmp_capabilities"); err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

func (q *qmp) close() error { return q.conn.Close() }

// line reads one message that is not an event.
func (q *qmp) line() (map[string]json.RawMessage, error) {
	for {
		q.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := q.r.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("qmp: %w", err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("qmp: %q: %w", b, err)
		}
		if _, ok := m["event"]; !ok {
			return m, nil
		}
	}
}

// do runs a command and returns its "return" value.
func (q *qmp) do(command string) (json.RawMessage, error) {
	if _, err := fmt.Fprintf(q.conn, "{\"execute\":%q}\n", command); err != nil {
		return nil, fmt.Errorf("qmp %s: %w", command, err)
	}
	m, err := q.line()
	if err != nil {
		return nil, err
	}
	if e, ok := m["error"]; ok {
		return nil, fmt.Errorf("qmp %s: %s", command, e)
	}
	return m["return"], nil
}

// waitShutdown waits until the guest has powered off (QEMU run with
// -no-shutdown stays, its VM in the shutdown state).
func (q *qmp) waitShutdown(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		raw, err := q.do("query-status")
		if err != nil {
			return err
		}
		var st struct {
			Status  string `json:"status"`
			Running bool   `json:"running"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			return fmt.Errorf("qmp query-status: %w", err)
		}
		if st.Status == "shutdown" || !st.Running {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the guest did not power off in %v (status %s)", d, st.Status)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// blockStats returns the guest's disk I/O: the operations and bytes of
// every block device QEMU shows it, as its virtio disk completed them.
func (q *qmp) blockStats() (LayerIO, error) {
	raw, err := q.do("query-blockstats")
	if err != nil {
		return LayerIO{}, err
	}
	return parseBlockStats(raw)
}

func parseBlockStats(raw []byte) (LayerIO, error) {
	var devs []struct {
		Stats struct {
			RdOps   int64 `json:"rd_operations"`
			WrOps   int64 `json:"wr_operations"`
			RdBytes int64 `json:"rd_bytes"`
			WrBytes int64 `json:"wr_bytes"`
		} `json:"stats"`
	}
	if err := json.Unmarshal(raw, &devs); err != nil {
		return LayerIO{}, fmt.Errorf("qmp query-blockstats: %w", err)
	}
	if len(devs) == 0 {
		return LayerIO{}, errors.New("qmp query-blockstats: no block device")
	}
	var io LayerIO
	for _, d := range devs {
		io = io.Add(LayerIO{Reads: d.Stats.RdOps, Writes: d.Stats.WrOps, ReadBytes: d.Stats.RdBytes, WriteBytes: d.Stats.WrBytes})
	}
	return io, nil
}

// syncFS writes back the dirty pages of the file system holding dir.
func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}
