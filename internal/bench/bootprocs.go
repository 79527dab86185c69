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
	"time"

	"golang.org/x/sys/unix"

	"github.com/usher-vdi/usher/internal/benchkit"
	"github.com/usher-vdi/usher/internal/metricname"
)

// The boot bench's helpers: the usher processes it starts (usher stream,
// usher target), their meters on /metrics, and the QEMU monitor (QMP)
// that gives each VM's own disk counters.

// startBootProc starts self with args, an usher process of the boot
// bench, and waits until it accepts connections at addr (network "tcp"
// or "unix") and serves /metrics at metrics.
func startBootProc(ctx context.Context, name string, self, args []string, network, addr, metrics string) (*benchkit.Proc, error) {
	return benchkit.StartProc(ctx, benchkit.ProcSpec{
		Name: name, Argv: append(append([]string{}, self...), args...), Network: network, Addr: addr,
		Ready: func(ctx context.Context) error {
			_, err := scrapeLayers(ctx, metrics)
			return err
		},
	})
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

// scrapeLayers reads the block meter's counters (metricname.BlockOps
// and BlockBytes) from a /metrics endpoint, by layer.
func scrapeLayers(ctx context.Context, addr string) (map[string]LayerIO, error) {
	out := map[string]LayerIO{}
	if err := benchkit.Scrape(ctx, bootMetricsClient, "http://"+addr+"/metrics", func(s benchkit.Sample) { addLayer(out, s) }); err != nil {
		return nil, err
	}
	return out, nil
}

// parseLayers reads the meter's Prometheus lines into counts by layer.
func parseLayers(r io.Reader) (map[string]LayerIO, error) {
	out := map[string]LayerIO{}
	if err := benchkit.ParseMetrics(r, func(s benchkit.Sample) { addLayer(out, s) }); err != nil {
		return nil, err
	}
	return out, nil
}

// addLayer counts s into out when it is one of the block meter's.
func addLayer(out map[string]LayerIO, s benchkit.Sample) {
	var bytes bool
	switch s.Name {
	case metricname.BlockOps:
	case metricname.BlockBytes:
		bytes = true
	default:
		return
	}
	layer, op := s.Labels[metricname.Layer], s.Labels[metricname.Op]
	n, c := int64(s.Value), out[layer]
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
