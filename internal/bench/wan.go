package bench

import (
	"github.com/usher-vdi/usher/internal/pgadmin"
	"github.com/usher-vdi/usher/internal/wan"
)

// A PostgreSQL site DB across a simulated WAN: a schema of its own for
// the run, the latency injector (internal/wan) adding latency, and what
// the bench reads from the server about the site's connections.

// toxiproxyVersion is the toxiproxy module the WAN runs, for the reports.
const toxiproxyVersion = wan.Version

// WAN is a latency injector (wan.WAN) in front of a server, and the relay
// to it when the server listens on a unix socket.
type WAN struct {
	*wan.WAN
	relay *DBTap // to a server on a unix socket, when StartDBWAN made one
}

// StartWAN starts a WAN to upstream (host:port) with no latency.
func StartWAN(upstream string) (*WAN, error) {
	w, err := wan.Start(upstream)
	if err != nil {
		return nil, err
	}
	return &WAN{WAN: w}, nil
}

// StartDBWAN starts a WAN in front of the PostgreSQL server that dsn
// names; toxiproxy dials TCP, so a server on a unix socket is reached
// through a relay, which Close closes too.
func StartDBWAN(dsn string) (*WAN, error) {
	network, addr, err := pgadmin.Server(dsn)
	if err != nil {
		return nil, err
	}
	var relay *DBTap
	if network != "tcp" {
		if relay, err = StartDBTap(network, addr, 0); err != nil {
			return nil, err
		}
		addr = relay.Addr()
	}
	w, err := StartWAN(addr)
	if err != nil {
		if relay != nil {
			relay.Close()
		}
		return nil, err
	}
	w.relay = relay
	return w, nil
}

// Via returns dsn reaching its server through the WAN, without TLS unless
// dsn sets sslmode (the benches read and cut what goes through).
func (w *WAN) Via(dsn string) (string, error) {
	via, err := pgadmin.Via(dsn, w.Addr())
	if err == nil && !pgadmin.Sets(via, "sslmode") {
		via, err = pgadmin.With(via, "sslmode", "disable")
	}
	return via, err
}

// Close stops the proxy and closes its connections, and the relay.
func (w *WAN) Close() {
	w.WAN.Close()
	if w.relay != nil {
		w.relay.Close()
	}
}
