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
