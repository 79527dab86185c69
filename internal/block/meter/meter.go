package meter

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/metricname"
)

// Counters count the I/O at one layer. The zero value is ready; all
// fields are safe for concurrent use.
type Counters struct {
	Reads, ReadBytes   atomic.Int64
	Writes, WriteBytes atomic.Int64
	Flushes            atomic.Int64
	Trims, TrimBytes   atomic.Int64
	Zeros, ZeroBytes   atomic.Int64
	Errors             atomic.Int64
}

// Snapshot is a copy of Counters at one moment.
type Snapshot struct {
	Reads, ReadBytes, Writes, WriteBytes, Flushes, Trims, TrimBytes, Zeros, ZeroBytes, Errors int64
}

// Snapshot copies the counters.
func (c *Counters) Snapshot() Snapshot {
	return Snapshot{
		Reads: c.Reads.Load(), ReadBytes: c.ReadBytes.Load(),
		Writes: c.Writes.Load(), WriteBytes: c.WriteBytes.Load(),
		Flushes: c.Flushes.Load(), Trims: c.Trims.Load(), TrimBytes: c.TrimBytes.Load(),
		Zeros: c.Zeros.Load(), ZeroBytes: c.ZeroBytes.Load(), Errors: c.Errors.Load(),
	}
}

// Device counts the I/O to the device it wraps.
type Device struct {
	block.Device
	c *Counters
}

var (
	_ block.Device       = (*Device)(nil)
	_ block.Extenter     = (*Device)(nil)
	_ block.MemReader    = (*Device)(nil)
	_ block.InlineWriter = (*Device)(nil)
	_ block.SliceReader  = (*Device)(nil)
)

// Wrap returns d counted into c. Closing the result closes d.
func Wrap(d block.Device, c *Counters) *Device { return &Device{Device: d, c: c} }

func (d *Device) count(err error) error {
	if err != nil {
		d.c.Errors.Add(1)
	}
	return err
}

// ReadAt implements block.Device.
func (d *Device) ReadAt(ctx context.Context, p []byte, off int64) error {
	d.c.Reads.Add(1)
	d.c.ReadBytes.Add(int64(len(p)))
	return d.count(d.Device.ReadAt(ctx, p, off))
}

// WriteAt implements block.Device.
func (d *Device) WriteAt(ctx context.Context, p []byte, off int64, f block.Flags) error {
	d.c.Writes.Add(1)
	d.c.WriteBytes.Add(int64(len(p)))
	return d.count(d.Device.WriteAt(ctx, p, off, f))
}

// TryReadAt implements block.MemReader, counting a read when the
// device under it serves one from memory.
func (d *Device) TryReadAt(p []byte, off int64) bool {
	if !block.TryReadAt(d.Device, p, off) {
		return false
	}
	d.c.Reads.Add(1)
	d.c.ReadBytes.Add(int64(len(p)))
	return true
}

// TrySlices implements block.SliceReader, counting a read when the
// device under it serves one from memory.
func (d *Device) TrySlices(off, n int64, dst [][]byte) ([][]byte, bool) {
	dst, ok := block.TrySlices(d.Device, off, n, dst)
	if ok {
		d.c.Reads.Add(1)
		d.c.ReadBytes.Add(n)
	}
	return dst, ok
}

// TryWriteAt implements block.InlineWriter, counting a write when the
// device under it takes one inline.
func (d *Device) TryWriteAt(p []byte, off int64) bool {
	if !block.TryWriteAt(d.Device, p, off) {
		return false
	}
	d.c.Writes.Add(1)
	d.c.WriteBytes.Add(int64(len(p)))
	return true
}

// Zero implements block.Device.
func (d *Device) Zero(ctx context.Context, off, n int64, f block.Flags) error {
	d.c.Zeros.Add(1)
	d.c.ZeroBytes.Add(n)
	return d.count(d.Device.Zero(ctx, off, n, f))
}

// Trim implements block.Device.
func (d *Device) Trim(ctx context.Context, off, n int64, f block.Flags) error {
	d.c.Trims.Add(1)
	d.c.TrimBytes.Add(n)
	return d.count(d.Device.Trim(ctx, off, n, f))
}

// Flush implements block.Device.
func (d *Device) Flush(ctx context.Context) error {
	d.c.Flushes.Add(1)
	return d.count(d.Device.Flush(ctx))
}

// Extents implements block.Extenter.
func (d *Device) Extents(ctx context.Context, off, n int64, dst []block.Extent) ([]block.Extent, error) {
	return block.Extents(ctx, d.Device, off, n, dst)
}

// Registry names the Counters of each layer ("image", "ramcache",
// "writecache_ram", "overflow", ...) and collects them for Prometheus
// as usher_block_ops_total{layer,op} and usher_block_bytes_total{layer,op}.
type Registry struct {
	mu     sync.Mutex
	layers map[string]*Counters
}

// Layer returns the counters of the layer name, creating them.
func (r *Registry) Layer(name string) *Counters {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.layers == nil {
		r.layers = make(map[string]*Counters)
	}
	c := r.layers[name]
	if c == nil {
		c = new(Counters)
		r.layers[name] = c
	}
	return c
}

// Snapshot copies every layer's counters.
func (r *Registry) Snapshot() map[string]Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]Snapshot, len(r.layers))
	for name, c := range r.layers {
		out[name] = c.Snapshot()
	}
	return out
}

var (
	opsDesc   = prometheus.NewDesc(metricname.BlockOps, "Block operations by layer and operation.", []string{metricname.Layer, metricname.Op}, nil)
	bytesDesc = prometheus.NewDesc(metricname.BlockBytes, "Block bytes by layer and operation.", []string{metricname.Layer, metricname.Op}, nil)
)

// Describe implements prometheus.Collector.
func (r *Registry) Describe(ch chan<- *prometheus.Desc) {
	ch <- opsDesc
	ch <- bytesDesc
}

// Collect implements prometheus.Collector.
func (r *Registry) Collect(ch chan<- prometheus.Metric) {
	for layer, s := range r.Snapshot() {
		for _, m := range []struct {
			op         string
			ops, bytes int64
		}{{"read", s.Reads, s.ReadBytes}, {"write", s.Writes, s.WriteBytes}, {"trim", s.Trims, s.TrimBytes},
			{"zero", s.Zeros, s.ZeroBytes}, {"flush", s.Flushes, 0}, {"error", s.Errors, 0}} {
			ch <- prometheus.MustNewConstMetric(opsDesc, prometheus.CounterValue, float64(m.ops), layer, m.op)
			if m.op != "flush" && m.op != "error" {
				ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.CounterValue, float64(m.bytes), layer, m.op)
			}
		}
	}
}
