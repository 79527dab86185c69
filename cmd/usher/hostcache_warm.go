package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/usher-vdi/usher/internal/block/nbd"
	"github.com/usher-vdi/usher/internal/bytesize"
	"github.com/usher-vdi/usher/internal/hostcacherole"
)

// hostcacheWarm reads an image through a running host cache, so that the
// blocks a boot needs are there before the first VM boots.
func (m *Main) hostcacheWarm(ctx context.Context, args []string) error {
	fs := m.flagSet("hostcache warm", "IMAGE [--trace FILE] [--connect ADDR] [--rate BYTES]\n\n"+
		"Reads IMAGE (as a --vm of the daemon names it) through the running host cache at\n"+
		"--connect, one request at a time and at most --rate bytes a second, so that VMs\n"+
		"booting meanwhile keep the upstream and the disk first: the whole image, or only\n"+
		"the ranges of --trace, a file of \"OFFSET LENGTH\" lines in bytes (a recorded\n"+
		"boot: every read a VM made, in any order; '#' starts a comment).")
	connect := fs.String("connect", "unix:/run/usher/hostcache.sock", "the host cache's --listen: unix:/path or host:port")
	trace := fs.String("trace", "", "read only these ranges (\"OFFSET LENGTH\" lines)")
	rate := fs.String("rate", "64MiB", "bytes read per second at most (0: no bound)")
	chunk := fs.String("chunk", "1MiB", "bytes per request")
	if err := parse(fs, args, 1); err != nil {
		return err
	}
	img := fs.Arg(0)
	perSec, err := bytesize.Parse(*rate)
	if err != nil || perSec < 0 {
		return usageError{fmt.Sprintf("--rate %q is not a size", *rate)}
	}
	step, err := bytesize.Parse(*chunk)
	if err != nil || step <= 0 || step > 32<<20 {
		return usageError{fmt.Sprintf("--chunk %q is not a size of at most 32MiB", *chunk)}
	}
	network, addr := "tcp", *connect
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, addr = "unix", p
	}
	c, err := nbd.Dial(ctx, network, addr, hostcacherole.WarmPrefix+img)
	if err != nil {
		return fmt.Errorf("host cache at %s: %w", *connect, err)
	}
	defer c.Close()
	var ranges [][2]int64
	if *trace != "" {
		if ranges, err = readTrace(*trace, c.Size(), step); err != nil {
			return err
		}
	} else {
		for off := int64(0); off < c.Size(); off += step {
			ranges = append(ranges, [2]int64{off, min(step, c.Size()-off)})
		}
	}
	var total int64
	for _, r := range ranges {
		total += r[1]
	}
	fmt.Fprintf(m.Stderr, "warming %s (%s): %s in %d reads\n", img, c.Description(), humanize.IBytes(uint64(total)), len(ranges))
	buf := make([]byte, step)
	start, last := time.Now(), time.Now()
	var done int64
	for _, r := range ranges {
		if err := c.ReadAt(ctx, buf[:r[1]], r[0]); err != nil {
			return fmt.Errorf("warm %s at %d: %w", img, r[0], err)
		}
		done += r[1]
		if perSec > 0 {
			// Pace to the rate: sleep until done bytes are due.
			due := start.Add(time.Duration(float64(done) / float64(perSec) * float64(time.Second)))
			select {
			case <-time.After(time.Until(due)):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if time.Since(last) >= 2*time.Second {
			last = time.Now()
			fmt.Fprintf(m.Stderr, "  %s of %s (%.0f%%)\n", humanize.IBytes(uint64(done)), humanize.IBytes(uint64(total)), 100*float64(done)/float64(total))
		}
	}
	el := time.Since(start)
	fmt.Fprintf(m.Stdout, "warmed %s: %s in %v (%s/s)\n", img, humanize.IBytes(uint64(done)), el.Round(time.Millisecond),
		humanize.IBytes(uint64(float64(done)/max(el.Seconds(), 1e-3))))
	return nil
}

// readTrace reads "OFFSET LENGTH" lines and returns the ranges they
// cover, merged and sorted, cut to at most step bytes each.
func readTrace(path string, size, step int64) ([][2]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--trace: %w", err)
	}
	defer f.Close()
	rs, err := parseTrace(f, size)
	if err != nil {
		return nil, fmt.Errorf("--trace %s: %w", path, err)
	}
	var out [][2]int64
	for _, r := range rs {
		for off := r[0]; off < r[0]+r[1]; off += step {
			out = append(out, [2]int64{off, min(step, r[0]+r[1]-off)})
		}
	}
	return out, nil
}

// parseTrace parses a trace into sorted, merged ranges within size.
func parseTrace(r io.Reader, size int64) ([][2]int64, error) {
	var rs [][2]int64
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want \"OFFSET LENGTH\"", n)
		}
		off, err1 := strconv.ParseInt(f[0], 0, 64)
		l, err2 := strconv.ParseInt(f[1], 0, 64)
		if err1 != nil || err2 != nil || off < 0 || l <= 0 || off >= size || l > size-off {
			return nil, fmt.Errorf("line %d: %q is not a range within the image's %d bytes", n, sc.Text(), size)
		}
		rs = append(rs, [2]int64{off, l})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(rs, func(a, b [2]int64) int { return int(min(max(a[0]-b[0], -1), 1)) })
	var out [][2]int64
	for _, r := range rs {
		if k := len(out) - 1; k >= 0 && r[0] <= out[k][0]+out[k][1] {
			out[k][1] = max(out[k][1], r[0]+r[1]-out[k][0])
			continue
		}
		out = append(out, r)
	}
	return out, nil
}
