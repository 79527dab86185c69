package vda_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/usher-vdi/usher/internal/vda"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// startSim runs a simulator against fb until the test ends. On a bubble
// broker's network, the simulator's control endpoint is http://sim.test,
// served by the test as an all-in-one server would (ControlBase).
func startSim(t testing.TB, fb *fakeBroker, names []string, mod func(*vda.SimConfig)) *vda.Simulator {
	t.Helper()
	cfg := vda.SimConfig{Broker: fb.URL(), Secret: testSecret, Machines: names,
		LogonDelay: 30 * time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		Stagger: 50 * time.Millisecond, Logger: testLogger(t)}
	if fb.net != nil {
		cfg.ControlBase, cfg.HTTPClient, cfg.InsecureBroker = "http://sim.test", fb.hc, true
	}
	if mod != nil {
		mod(&cfg)
	}
	sim, err := vda.NewSimulator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.Run(ctx) }()
	if fb.net != nil {
		ln := mustListen(t, fb.net, "sim.test:80")
		served := make(chan error, 1)
		go func() { served <- vda.ServeControl(ctx, ln, sim.Handler(), testLogger(t)) }()
		t.Cleanup(func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("simulator control server: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("simulator: %v", err)
		}
	})
	return sim
}

func TestNames(t *testing.T) {
	if got, want := vda.Names("sim", 3), []string{"sim-001", "sim-002", "sim-003"}; !slices.Equal(got, want) {
		t.Errorf("Names(sim, 3) = %v, want %v", got, want)
	}
	if got := vda.Names("x", 1200); got[0] != "x-0001" || got[1199] != "x-1200" {
		t.Errorf("Names(x, 1200) runs %s .. %s", got[0], got[1199])
	}
}

func TestSimulatorRegistersAndLogsOn(t *testing.T) {
	names := vda.Names("sim", 57)
	fb := newFakeBroker(t, 20*time.Millisecond, names...)
	sim := startSim(t, fb, names, nil)
	waitFor(t, "57 registrations", func() bool { return fb.registeredCount() == 57 })

	u, _ := fb.control("sim-042")
	if want := "http://" + sim.Addr() + "/vda/sim-042"; u != want {
		t.Errorf("control URL %q, want %q", u, want)
	}
	for _, name := range names {
		if reg := fb.registrations(name)[0]; reg.MaxSessions != 0 || reg.Address != "" {
			t.Errorf("%s registered %+v: capacity and address should come from the site", name, reg)
		}
	}

	for i, name := range names {
		if got := fb.prepare(name, fmt.Sprintf("s%02d", i), fmt.Sprintf("user%04d", i), fmt.Sprintf("ticket-%d", i), false); got != http.StatusNoContent {
			t.Fatalf("prepare on %s: %d", name, got)
		}
	}
	waitFor(t, "57 logon events", func() bool {
		for i := range names {
			if _, ok := fb.event1(fmt.Sprintf("s%02d", i), vdaproto.EventLogon); !ok {
				return false
			}
		}
		return true
	})
	if ev, _ := fb.event1("s00", vdaproto.EventLogon); ev.ClientName != vda.SimClientName {
		t.Errorf("logon event %+v, want client %q", ev, vda.SimClientName)
	}
	waitFor(t, "heartbeats counting the session", func() bool {
		hb := fb.lastHeartbeat("sim-001")
		return hb.Sessions == 1 && hb.LogonsInProgress == 0 && hb.MemoryUsedMB > 0
	})
	if got := sim.Machine("sim-001").Sessions(); len(got) != 1 || got[0].State != vda.StateActive {
		t.Errorf("sim-001 sessions %+v, want one active", got)
	}
}

func TestSimulatorManualConnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := newBubbleBroker(t, 20*time.Millisecond, "sim-001", "sim-002")
		startSim(t, fb, []string{"sim-001", "sim-002"}, func(c *vda.SimConfig) { c.ManualConnect = true })
		settle(time.Second)
		if got := fb.registeredCount(); got != 2 {
			t.Fatalf("%d machines registered, want 2", got)
		}

		fb.prepare("sim-002", "s1", "alice", "ticket-1", false)
		settle(time.Second) // well past the 30ms logon delay
		if got := fb.eventsOf("s1"); len(got) != 0 {
			t.Fatalf("events %v without a client", got)
		}
		u, _ := fb.control("sim-002")
		if status, _, _ := fb.connect(u, "ticket-1"); status != http.StatusOK {
			t.Fatalf("connect: %d", status)
		}
		synctest.Wait()
		if _, ok := fb.event1("s1", vdaproto.EventLogon); !ok {
			t.Fatalf("no logon event after the client connected; events %v", fb.eventsOf("s1"))
		}
		if status, _, eb := fb.connect(u, "ticket-1"); status != http.StatusUnauthorized || !strings.Contains(eb.Error.Message, "already used") {
			t.Errorf("second connect: %d %+v", status, eb)
		}
		// The ticket of one machine opens nothing on another.
		fb.prepare("sim-002", "s2", "bob", "ticket-2", false)
		other, _ := fb.control("sim-001")
		if status, _, _ := fb.connect(other, "ticket-2"); status != http.StatusUnauthorized {
			t.Errorf("connect on another machine: %d, want 401", status)
		}
		// Unknown machines and paths get the JSON error document.
		if status, body := fb.post(strings.TrimSuffix(other, "sim-001")+"sim-999/connect", "", vdaproto.ConnectRequest{Ticket: "x"}); status != http.StatusNotFound || decodeErrorBody(body).Error.Code != "not_found" {
			t.Errorf("connect on an unknown machine: %d %s", status, body)
		}
	})
}

func TestSimulatorSessionLength(t *testing.T) {
	fb := newFakeBroker(t, 20*time.Millisecond, "sim-001")
	sim := startSim(t, fb, []string{"sim-001"}, func(c *vda.SimConfig) {
		c.SessionLength, c.SessionJitter = 50*time.Millisecond, 10*time.Millisecond
	})
	waitFor(t, "registration", func() bool { return fb.registeredCount() == 1 })
	fb.prepare("sim-001", "s1", "alice", "t", false)
	waitFor(t, "logon and logoff", func() bool { return slices.Equal(fb.eventsOf("s1"), []string{"logon", "logoff"}) })
	if got := sim.Machine("sim-001").Sessions(); len(got) != 0 {
		t.Errorf("sessions %+v after the user logged off", got)
	}
}

func TestSimulatorPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		names := vda.Names("sim", 3)
		fb := newBubbleBroker(t, 15*time.Millisecond, names...)
		sim := startSim(t, fb, names, nil)
		settle(time.Second)
		if got := fb.registeredCount(); got != 3 {
			t.Fatalf("%d machines registered, want 3", got)
		}
		if err := sim.Pause("sim-404"); err == nil {
			t.Error("Pause of an unknown machine succeeded")
		}

		if err := sim.Pause("sim-002"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // a heartbeat in flight lands
		paused := len(fb.heartbeats("sim-002"))
		others := len(fb.heartbeats("sim-001"))
		settle(time.Second) // some 66 heartbeat intervals
		if got := len(fb.heartbeats("sim-001")); got < others+10 {
			t.Fatalf("a running machine heartbeated %d times in a second, want at least 10", got-others)
		}
		if got := len(fb.heartbeats("sim-002")); got != paused {
			t.Fatalf("the paused machine heartbeated %d times", got-paused)
		}

		// The broker times the silent machine out; resumed, it registers again.
		fb.forget("sim-002")
		if err := sim.Resume("sim-002"); err != nil {
			t.Fatal(err)
		}
		settle(time.Second)
		if got := len(fb.registrations("sim-002")); got != 2 {
			t.Fatalf("sim-002 registered %d times, want 2 (again after resume)", got)
		}
		if got := len(fb.heartbeats("sim-002")); got <= paused {
			t.Fatal("no heartbeats after resume")
		}
	})
}

