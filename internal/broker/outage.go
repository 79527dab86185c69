package broker

import (
	"context"

	"github.com/usher-vdi/usher/internal/site"
)

// OwnStatuses returns the statuses of the machines whose VDAs registered
// or heartbeat with this broker within the heartbeat timeout, as the
// broker knows them, its placements in flight counted: what a broker that
// loses its site DB brokers on from its local copy (the Local Host
// Cache). Machines registered with other brokers are left out: their
// VDAs come to this broker if it is to broker for them, reporting their
// sessions as they register.
func (b *Broker) OwnStatuses() map[string]site.MachineStatus {
	since := b.cfg.Now().Add(-b.cfg.HeartbeatTimeout)
	b.machines.mu.Lock()
	defer b.machines.mu.Unlock()
	out := map[string]site.MachineStatus{}
	for name, ms := range b.machines.machines {
		if !ms.registered || ms.here.Before(since) {
			continue
		}
		out[name] = site.MachineStatus{Registration: site.Registered, LastHeartbeat: ms.lastHeartbeat, LoadIndex: ms.load.Index,
			Usage: ms.effective(), RegisteredAddress: ms.address, Protocol: ms.protocol, ControlURL: ms.control.URL,
			ControlToken: ms.control.Token, ControlPin: ms.control.Pin, Credential: ms.credential}
	}
	return out
}

// Reregister asks the VDA of every registered machine to register again,
// reporting the sessions it holds, at its next heartbeat (which the
// broker answers with ErrNotRegistered once). The machines stay eligible
// meanwhile. A broker calls it when it starts and stops brokering from
// its local copy, so that its records of sessions agree with the VDAs'.
func (b *Broker) Reregister() {
	b.machines.mu.Lock()
	defer b.machines.mu.Unlock()
	for _, ms := range b.machines.machines {
		if ms.registered {
			ms.reregister = true
		}
	}
}

// Reregistering counts the machines whose VDAs Reregister asked to
// register again, that heartbeat with this broker (within a heartbeat
// timeout), and have not registered yet: 0 once the sessions they hold
// have been reported.
func (b *Broker) Reregistering() int {
	since := b.cfg.Now().Add(-b.cfg.HeartbeatTimeout)
	b.machines.mu.Lock()
	defer b.machines.mu.Unlock()
	n := 0
	for _, ms := range b.machines.machines {
		if ms.registered && ms.reregister && !ms.here.Before(since) {
			n++
		}
	}
	return n
}

// SyncStatuses reads every machine's status from the store into the
// broker's table at once: what a broker does when its store starts
// serving from another database (the Local Host Cache's copy), so that
// its next placements do not offer machines the copy holds unregistered.
func (b *Broker) SyncStatuses(ctx context.Context) error { return b.loadStatuses(ctx) }

// RegisteredMachines returns the machines the broker holds registered and
// heartbeating, with whichever broker of the site: the machines a broker
// that takes over its zone's brokering expects to come to it.
func (b *Broker) RegisteredMachines() []string {
	since := b.cfg.Now().Add(-b.cfg.HeartbeatTimeout)
	b.machines.mu.Lock()
	defer b.machines.mu.Unlock()
	var out []string
	for name, ms := range b.machines.machines {
		if ms.registered && !ms.lastHeartbeat.Before(since) && (!b.cfg.OwnZoneVDAs || ms.zone == b.cfg.Zone) {
			out = append(out, name)
		}
	}
	return out
}
