// Package wan is the benches' latency injector: toxiproxy, run in the
// process as a library, between a loopback port and a server, adding
// half of a round-trip time to each direction, and able to cut the link
// (close everything) or blackhole it (hold everything), as a WAN does.
//
// toxiproxy's root package, whose Proxy this wraps, brings its API
// server's gorilla/mux and zerolog, and its toxics zerolog too, into
// whatever imports this package: only commands, internal/bench and tests
// import it, and no other package imports toxiproxy.
package wan

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Version is the toxiproxy module the WAN runs (go.mod pins it).
const Version = "v2.12.0"

// WAN is toxiproxy, run in this process as a library, between a loopback
// port and a server: a latency toxic of half the round-trip time on each
// direction.
type WAN struct {
	proxy *toxiproxy.Proxy
	rtt   time.Duration
}

// Names of WAN's toxics.
const (
	wanUp   = "wan_upstream"
	wanDown = "wan_downstream"
)

// Start starts a proxy to upstream (host:port) with no latency, on a
// port of its own on 127.0.0.1.
func Start(upstream string) (*WAN, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "usher-bench-site-db", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("toxiproxy: %w", err)
	}
	return &WAN{proxy: p}, nil
}

// Addr is where the proxy listens, host:port.
func (w *WAN) Addr() string { return w.proxy.Listen }

// RTT is the round-trip time the toxics add.
func (w *WAN) RTT() time.Duration { return w.rtt }

// SetRTT makes the toxics add rtt (whole milliseconds, as toxiproxy's
// latency toxic counts them) to every round trip: the upstream toxic
// holds each chunk for half of it, rounded up, the downstream one for the
// rest. Connections stay open; data in flight is let through at once.
//
// toxiproxy's UpdateToxicJson decodes the new latency into the toxic that
// the connections' pipes are reading, without a lock: the toxics are
// removed and added again instead.
func (w *WAN) SetRTT(rtt time.Duration) error {
	if rtt < 0 || rtt%time.Millisecond != 0 {
		return fmt.Errorf("RTT %s is not a whole number of milliseconds", rtt)
	}
	if rtt == w.rtt {
		return nil
	}
	ctx := context.Background()
	for _, name := range []string{wanUp, wanDown} {
		if err := w.proxy.Toxics.RemoveToxic(ctx, name); err != nil && !errors.Is(err, toxiproxy.ErrToxicNotFound) {
			return fmt.Errorf("toxiproxy: remove %s: %w", name, err)
		}
	}
	w.rtt = 0
	if rtt == 0 {
		return nil
	}
	ms := rtt.Milliseconds()
	for _, t := range []struct {
		name, stream string
		ms           int64
	}{{wanUp, "upstream", ms - ms/2}, {wanDown, "downstream", ms / 2}} {
		b, err := json.Marshal(map[string]any{"name": t.name, "type": "latency", "stream": t.stream, "toxicity": 1,
			"attributes": map[string]any{"latency": t.ms}})
		if err != nil {
			return err
		}
		if _, err := w.proxy.Toxics.AddToxicJson(bytes.NewReader(b)); err != nil {
			return fmt.Errorf("toxiproxy: add %s: %w", t.name, err)
		}
	}
	w.rtt = rtt
	return nil
}

// Close stops the proxy and closes its connections.
func (w *WAN) Close() { w.proxy.Stop() }

// Cut closes the proxy's listener and every connection through it, as a
// site DB cut off from the network; Restore opens it again on the same
// address.
func (w *WAN) Cut() { w.proxy.Stop() }

// Restore ends a Cut.
func (w *WAN) Restore() error { return w.proxy.Start() }

// Blackhole makes the site DB stop answering without closing anything:
// data through the proxy, and new connections' data, is held, as by a
// network that drops every packet. Unhole ends it.
func (w *WAN) Blackhole() error {
	for _, stream := range []string{"upstream", "downstream"} {
		b, err := json.Marshal(map[string]any{"name": "blackhole-" + stream, "type": "timeout", "stream": stream, "toxicity": 1,
			"attributes": map[string]any{"timeout": 0}})
		if err != nil {
			return err
		}
		if _, err := w.proxy.Toxics.AddToxicJson(bytes.NewReader(b)); err != nil {
			return fmt.Errorf("toxiproxy: add blackhole: %w", err)
		}
	}
	return nil
}

// Unhole ends a Blackhole. The connections it held are closed (the
// proxy restarts): their data is gone, as after a network outage.
func (w *WAN) Unhole() error {
	w.proxy.Stop()
	for _, stream := range []string{"upstream", "downstream"} {
		if err := w.proxy.Toxics.RemoveToxic(context.Background(), "blackhole-"+stream); err != nil && !errors.Is(err, toxiproxy.ErrToxicNotFound) {
			return fmt.Errorf("toxiproxy: remove blackhole: %w", err)
		}
	}
	return w.proxy.Start()
}
