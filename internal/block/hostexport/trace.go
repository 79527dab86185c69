package hostexport

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/block"
)

// maxTraceLines bounds a recorded boot: a boot of 70,000 reads fits many
// times over.
const maxTraceLines = 1 << 20

// tracer records the reads of the image a VM's boot makes, as the
// "OFFSET LENGTH" lines that `usher hostcache warm --trace` reads, until
// its time is up.
type tracer struct {
	block.Device
	until time.Time

	mu    sync.Mutex
	f     *os.File
	w     *bufio.Writer
	lines int
}

// newTracer records d's reads into path for the first d of the boot.
func newTracer(d block.Device, path string, dur time.Duration) (*tracer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("record boot: %w", err)
	}
	t := &tracer{Device: d, until: time.Now().Add(dur), f: f, w: bufio.NewWriter(f)}
	fmt.Fprintf(t.w, "# reads of a boot, recorded %s: OFFSET LENGTH\n", time.Now().UTC().Format(time.RFC3339))
	return t, nil
}

func (t *tracer) Unwrap() block.Device { return t.Device }

func (t *tracer) ReadAt(ctx context.Context, p []byte, off int64) error {
	t.mu.Lock()
	if t.w != nil {
		if t.lines < maxTraceLines && time.Now().Before(t.until) {
			fmt.Fprintf(t.w, "%d %d\n", off, len(p))
			t.lines++
		} else {
			t.finish()
		}
	}
	t.mu.Unlock()
	return t.Device.ReadAt(ctx, p, off)
}

// finish writes the trace out; the caller holds mu.
func (t *tracer) finish() error {
	if t.w == nil {
		return nil
	}
	err := t.w.Flush()
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	t.w = nil
	return err
}

// Close ends the recording; the device below belongs to the boot.
func (t *tracer) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.finish()
}
