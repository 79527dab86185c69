// This test runs the simulator against the real broker, API and SQLite
// store with the demo site (sitetest).

package vda_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/broker/vdacontrol"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitetest"
	"github.com/usher-vdi/usher/internal/vda"
)

func TestSimulatorAgainstRealBroker(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ts := sitetest.New(t, sitetest.Options{Broker: func(c *broker.Config) {
		c.Control, c.Logger = vdacontrol.New(), testLogger(t)
		// Heartbeats far apart enough that 57 machines under -race on a loaded
		// 2-core machine never miss one by accident, and a timeout short
		// enough that the silent-machine step stays quick.
		c.HeartbeatInterval, c.HeartbeatTimeout = 250*time.Millisecond, 5*time.Second
	}})
	store, brk := ts.Store, ts.Broker
	var names []string
	for _, m := range ts.Config.Machines {
		names = append(names, m.Name)
	}
	signer, err := auth.NewSigner([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	brokerDone := make(chan error, 1)
	go func() { brokerDone <- brk.Run(ctx) }()
	a, err := api.New(api.Config{Store: store, Signer: signer, PasswordParams: sitetest.Cheap, Broker: brk, EnrolmentSecret: testSecret, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	defer srv.Close()

	sim, err := vda.NewSimulator(vda.SimConfig{Broker: srv.URL, Secret: testSecret, Machines: names, LogonDelay: 50 * time.Millisecond,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	simDone := make(chan error, 1)
	go func() { simDone <- sim.Run(ctx) }()
	waitFor(t, "every demo machine registered", func() bool {
		for _, n := range names {
			if m := sim.Machine(n); m == nil || !m.Registered() {
				return false
			}
		}
		return true
	})

	do := func(method, path string, body any, authz string) (int, []byte) {
		t.Helper()
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader(raw))
		req.Header.Set("Content-Type", "application/json")
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	status, body := do("POST", "/api/v1/login", api.LoginRequest{Username: "user0001", Password: sitetest.UserPassword}, "")
	if status != 200 {
		t.Fatalf("login: %d %s", status, body)
	}
	var lr api.LoginResponse
	json.Unmarshal(body, &lr)
	as := "Bearer " + lr.Token
	launch := func() api.LaunchResponse {
		t.Helper()
		status, body := do("POST", "/api/v1/resources/office-writer-001/launch", api.LaunchRequestBody{ClientName: "laptop"}, as)
		if status != 200 {
			t.Fatalf("launch: %d %s", status, body)
		}
		var l api.LaunchResponse
		json.Unmarshal(body, &l)
		return l
	}
	brokerState := func() string {
		_, body := do("GET", "/api/v1/sessions", nil, as)
		var ss api.SessionsResponse
		json.Unmarshal(body, &ss)
		if len(ss.Sessions) != 1 {
			return ""
		}
		return ss.Sessions[0].State
	}

	// Launch: the simulated client logs on, and the broker hears of it.
	l := launch()
	waitFor(t, "the session active at the broker", func() bool { return brokerState() == "active" })
	if got := sim.Machine(l.Machine).Sessions(); len(got) != 1 || got[0].ID != l.SessionID || got[0].State != vda.StateActive {
		t.Fatalf("the VDA has %+v", got)
	}
	// Logoff through the broker reaches the VDA.
	if status, body := do("POST", "/api/v1/sessions/"+l.SessionID+"/logoff", nil, as); status != 204 {
		t.Fatalf("logoff: %d %s", status, body)
	}
	waitFor(t, "the VDA to forget the session", func() bool { return len(sim.Machine(l.Machine).Sessions()) == 0 })

	// Disconnect, then a launch reconnects to the same session.
	l = launch()
	waitFor(t, "the second session active", func() bool { return brokerState() == "active" })
	if status, body := do("POST", "/api/v1/sessions/"+l.SessionID+"/disconnect", nil, as); status != 204 {
		t.Fatalf("disconnect: %d %s", status, body)
	}
	if l2 := launch(); l2.SessionID != l.SessionID || !l2.Reconnected {
		t.Fatalf("relaunch %+v did not reconnect to %s", l2, l.SessionID)
	}
	waitFor(t, "the reconnected session active", func() bool { return brokerState() == "active" })

	// A silent machine is timed out; resumed, it registers again with its session.
	machineStatus := func() site.MachineStatus {
		var st site.MachineStatus
		store.View(ctx, func(tx site.Tx) error { var err error; st, err = tx.MachineStatus(ctx, l.Machine); return err })
		return st
	}
	sim.Pause(l.Machine)
	waitFor(t, "the broker to time the machine out", func() bool { return machineStatus().Registration != site.Registered })
	sim.Resume(l.Machine)
	waitFor(t, "re-registration with the session", func() bool {
		st := machineStatus()
		return st.Registration == site.Registered && st.Sessions == 1
	})
	if got := brokerState(); got != "active" {
		t.Errorf("after re-registration the session is %q at the broker", got)
	}

	cancel()
	if err := <-simDone; err != nil {
		t.Fatal(err)
	}
	<-brokerDone
}
