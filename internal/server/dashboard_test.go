package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/server"
)

// TestDashboardFromMetrics: a site's dashboard shows the figures that its
// /metrics serve, and an open event stream does not hold its shutdown,
// which returns well within the shutdown timeout and ends the stream.
func TestDashboardFromMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := server.Open(ctx, server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Demo: true, DemoPassword: "pw-1234",
		ShutdownTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	req, _ := http.NewRequest("GET", s.URL()+"/api/v1/admin/dashboard", nil)
	req.SetBasicAuth("admin", "pw-1234")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var fig api.Dashboard
	err = json.NewDecoder(resp.Body).Decode(&fig)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /api/v1/admin/dashboard: %d %v", resp.StatusCode, err)
	}
	_, metrics := get(t, s.URL()+"/metrics")
	for _, c := range []struct {
		state string
		got   int
	}{{"registered", fig.Machines.Registered}, {"unregistered", fig.Machines.Unregistered}, {"maintenance", fig.Machines.Maintenance}} {
		line := `usher_machines{state="` + c.state + `",zone="primary"} ` + strconv.Itoa(c.got)
		if !strings.Contains(metrics, line+"\n") {
			t.Errorf("the dashboard shows %d %s machines; /metrics lacks %s", c.got, c.state, line)
		}
	}
	if fig.Machines.Unregistered != 57 || len(fig.Zones) != 1 || fig.Zones[0].Name != "primary" {
		t.Errorf("dashboard %+v, want 57 unregistered machines in primary", fig)
	}

	req, _ = http.NewRequest("GET", s.URL()+"/api/v1/admin/dashboard/events", nil)
	req.SetBasicAuth("admin", "pw-1234")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /api/v1/admin/dashboard/events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("no first event: %v", err)
		}
		if strings.HasPrefix(line, "event: figures") {
			break
		}
	}

	start := time.Now()
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, r)
		ended <- err
	}()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("shutdown with an open event stream took %s", took)
	}
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("the stream failed at shutdown instead of ending: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream is still open after the shutdown")
	}
}
