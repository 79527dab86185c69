package broker

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// downStore refuses every transaction with EUnavailable, counting them.
type downStore struct {
	site.Store // only Update is called
	updates    atomic.Int64
}

func (s *downStore) Update(context.Context, func(site.Tx) error) error {
	s.updates.Add(1)
	return site.Errorf(site.EUnavailable, "the site DB is not answering")
}

// TestExpireMachinesWhileTheSiteDBIsDown: with the site DB unavailable, a
// sweep of 50 silent machines tries one and stops, and ten sweeps log one
// line, not one per machine and sweep (which buried a broker's log in
// thousands of lines a second during an outage).
func TestExpireMachinesWhileTheSiteDBIsDown(t *testing.T) {
	var logs bytes.Buffer
	st := &downStore{}
	now := time.Now()
	b := &Broker{store: st, machines: newTable(func() time.Time { return now }),
		cfg: Config{Now: func() time.Time { return now }, HeartbeatTimeout: time.Second},
		log: slog.New(slog.NewTextHandler(&logs, nil))}
	for i := range 50 {
		name := fmt.Sprintf("m%02d", i)
		b.machines.machines[name] = &machineState{name: name}
		b.machines.sync(name, site.MachineStatus{Registration: site.Registered, LastHeartbeat: now.Add(-time.Minute)})
	}
	for range 10 {
		b.expireMachines(context.Background())
	}
	if n := st.updates.Load(); n != 10 {
		t.Errorf("%d transactions tried in 10 sweeps, want 10 (one per sweep)", n)
	}
	if lines := strings.Count(logs.String(), "\n"); lines != 1 || !strings.Contains(logs.String(), "waiting=50") {
		t.Errorf("%d log lines, want one naming the 50 machines:\n%s", lines, logs.String())
	}
}

// statusStore keeps machine statuses in a map (only Update, MachineStatus
// and SetMachineStatus are called).
type statusStore struct {
	site.Store
	status map[string]site.MachineStatus
}

type statusTx struct {
	site.Tx
	s *statusStore
}

func (s *statusStore) Update(ctx context.Context, f func(site.Tx) error) error {
	return f(statusTx{s: s})
}

func (tx statusTx) MachineStatus(_ context.Context, name string) (site.MachineStatus, error) {
	return tx.s.status[name], nil
}

func (tx statusTx) SetMachineStatus(_ context.Context, name string, st site.MachineStatus) error {
	tx.s.status[name] = st
	return nil
}

// TestExpireMachinesOfAnEarlierRun: a restarted broker finds the machines
// that the site DB says are registered, last heard of before it started;
// its first sweep unregisters them all in one log line (a restarted demo
// logged 57 warnings), and a machine that heartbeated to this broker and
// went silent is still warned of by name.
func TestExpireMachinesOfAnEarlierRun(t *testing.T) {
	var logs bytes.Buffer
	now := time.Now()
	clock := func() time.Time { return now }
	st := &statusStore{status: map[string]site.MachineStatus{}}
	b := &Broker{store: st, machines: newTable(clock), started: now,
		cfg: Config{Now: clock, HeartbeatTimeout: 10 * time.Second},
		log: slog.New(slog.NewTextHandler(&logs, nil))}
	add := func(name string, last time.Time) {
		s := site.MachineStatus{Registration: site.Registered, LastHeartbeat: last}
		st.status[name] = s
		b.machines.machines[name] = &machineState{name: name}
		b.machines.sync(name, s)
	}
	for i := range 57 {
		add(fmt.Sprintf("m%02d", i), now.Add(-time.Minute))
	}
	b.expireMachines(context.Background())
	if got := strings.Count(logs.String(), "\n"); got != 1 || !strings.Contains(logs.String(), "machines=57") || strings.Contains(logs.String(), "WARN") {
		t.Errorf("first sweep logged %d lines, want one info line counting 57 machines:\n%s", got, logs.String())
	}
	for name, s := range st.status {
		if s.Registration != site.Unregistered {
			t.Fatalf("%s is still %s", name, s.Registration)
		}
	}

	logs.Reset()
	add("late", now.Add(time.Second)) // heartbeated to this broker
	now = now.Add(time.Minute)
	b.expireMachines(context.Background())
	if got := logs.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "WARN") || !strings.Contains(got, "machine=late") {
		t.Errorf("a machine silent since it heartbeated to this broker: want one warning naming it, got:\n%s", got)
	}
}
