package vda_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/usher-vdi/usher/internal/display/xvnc/xvnctest"
	"github.com/usher-vdi/usher/internal/vda"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// TestDisplayIdleDisconnect: with the delivery group's idle timer in the
// prepare, a viewer that keeps sending input stays connected past the
// timer; once it stops, the agent ends it with CloseDisconnected after
// the timer and reports the disconnect, and the session may be
// reconnected.
func TestDisplayIdleDisconnect(t *testing.T) {
	xvnctest.Need(t)
	const idle = time.Second
	fb := newFakeBroker(t, time.Second, "vda-i")
	a := startAgent(t, fb, "vda-i", func(c *vda.MachineConfig) { c.Display, c.DisplayOrigins = newDisplays(t, nil), []string{portal} })
	waitFor(t, "registration", a.Registered)
	u, tok := fb.control("vda-i")
	if status, body := fb.post(u+vdaproto.PathPrepare, tok, vdaproto.PrepareRequest{SessionID: "s-1", User: `OFFICE\someone`,
		Resource: "Desktop", TicketHash: vdaproto.TicketHash("ticket-1"), ExpiresAt: time.Now().Add(time.Minute),
		IdleDisconnectMS: idle.Milliseconds()}); status != http.StatusNoContent {
		t.Fatalf("prepare: %d %s", status, body)
	}
	v := openViewer(t, a.url, "ticket-1")
	ctx := context.Background()
	// A framebuffer update request, incremental, of one pixel: input.
	request := []byte{3, 1, 0, 0, 0, 0, 0, 1, 0, 1}
	closed := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, v.nc)
		closed <- err
	}()
	tick := time.NewTicker(idle / 10)
	defer tick.Stop()
	for deadline := time.Now().Add(2 * idle); time.Now().Before(deadline); {
		select {
		case err := <-closed:
			t.Fatalf("a viewer sending input every %v was ended with an idle timer of %v: %v", idle/10, idle, err)
		case <-tick.C:
		}
		if err := v.ws.Write(ctx, websocket.MessageBinary, request); err != nil {
			t.Fatal(err)
		}
	}
	if got := fb.eventsOf("s-1"); strings.Join(got, ",") != "logon" {
		t.Fatalf("events %v while the viewer sent input", got)
	}
	last := time.Now()
	var err error
	select {
	case err = <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("the idle viewer was not ended")
	}
	if since := time.Since(last); since < idle {
		t.Fatalf("the viewer was ended %v after its last input, before the idle timer of %v", since, idle)
	}
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != vdaproto.CloseDisconnected || !strings.Contains(ce.Reason, "without input") {
		t.Fatalf("the idle viewer ended with %v, want %d and a reason about input", err, vdaproto.CloseDisconnected)
	}
	waitFor(t, "the idle session's disconnect", func() bool { return strings.Join(fb.eventsOf("s-1"), ",") == "logon,disconnect" })
	if s, ok := sessionOf(a.Machine, "s-1"); !ok || s.State != vda.StateDisconnected {
		t.Fatalf("session after the idle timer: %+v, want disconnected", s)
	}
}
