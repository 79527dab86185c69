package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// testChangeSessions holds ChangeSessions to ChangeSessionsTx's rules:
// each change gets its verdict, refused ones change nothing, a pending
// session's logon ends its machine's count of logons in progress, and a
// malformed batch is refused whole.
func testChangeSessions(t *testing.T, open func(*testing.T) site.Store) {
	s := openBase(t, open)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	at := t0.Add(time.Minute)
	sess := func(id, machine string, state site.SessionState) site.Session {
		return site.Session{ID: id, User: "bob", Resource: "notepad", DeliveryGroup: "apps", Machine: machine, State: state,
			ClientName: "pc-1", CreatedAt: t0, UpdatedAt: t0}
	}
	all := []site.Session{
		sess("s1", "app1", site.SessionPending), sess("s2", "app1", site.SessionPending), sess("s3", "app1", site.SessionActive),
		sess("s4", "app1", site.SessionLoggedOff), sess("s5", "spare1", site.SessionPending), sess("s6", "spare1", site.SessionPending),
	}
	update(t, s, func(ctx context.Context, tx site.Tx) error {
		for m, st := range map[string]site.MachineStatus{
			"app1":   {Registration: site.Registered, Credential: "c1", Usage: site.Usage{Sessions: 3, LogonsInProgress: 2}, LoadIndex: 100},
			"spare1": {Registration: site.Registered, Credential: "c2", Usage: site.Usage{Sessions: 2, LogonsInProgress: 2}},
		} {
			if err := tx.SetMachineStatus(ctx, m, st); err != nil {
				return err
			}
		}
		for _, x := range all {
			if err := tx.Sessions().Create(ctx, x); err != nil {
				return err
			}
		}
		return nil
	})
	v := version(t, s)
	changes := []site.SessionChange{
		{Machine: "app1", Session: "s1", State: site.SessionActive, ClientName: "pc-2", CheckCredential: true, Credential: "c1", At: at},
		{Machine: "app1", Session: "s2", State: site.SessionDisconnected, CheckCredential: true, Credential: "c1", At: at},
		{Machine: "app1", Session: "s3", State: site.SessionActive, At: at},
		{Machine: "app1", Session: "s4", State: site.SessionActive, At: at},
		{Machine: "app1", Session: "s5", State: site.SessionActive, At: at},
		{Machine: "app1", Session: "nope", State: site.SessionActive, At: at},
		{Machine: "ghost", Session: "s6", State: site.SessionActive, At: at},
		{Machine: "spare1", Session: "s6", State: site.SessionActive, CheckCredential: true, Credential: "c1", At: at},
	}
	// s6 twice: a malformed batch, refused whole.
	if _, err := s.ChangeSessions(ctx, changes); site.ErrorCode(err) != site.EInvalid {
		t.Fatalf("a batch changing s6 twice: %v, want %s", err, site.EInvalid)
	}
	if _, err := s.ChangeSessions(ctx, []site.SessionChange{{Machine: "app1", Session: "s1", State: site.SessionLoggedOff}}); site.ErrorCode(err) != site.EInvalid {
		t.Fatalf("a change to logged-off: %v, want %s", err, site.EInvalid)
	}
	changes = append(changes[:6], changes[7])
	got, err := s.ChangeSessions(ctx, changes)
	if err != nil {
		t.Fatal(err)
	}
	want := []site.SessionVerdict{site.VerdictLoggedOn, site.VerdictLoggedOn, site.VerdictUnchanged, site.VerdictUnchanged,
		site.VerdictOtherMachine, site.VerdictNoSession, site.VerdictNotRegistered}
	if !same(got, want) {
		t.Fatalf("verdicts %v, want %v", got, want)
	}
	after := map[string]site.Session{
		"s1": all[0], "s2": all[1], "s3": all[2], "s4": all[3], "s5": all[4], "s6": all[5],
	}
	x := after["s1"]
	x.State, x.ClientName, x.UpdatedAt = site.SessionActive, "pc-2", at
	after["s1"] = x
	x = after["s2"]
	x.State, x.UpdatedAt = site.SessionDisconnected, at
	after["s2"] = x
	view(t, s, func(ctx context.Context, tx site.Tx) error {
		for id, w := range after {
			g, err := tx.Sessions().Get(ctx, id)
			if err != nil {
				return err
			}
			if !same(g, w) {
				t.Errorf("session %s: %+v, want %+v", id, g, w)
			}
		}
		for m, logons := range map[string]int{"app1": 0, "spare1": 2} {
			st, err := tx.MachineStatus(ctx, m)
			if err != nil {
				return err
			}
			if st.LogonsInProgress != logons || st.Sessions != map[string]int{"app1": 3, "spare1": 2}[m] {
				t.Errorf("%s counts %d logons in progress and %d sessions, want %d logons and its sessions as they were", m, st.LogonsInProgress, st.Sessions, logons)
			}
			if m == "app1" && st.LoadIndex != 100 {
				t.Errorf("app1's load index %d changed (a logon is not in it)", st.LoadIndex)
			}
		}
		return nil
	})
	if got := version(t, s); got != v {
		t.Errorf("configuration version moved from %d to %d", v, got)
	}
	// The same batch again: nothing left to do.
	got, err = s.ChangeSessions(ctx, changes[:2])
	if err != nil || !same(got, []site.SessionVerdict{site.VerdictUnchanged, site.VerdictUnchanged}) {
		t.Fatalf("the batch again: %v, %v; want unchanged", got, err)
	}
}

