package site

import (
	"context"
	"slices"
	"time"
)

// HeartbeatRecorder records VDAs' heartbeats, many at once, in one round
// trip to the site DB, holding the statuses it writes only while the
// database writes them: heartbeats are the most frequent thing a broker
// writes, and a broker across a WAN from its site DB would otherwise keep
// a connection and a machine's status for two round trips each. A store on
// a local database may implement it with RecordHeartbeatsTx in an Update;
// the storetest suite holds every implementation to RecordHeartbeatsTx's
// behaviour.
type HeartbeatRecorder interface {
	// RecordHeartbeats records heartbeats (Heartbeats.Validate) and
	// returns the verdict of each, in order. A heartbeat that is refused
	// (an unknown machine, a VDA that does not hold the registration)
	// leaves the others be. Errors: as Update's, and EInvalid for a
	// malformed batch.
	RecordHeartbeats(ctx context.Context, hbs []Heartbeat) ([]HeartbeatVerdict, error)
}

// Heartbeat is a VDA's report that its machine is alive, with its usage.
type Heartbeat struct {
	Machine string
	// Credential must be the one the machine is registered with.
	Credential string
	At         time.Time
	// Usage is the machine's: its CPU and memory fields are recorded;
	// its session counts are the site DB's, not the VDA's.
	Usage Usage
	// LoadIndex is the machine's load index with this usage, as the
	// broker computes it.
	LoadIndex int
}

// HeartbeatVerdict is what RecordHeartbeats did with one heartbeat.
type HeartbeatVerdict string

const (
	HeartbeatRecorded      HeartbeatVerdict = "recorded"
	HeartbeatNoMachine     HeartbeatVerdict = "no-machine"
	HeartbeatNotRegistered HeartbeatVerdict = "not-registered"
)

// Heartbeats is a batch of heartbeats.
type Heartbeats []Heartbeat

// Validate checks that every heartbeat names a machine, none twice.
func (hs Heartbeats) Validate() error {
	seen := make(map[string]bool, len(hs))
	for _, h := range hs {
		switch {
		case h.Machine == "":
			return Errorf(EInvalid, "a heartbeat names its machine")
		case seen[h.Machine]:
			return Errorf(EInvalid, "machine %q heartbeats twice in one batch", h.Machine)
		}
		seen[h.Machine] = true
	}
	return nil
}

// RecordHeartbeatsTx is RecordHeartbeats in a transaction: it locks the
// machines' statuses in name order (MachineSessions) and writes each
// registered one's heartbeat.
func RecordHeartbeatsTx(ctx context.Context, tx Tx, hbs []Heartbeat) ([]HeartbeatVerdict, error) {
	if err := Heartbeats(hbs).Validate(); err != nil {
		return nil, err
	}
	machines := make([]string, len(hbs))
	for i, h := range hbs {
		machines[i] = h.Machine
	}
	slices.Sort(machines)
	sts, _, err := tx.MachineSessions(ctx, machines, nil)
	if err != nil {
		return nil, err
	}
	out := make([]HeartbeatVerdict, len(hbs))
	for i, h := range hbs {
		st, ok := sts[h.Machine]
		switch {
		case !ok:
			out[i] = HeartbeatNoMachine
		case st.Registration != Registered || st.Credential != h.Credential:
			out[i] = HeartbeatNotRegistered
		default:
			out[i] = HeartbeatRecorded
			st.LastHeartbeat, st.LoadIndex = h.At, h.LoadIndex
			st.CPUPercent, st.MemoryPercent = h.Usage.CPUPercent, h.Usage.MemoryPercent
			st.MemoryUsedMB, st.MemoryTotalMB = h.Usage.MemoryUsedMB, h.Usage.MemoryTotalMB
			if err := tx.SetMachineStatus(ctx, h.Machine, st); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}
