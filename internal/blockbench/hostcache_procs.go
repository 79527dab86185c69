package blockbench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/usher-vdi/usher/internal/benchkit"
	"github.com/usher-vdi/usher/internal/metricname"
)

// proc is a server the bench started (usher stream, usher hostcache,
// nbdkit), pinned to the servers' CPUs, serving NBD at addr and, for
// usher's, /metrics at metrics.
type proc struct {
	*benchkit.Proc
	addr, metrics string
}

// startProc starts argv (with env added to this process's) pinned to
// plan's server CPUs when taskset is installed, and waits until it
// accepts connections at addr.
func startProc(ctx context.Context, plan benchkit.Plan, name string, argv, env []string, addr, metrics string) (*proc, error) {
	p, err := benchkit.StartProc(ctx, benchkit.ProcSpec{Name: name, Argv: argv, Env: env, CPUs: plan.Server, Addr: addr})
	if err != nil {
		return nil, err
	}
	return &proc{Proc: p, addr: addr, metrics: metrics}, nil
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
	return m, benchkit.Scrape(ctx, metricsClient, "http://"+addr+"/metrics", m.add)
}

// parseBlockMetrics reads Prometheus text lines into m.
func parseBlockMetrics(r io.Reader, m *blockMetrics) error {
	return benchkit.ParseMetrics(r, m.add)
}

// add counts s into m when it is one of the meter's.
func (m *blockMetrics) add(s benchkit.Sample) {
	key := [2]string{s.Labels[metricname.Layer], s.Labels[metricname.Op]}
	switch s.Name {
	case nbdConnections:
		m.conns = int64(s.Value)
	case metricname.BlockOps:
		m.ops[key] = int64(s.Value)
	case metricname.BlockBytes:
		m.bytes[key] = int64(s.Value)
	}
}

// nbdConnections is the gauge of the NBD connections usher stream serves
// (registered by cmd/usher's stream).
const nbdConnections = "usher_nbd_connections"

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
				return fmt.Errorf("%s still serves %d connections a minute after its VMs left", p.Name, m.conns)
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
