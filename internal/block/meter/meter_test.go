package meter_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/blocktest"
	"github.com/usher-vdi/usher/internal/block/meter"
)

func TestMeter(t *testing.T) {
	var reg meter.Registry
	blocktest.Run(t, func(t *testing.T) block.Device {
		return meter.Wrap(block.NewMemory(blocktest.Size), reg.Layer("conformance"))
	})
	c := reg.Layer("disk")
	d := meter.Wrap(block.NewMemory(1<<20), c)
	ctx := context.Background()
	d.WriteAt(ctx, make([]byte, 4096), 0, 0)
	d.ReadAt(ctx, make([]byte, 8192), 0)
	d.ReadAt(ctx, make([]byte, 1), 1<<20) // out of range
	s := c.Snapshot()
	if s.Writes != 1 || s.WriteBytes != 4096 || s.Reads != 2 || s.ReadBytes != 8193 || s.Errors != 1 {
		t.Fatalf("counters %+v", s)
	}
	pr := prometheus.NewPedanticRegistry()
	pr.MustRegister(&reg)
	mfs, err := pr.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetValue())
			}
			if mf.GetName() == "usher_block_bytes_total" && strings.Join(labels, ",") == "disk,read" {
				found = m.GetCounter().GetValue() == 8193
			}
		}
	}
	if !found {
		t.Fatal("usher_block_bytes_total{layer=disk,op=read} is not 8193")
	}
}
