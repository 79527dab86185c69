package vda_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/vda"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// zoneBroker answers the machines call with its name while up, 503 while
// down, and 403 (a broker of another zone) when it refuses the machine.
type zoneBroker struct {
	name    string
	up      atomic.Bool
	refuses bool
	calls   atomic.Int32
	srv     *httptest.Server
}

func newZoneBroker(t *testing.T, name string, up, refuses bool) *zoneBroker {
	b := &zoneBroker{name: name, refuses: refuses}
	b.up.Store(up)
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case !b.up.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"unavailable","message":"down"}}`)
		case b.refuses:
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"error":{"code":"forbidden","message":"machine \"m\" is in zone \"far\""}}`)
		default:
			fmt.Fprintf(w, `{"machines":[%q]}`, b.name)
		}
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// deadURL is a loopback address where nothing listens.
func deadURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func ask(t *testing.T, c *vda.Client) string {
	t.Helper()
	names, err := c.Machines(context.Background(), vdaproto.MachinesRequest{Secret: "s"})
	if err != nil {
		t.Fatal(err)
	}
	return names[0]
}

// TestClientFailsOverAmongItsZonesBrokers: a dead broker and one that
// refuses the machine (another zone's) pass the call on at once to the
// next of the list; with none of its zone's up the client falls back to
// the primary zone, and goes back to its own once they answer again.
func TestClientFailsOverAmongItsZonesBrokers(t *testing.T) {
	own1, wrong := newZoneBroker(t, "own1", false, false), newZoneBroker(t, "wrong", true, true)
	own2, primary := newZoneBroker(t, "own2", true, false), newZoneBroker(t, "primary", true, false)
	c, err := vda.NewClient(vda.ClientConfig{
		BrokerURL:   deadURL(t) + ", " + own1.srv.URL + "," + wrong.srv.URL + "," + own2.srv.URL,
		FallbackURL: primary.srv.URL, OwnZoneRetry: 100 * time.Millisecond,
		MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Attempts: 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := ask(t, c); got != "own2" {
		t.Fatalf("answered by %s, want own2 (after a dead broker, one down and one of another zone)", got)
	}
	if got := ask(t, c); got != "own2" || own2.calls.Load() != 2 {
		t.Fatalf("second call answered by %s (%d calls to own2): the client should stay with the broker that answers", got, own2.calls.Load())
	}

	own2.up.Store(false)
	if got := ask(t, c); got != "primary" {
		t.Fatalf("with the zone's brokers down, answered by %s, want primary", got)
	}
	own1.up.Store(true)
	if got := ask(t, c); got != "primary" {
		t.Fatalf("answered by %s, want primary until OwnZoneRetry has passed", got)
	}
	time.Sleep(150 * time.Millisecond) // time passing is the test: OwnZoneRetry (100ms) has passed; the client takes no clock
	if got := ask(t, c); got != "own1" {
		t.Fatalf("after OwnZoneRetry answered by %s, want own1 (the first of its zone that answers)", got)
	}
}

// TestClientWithoutFallbackStaysInItsZone: refused by every broker it
// knows, the client says why instead of trying forever; with no fallback
// it never calls outside its list.
func TestClientWithoutFallbackStaysInItsZone(t *testing.T) {
	a, b := newZoneBroker(t, "a", true, true), newZoneBroker(t, "b", true, true)
	c, err := vda.NewClient(vda.ClientConfig{BrokerURL: a.srv.URL + "," + b.srv.URL, Attempts: 10,
		MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Machines(context.Background(), vdaproto.MachinesRequest{Secret: "s"})
	var be *vda.BrokerError
	if !errors.As(err, &be) || be.StatusCode != http.StatusForbidden {
		t.Fatalf("err = %v, want the brokers' 403", err)
	}
	if a.calls.Load()+b.calls.Load() != 2 {
		t.Errorf("%d calls, want one to each broker", a.calls.Load()+b.calls.Load())
	}
	for _, bad := range []string{"", " , ", "ftp://x", "http://a,://b", "http://user:pw@h"} {
		if _, err := vda.NewClient(vda.ClientConfig{BrokerURL: bad}); err == nil {
			t.Errorf("BrokerURL %q: no error", bad)
		}
	}
}