// testRecordHeartbeats holds RecordHeartbeats to RecordHeartbeatsTx's
// rules: a registered machine's heartbeat with its credential is recorded
// (time, CPU and memory, the broker's load index; its session counts
// stay the site DB's), the rest get their verdicts and change nothing.
func testRecordHeartbeats(t *testing.T, open func(*testing.T) site.Store) {
	s := openBase(t, open)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	before := map[string]site.MachineStatus{
		"app1":   {Registration: site.Registered, Credential: "c1", LastHeartbeat: t0, Usage: site.Usage{Sessions: 3, LogonsInProgress: 1}, LoadIndex: 100},
		"spare1": {Registration: site.Unregistered, Credential: "c2", LastHeartbeat: t0},
		"vdi1":   {Registration: site.Registered, Credential: "c3", LastHeartbeat: t0},
	}
	update(t, s, func(ctx context.Context, tx site.Tx) error {
		for m, st := range before {
			if err := tx.SetMachineStatus(ctx, m, st); err != nil {
				return err
			}
		}
		return nil
	})
	at := t0.Add(time.Minute)
	usage := site.Usage{Sessions: 99, LogonsInProgress: 99, CPUPercent: 42.5, MemoryPercent: 61, MemoryUsedMB: 3000, MemoryTotalMB: 8000}
	hbs := []site.Heartbeat{
		{Machine: "app1", Credential: "c1", At: at, Usage: usage, LoadIndex: 4250},
		{Machine: "spare1", Credential: "c2", At: at, Usage: usage},
		{Machine: "vdi1", Credential: "stale", At: at, Usage: usage},
		{Machine: "ghost", Credential: "c1", At: at, Usage: usage},
	}
	if _, err := s.RecordHeartbeats(ctx, append(hbs, hbs[0])); site.ErrorCode(err) != site.EInvalid {
		t.Fatalf("a batch with app1 twice: %v, want %s", err, site.EInvalid)
	}
	got, err := s.RecordHeartbeats(ctx, hbs)
	if err != nil {
		t.Fatal(err)
	}
	want := []site.HeartbeatVerdict{site.HeartbeatRecorded, site.HeartbeatNotRegistered, site.HeartbeatNotRegistered, site.HeartbeatNoMachine}
	if !same(got, want) {
		t.Fatalf("verdicts %v, want %v", got, want)
	}
	after := before["app1"]
	after.LastHeartbeat, after.LoadIndex = at, 4250
	after.CPUPercent, after.MemoryPercent, after.MemoryUsedMB, after.MemoryTotalMB = 42.5, 61, 3000, 8000
	view(t, s, func(ctx context.Context, tx site.Tx) error {
		for m, w := range map[string]site.MachineStatus{"app1": after, "spare1": before["spare1"], "vdi1": before["vdi1"]} {
			st, err := tx.MachineStatus(ctx, m)
			if err != nil {
				return err
			}
			if !same(st, w) {
				t.Errorf("%s: %+v, want %+v", m, st, w)
			}
		}
		return nil
	})
}
