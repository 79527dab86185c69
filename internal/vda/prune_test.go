package vda

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/vdaproto"
)

// clock is a settable time source.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestPruneForgetsAbandonedSessions(t *testing.T) {
	clk := &clock{now: time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC)}
	c, err := NewClient(ClientConfig{BrokerURL: "http://broker.invalid", InsecureBroker: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMachine(MachineConfig{Name: "vda-1", Client: c, Secret: "s", ControlURL: "http://vda-1:8490", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	prepare := func(id, ticket string) {
		t.Helper()
		err := m.prepare(ctx, vdaproto.PrepareRequest{SessionID: id, User: "alice", TicketHash: vdaproto.TicketHash(ticket), ExpiresAt: clk.Now().Add(90 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
	}
	prepare("abandoned", "t1")
	prepare("arrived", "t2")
	if _, err := m.connect(ctx, vdaproto.ConnectRequest{Ticket: "t2"}); err != nil {
		t.Fatal(err)
	}

	clk.advance(90*time.Second + pendingGrace - time.Second)
	m.pruneSessions()
	if got := len(m.Sessions()); got != 2 {
		t.Fatalf("within the grace, %d sessions left, want 2", got)
	}

	clk.advance(2 * time.Second)
	m.pruneSessions()
	if got := m.Sessions(); len(got) != 1 || got[0].ID != "arrived" {
		t.Fatalf("after the grace, sessions %+v, want only the arrived one", got)
	}
	m.mu.Lock()
	last := m.events[len(m.events)-1].ev
	tickets := len(m.tickets)
	m.mu.Unlock()
	if last.SessionID != "abandoned" || last.Event != vdaproto.EventLogoff {
		t.Errorf("last event %+v, want the abandoned session's logoff", last)
	}
	if _, err := m.connect(ctx, vdaproto.ConnectRequest{Ticket: "t1"}); err == nil {
		t.Error("the abandoned session's ticket still connects")
	}

	clk.advance(ticketMemory)
	m.pruneSessions()
	m.mu.Lock()
	left := len(m.tickets)
	m.mu.Unlock()
	if tickets != 2 || left != 0 {
		t.Errorf("tickets: %d before, %d after their memory ran out; want 2 then 0", tickets, left)
	}
}
