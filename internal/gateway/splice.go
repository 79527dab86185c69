package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/usher-vdi/usher/internal/vdaproto"
)

// copyBuffer is each direction's buffer: a message that fits is forwarded
// as one frame, a larger one streamed in frames of this size.
const copyBuffer = 32 << 10

// closeGrace bounds the wait, after a write to one side failed, for that
// side's reader to tell how it ended (a close frame it received, whose
// code and reason go to the other side).
const closeGrace = time.Second

// end is how one side of a display ended: err from reading it (or, with
// write set, from writing to it, or pinging it).
type end struct {
	side  side
	err   error
	write bool
}

// direction is one way of a display: its pump's state, which the pinger
// of its source reads.
type direction struct {
	name     string
	from, to *websocket.Conn
	fromSide side
	toSide   side
	// forwarding is set while the pump waits on its destination: then its
	// source is not read, and the source's pongs wait with it.
	forwarding atomic.Bool
	bytes      atomic.Int64
}

// splice forwards messages between browser and agent until one side
// ends, then tells the other how, and returns once every goroutine of
// the display has.
func (g *Gateway) splice(log *slog.Logger, browser, agent *websocket.Conn) {
	start := time.Now()
	g.metrics.open.Inc()
	defer g.metrics.open.Dec()
	// The display's own context, not the gateway's: a Close must reach
	// both sides as close frames, not as connections cut under the
	// pumps (a cancelled read closes its connection).
	ctx, cancel := context.WithCancel(context.Background())
	up := &direction{name: toAgent, from: browser, to: agent, fromSide: sideBrowser, toSide: sideAgent}
	down := &direction{name: toBrowser, from: agent, to: browser, fromSide: sideAgent, toSide: sideBrowser}
	ends := make(chan end, 4) // one per goroutine: none blocks
	var wg sync.WaitGroup
	for _, d := range []*direction{up, down} {
		wg.Go(func() { ends <- g.pump(ctx, d) })
		wg.Go(func() {
			if e, ok := g.pinger(ctx, d.from, d.fromSide, d); ok {
				ends <- e
			}
		})
	}
	var outcome string
	var code websocket.StatusCode
	select {
	case e := <-ends:
		if e.write {
			e = settle(e, ends)
		}
		outcome, code = g.finish(e, browser, agent)
		if outcome == outcomeLost {
			log.Info("display lost", "side", e.side, "err", e.err)
		}
	case <-g.ctx.Done():
		outcome, code = outcomeShutdown, websocket.StatusGoingAway
		var closing sync.WaitGroup
		closing.Go(func() {
			browser.Close(websocket.StatusGoingAway, "the gateway is shutting down: open the session again")
		})
		closing.Go(func() { agent.Close(websocket.StatusGoingAway, "the gateway is shutting down") })
		closing.Wait()
	}
	cancel()
	browser.CloseNow()
	agent.CloseNow()
	wg.Wait()
	g.metrics.sessions.WithLabelValues(outcome).Inc()
	log.Info("display ended", "outcome", outcome, "code", int(code), "took", time.Since(start).Round(time.Millisecond),
		"bytes_to_agent", up.bytes.Load(), "bytes_to_browser", down.bytes.Load())
}

// settle waits a moment, after a write to a side failed, for that side's
// reader: a close frame it received explains the failure.
func settle(e end, ends <-chan end) end {
	t := time.NewTimer(closeGrace)
	defer t.Stop()
	for {
		select {
		case next := <-ends:
			if next.side == e.side && !next.write {
				if _, ok := closeOf(next.err); ok {
					return next
				}
			}
		case <-t.C:
			return e
		}
	}
}

// finish tells the side that did not end how the other did, and returns
// the display's outcome and the close code sent.
func (g *Gateway) finish(e end, browser, agent *websocket.Conn) (string, websocket.StatusCode) {
	other := browser
	if e.side == sideBrowser {
		other = agent
	}
	if ce, ok := closeOf(e.err); ok && !e.write {
		other.Close(ce.Code, ce.Reason)
		return outcomeClosed, ce.Code
	}
	if e.side == sideAgent {
		other.Close(vdaproto.CloseAgentUnreachable, "lost the connection to the session's machine: open the session again")
		return outcomeLost, vdaproto.CloseAgentUnreachable
	}
	other.Close(websocket.StatusGoingAway, "the browser went away")
	return outcomeLost, websocket.StatusGoingAway
}

// closeOf returns the close frame err reports, if any.
func closeOf(err error) (websocket.CloseError, bool) {
	var ce websocket.CloseError
	return ce, errors.As(err, &ce)
}

// pump forwards d's messages, each as it came (type and bytes), until a
// side fails.
func (g *Gateway) pump(ctx context.Context, d *direction) end {
	buf := make([]byte, copyBuffer)
	counter := g.metrics.bytes[d.name]
	count := func(n int) {
		d.bytes.Add(int64(n))
		counter.Add(float64(n))
	}
	for {
		typ, r, err := d.from.Reader(ctx)
		if err != nil {
			return end{side: d.fromSide, err: err}
		}
		n, err := io.ReadFull(r, buf)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			// The whole message: one frame, as it came.
			d.forwarding.Store(true)
			err = d.to.Write(ctx, typ, buf[:n])
			d.forwarding.Store(false)
			if err != nil {
				return end{side: d.toSide, err: err, write: true}
			}
			count(n)
			continue
		}
		if err != nil {
			return end{side: d.fromSide, err: err}
		}
		if e, ok := g.stream(ctx, d, typ, r, buf, count); !ok {
			return e
		}
	}
}

// stream forwards a message larger than buf, whose first len(buf) bytes
// buf holds, in frames.
func (g *Gateway) stream(ctx context.Context, d *direction, typ websocket.MessageType, r io.Reader, buf []byte, count func(int)) (end, bool) {
	d.forwarding.Store(true)
	w, err := d.to.Writer(ctx, typ)
	if err == nil {
		_, err = w.Write(buf)
	}
	d.forwarding.Store(false)
	if err != nil {
		return end{side: d.toSide, err: err, write: true}, false
	}
	count(len(buf))
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			d.forwarding.Store(true)
			_, err := w.Write(buf[:n])
			d.forwarding.Store(false)
			if err != nil {
				return end{side: d.toSide, err: err, write: true}, false
			}
			count(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return end{side: d.fromSide, err: rerr}, false
		}
	}
	d.forwarding.Store(true)
	err = w.Close()
	d.forwarding.Store(false)
	if err != nil {
		return end{side: d.toSide, err: err, write: true}, false
	}
	return end{}, true
}

// pinger pings c every PingInterval and records the round trips. A ping
// unanswered within PingTimeout while c is being read ends the display;
// one that waited behind d's forwarding (c not read meanwhile, so its
// pong not either) is not counted against c.
func (g *Gateway) pinger(ctx context.Context, c *websocket.Conn, s side, d *direction) (end, bool) {
	t := time.NewTicker(g.cfg.PingInterval)
	defer t.Stop()
	rtt := g.metrics.rtt[s]
	for {
		select {
		case <-ctx.Done():
			return end{}, false
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, g.cfg.PingTimeout)
		start := time.Now()
		err := c.Ping(pctx)
		cancel()
		switch {
		case err == nil:
			rtt.Observe(time.Since(start).Seconds())
		case ctx.Err() != nil:
			return end{}, false
		case d.forwarding.Load():
		default:
			return end{side: s, err: fmt.Errorf("no pong within %s: %w", g.cfg.PingTimeout, err), write: true}, true
		}
	}
}