func TestSimulatorGivesUpOnWrongSecret(t *testing.T) {
	fb := newFakeBroker(t, time.Second, "sim-001", "sim-002")
	sim, err := vda.NewSimulator(vda.SimConfig{Broker: fb.URL(), Secret: "wrong", Machines: []string{"sim-001", "sim-002"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := sim.Run(ctx); !errors.Is(err, vda.ErrUnauthorized) || !strings.Contains(err.Error(), "wrong enrolment secret") {
		t.Fatalf("Run with a wrong secret = %v", err)
	}
}

func TestSimulatorControlBase(t *testing.T) {
	fb := newFakeBroker(t, 20*time.Millisecond, "sim-001")
	// An all-in-one server mounts the simulator's handler on its own mux.
	var sim atomic.Pointer[vda.Simulator]
	mux := http.NewServeMux()
	mux.HandleFunc(vda.ControlPrefix, func(w http.ResponseWriter, r *http.Request) { sim.Load().Handler().ServeHTTP(w, r) })
	host := newHTTPServer(t, mux)
	sim.Store(startSim(t, fb, []string{"sim-001"}, func(c *vda.SimConfig) { c.ControlBase = host }))
	waitFor(t, "registration", func() bool { return fb.registeredCount() == 1 })
	if u, _ := fb.control("sim-001"); u != host+"/vda/sim-001" {
		t.Errorf("control URL %q", u)
	}
	if got := fb.prepare("sim-001", "s1", "alice", "t", false); got != http.StatusNoContent {
		t.Fatalf("prepare through the host server: %d", got)
	}
	waitFor(t, "logon", func() bool { _, ok := fb.event1("s1", vdaproto.EventLogon); return ok })
}

func TestNewSimulatorChecksConfig(t *testing.T) {
	for name, cfg := range map[string]vda.SimConfig{
		"no machines":   {Broker: "http://b", Secret: "s"},
		"no secret":     {Broker: "http://b", Machines: []string{"a"}},
		"bad broker":    {Broker: "b:80", Secret: "s", Machines: []string{"a"}},
		"twice":         {Broker: "http://b", Secret: "s", Machines: []string{"a", "a"}},
		"slash in name": {Broker: "http://b", Secret: "s", Machines: []string{"a/b"}},
		"bad base":      {Broker: "http://b", Secret: "s", Machines: []string{"a"}, ControlBase: "localhost:80"},
	} {
		if _, err := vda.NewSimulator(cfg); err == nil {
			t.Errorf("%s: NewSimulator succeeded", name)
		}
	}
}

// TestSimulatorStopsEveryGoroutine runs a simulator with sessions in every
// state, on a real control listener, and checks that, once Run returned,
// its goroutines are gone.
func TestSimulatorStopsEveryGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	names := vda.Names("sim", 20)
	fb := newFakeBroker(t, 10*time.Millisecond, names...)
	defer fb.srv.Close()
	sim, err := vda.NewSimulator(vda.SimConfig{Broker: fb.URL(), Secret: testSecret, Machines: names,
		LogonDelay: 20 * time.Millisecond, SessionLength: time.Hour, Stagger: 20 * time.Millisecond, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.Run(ctx) }()
	waitFor(t, "registrations", func() bool { return fb.registeredCount() == 20 })
	for i, name := range names {
		fb.prepare(name, fmt.Sprintf("active-%d", i), "alice", fmt.Sprintf("a%d", i), false)
	}
	waitFor(t, "logons", func() bool { _, ok := fb.event1("active-19", vdaproto.EventLogon); return ok })
	fb.prepare("sim-001", "pending", "bob", "p", false) // its client is on the way
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func newHTTPServer(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
