package displaybench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The scripted stream is records, each a type byte, a big-endian uint32
// payload length and the payload, read from the bytes whatever the
// message boundaries (websockify re-frames a TCP stream as it reads it).
const (
	recHello = 'H' // source → viewer: the session is open at the source
	recFrame = 'F' // source → viewer: a scripted frame
	recPing  = 'P' // viewer → source: 8 bytes, echoed as recPong
	recPong  = 'Q' // source → viewer
	recEnd   = 'E' // source → viewer: frame bytes sent (uint64) and their CRC-32C (uint32)
	hdrLen   = 5
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// pool is the frames' bytes: random, so that nothing on the way could
// compress them.
var pool = func() []byte {
	b := make([]byte, 1<<20)
	r := rand.NewChaCha8([32]byte{'u', 's', 'h', 'e', 'r'})
	r.Read(b)
	return b
}()

// round is one measured run's script: the sources wait for start, send
// frames until stop, then their end record.
type round struct {
	msgBytes int
	interval time.Duration
	start    chan struct{}
	stop     chan struct{}
	served   atomic.Int64
}

func newRound(msgBytes int, rate int64) *round {
	return &round{msgBytes: msgBytes, interval: time.Duration(float64(msgBytes) / float64(rate) * float64(time.Second)),
		start: make(chan struct{}), stop: make(chan struct{})}
}

// serve is the source of one session over c: a display's WebSocket
// (one write, one message) or websockify's TCP connection.
func (r *round) serve(ctx context.Context, c net.Conn) {
	defer c.Close()
	n := r.served.Add(1)
	var mu sync.Mutex
	write := func(b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		_, err := c.Write(b)
		return err
	}
	if write(record(nil, recHello, binary.BigEndian.AppendUint32(nil, uint32(n)))) != nil {
		return
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		br := bufio.NewReader(c)
		var payload []byte
		for {
			typ, p, err := readRecord(br, payload[:0])
			if err != nil {
				return
			}
			payload = p
			if typ == recPing && write(record(nil, recPong, p)) != nil {
				return
			}
		}
	}()
	select {
	case <-r.start:
	case <-ctx.Done():
		return
	case <-readDone:
		return
	}
	// Sessions are spread over the interval, not in step.
	phase := time.Duration(uint64(n)*2654435761) % r.interval
	select {
	case <-time.After(phase):
	case <-r.stop:
	}
	msg := make([]byte, r.msgBytes)
	payloadLen := r.msgBytes - hdrLen
	crc, sent := uint32(0), uint64(0)
	t := time.NewTicker(r.interval)
	defer t.Stop()
	// Each tick sends the frames due since the first: a late tick (a
	// loaded machine) is made up for, so the rate is held wherever the
	// way keeps up.
	began, frames := time.Now(), int64(0)
	for seq := uint64(n) * 7919; ; {
		select {
		case <-r.stop:
			end := binary.BigEndian.AppendUint64(nil, sent)
			end = binary.BigEndian.AppendUint32(end, crc)
			if write(record(nil, recEnd, end)) == nil {
				// The viewer closes once it has the end, which may be
				// behind a starved proxy's backlog: closing first, with
				// pings unread, would reset the connection and lose it.
				select {
				case <-readDone:
				case <-time.After(endWait):
				}
			}
			return
		case <-ctx.Done():
			return
		case <-readDone:
			return
		case <-t.C:
		}
		for due := int64(time.Since(began)/r.interval) + 1; frames < due; frames++ {
			off := int(seq * 8191 % uint64(len(pool)-payloadLen))
			seq++
			p := pool[off : off+payloadLen]
			msg = record(msg[:0], recFrame, p)
			if write(msg) != nil {
				return
			}
			crc = crc32.Update(crc, castagnoli, p)
			sent += uint64(payloadLen)
		}
	}
}

// endWait bounds how long a source waits for its viewer to close after
// the end record.
const endWait = 2 * time.Minute

func record(dst []byte, typ byte, payload []byte) []byte {
	dst = append(dst, typ)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}

// maxRecord bounds a record's payload.
const maxRecord = 1 << 20

func readRecord(r io.Reader, buf []byte) (byte, []byte, error) {
	var h [hdrLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, buf, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxRecord {
		return 0, buf, fmt.Errorf("record of %d bytes", n)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	_, err := io.ReadFull(r, buf)
	return h[0], buf, err
}

// viewer is one session's client: what it measured.
type viewer struct {
	frameBytes uint64 // frame payload bytes received
	crc        uint32
	verified   bool // the end record's count and CRC match what arrived
	rtts       []time.Duration
	err        error
}

// errMismatch is a stream that did not arrive as the source sent it.
var errMismatch = errors.New("the frames arrived changed")

// view reads a session's stream over c: it reports the hello on opened,
// pings every pingEvery from start until stop, and returns at the end
// record (verified) or an error.
func view(c net.Conn, opened func(), start, stop <-chan struct{}, pingEvery time.Duration, received *atomic.Int64, base time.Time) *viewer {
	v := &viewer{}
	defer c.Close()
	br := bufio.NewReaderSize(c, 64<<10)
	typ, _, err := readRecord(br, nil)
	if err != nil || typ != recHello {
		v.err = fmt.Errorf("no hello: type %q: %v", typ, err)
		return v
	}
	opened()
	pingDone := make(chan struct{})
	go func() {
		defer close(pingDone)
		select {
		case <-start:
		case <-stop:
			return
		}
		t := time.NewTicker(pingEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if _, err := c.Write(record(nil, recPing, binary.BigEndian.AppendUint64(nil, uint64(time.Since(base))))); err != nil {
				return
			}
		}
	}()
	defer func() { <-pingDone }()
	payload := make([]byte, 0, 64<<10)
	for {
		typ, p, err := readRecord(br, payload[:0])
		if err != nil {
			v.err = fmt.Errorf("read: %w", err)
			return v
		}
		payload = p
		switch typ {
		case recFrame:
			v.crc = crc32.Update(v.crc, castagnoli, p)
			v.frameBytes += uint64(len(p))
			received.Add(int64(len(p)))
		case recPong:
			if len(p) == 8 {
				select {
				case <-stop:
				default:
					v.rtts = append(v.rtts, time.Since(base)-time.Duration(binary.BigEndian.Uint64(p)))
				}
			}
		case recEnd:
			if len(p) != 12 || binary.BigEndian.Uint64(p) != v.frameBytes || binary.BigEndian.Uint32(p[8:]) != v.crc {
				v.err = errMismatch
				return v
			}
			v.verified = true
			return v
		default:
			v.err = fmt.Errorf("unexpected record %q", typ)
			return v
		}
	}
}
