package nbd

import (
	"encoding/binary"
	"log/slog"
	"net"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/block"
)

// TestSlowReaderIsBoundedAndDropped replays the memory attack: clients
// that each queue 40 reads of 32 MiB (28 bytes apiece) and never read
// a reply. The server must stop reading their requests once their
// bytes in flight reach the per-connection bound, hold no more than the
// server-wide bound across them, and drop them once a reply write has
// waited for the write timeout.
func TestSlowReaderIsBoundedAndDropped(t *testing.T) {
	const (
		perConn = 64 << 20
		total   = 96 << 20
		clients = 3
		reads   = 40
		readLen = 32 << 20
	)
	f, err := block.CreateFile(filepath.Join(t.TempDir(), "disk"), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Exports: Devices{"disk": f}, Logger: slog.New(slog.DiscardHandler),
		MaxInFlight: perConn, MaxTotalInFlight: total, WriteTimeout: 300 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	defer func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	// HeapAlloc counts garbage until a collection sweeps it, and the
	// default pacer lets the heap reach twice what was live: buffers
	// freed by dropped clients would then count against the bound. A
	// tighter pacer keeps the figure close to what the server holds.
	defer debug.SetGCPercent(debug.SetGCPercent(20))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heapBefore := ms.HeapAlloc

	for range clients {
		r := rawDial(t, ln.Addr().String())
		r.nc.SetDeadline(time.Time{})
		r.option(optGo, goData("disk"))
		for {
			typ, _ := r.reply(optGo)
			if typ == repAck {
				break
			}
			if typ != repInfo {
				t.Fatalf("NBD_OPT_GO reply %#x", typ)
			}
		}
		if tc, ok := r.nc.(*net.TCPConn); ok {
			tc.SetReadBuffer(4 << 10) // replies pile up in the server
		}
		var reqs []byte
		for i := range reads {
			var h [requestSize]byte
			binary.BigEndian.PutUint32(h[:], magicRequest)
			binary.BigEndian.PutUint16(h[6:], cmdRead)
			binary.BigEndian.PutUint64(h[8:], uint64(i))
			binary.BigEndian.PutUint32(h[24:], readLen)
			reqs = append(reqs, h[:]...)
		}
		r.write(reqs) // and never read a reply
	}

	// The server fills its budget, never past it, then drops every
	// client that does not read.
	var peakInFlight int64
	var peakHeap uint64
	deadline := time.Now().Add(30 * time.Second)
	for sawFull := false; ; {
		n := s.InFlight()
		peakInFlight = max(peakInFlight, n)
		runtime.ReadMemStats(&ms)
		peakHeap = max(peakHeap, ms.HeapAlloc)
		sawFull = sawFull || n >= 2*readLen
		if sawFull && s.Conns() == 0 && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %d connections, %d bytes in flight (peak %d)", s.Conns(), n, peakInFlight)
		}
		time.Sleep(5 * time.Millisecond) // polling, not waiting for an event
	}
	if peakInFlight > total {
		t.Errorf("peak bytes in flight %d, bound %d", peakInFlight, total)
	}
	// Without bounds the three clients made the server allocate about
	// 1.5 GiB. Allow the budget, and as much again for buffers freed
	// while a collection was under way (32 MiB apiece).
	grew := int64(peakHeap) - int64(heapBefore)
	t.Logf("peak in flight %d MiB, heap grew by %d MiB", peakInFlight>>20, grew>>20)
	if grew > 2*total {
		t.Errorf("heap grew by %d MiB during the attack, bound %d MiB in flight", grew>>20, total>>20)
	}
}
