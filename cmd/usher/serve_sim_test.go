package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServeDemoWithSimulatedVDAs runs the README's demo with simulated VDAs
// and walks a user through it over the REST API: log in, enumerate 400
// applications, launch one, and see the session become active when the
// simulated user logs on.
func TestServeDemoWithSimulatedVDAs(t *testing.T) {
	s := startServe(t, "--demo", "--demo-password", "demo-pass-1", "--data", t.TempDir(),
		"--sim-vdas", "-1", "--sim-logon-delay", "50ms", "--heartbeat-interval", "200ms")

	waitFor(t, "57 registered machines", func() bool {
		return metricSum(metrics(t, s.url), "usher_machines", `state="registered"`) == 57
	})

	var login struct{ Token string }
	code, body := postJSON(t, s.url+"/api/v1/login", "", `{"username":"DEMO\\user0042","password":"demo-pass-1"}`)
	if json.Unmarshal(body, &login); code != 200 || login.Token == "" {
		t.Fatalf("login: %d %s", code, body)
	}
	code, body = getBearer(t, s.url+"/api/v1/resources", login.Token)
	var res struct {
		Resources []struct{ Name, Kind string }
	}
	json.Unmarshal(body, &res)
	apps := 0
	for _, r := range res.Resources {
		if r.Kind == "application" {
			apps++
		}
	}
	if code != 200 || apps != 400 {
		t.Fatalf("resources: %d, %d applications", code, apps)
	}

	code, body = postJSON(t, s.url+"/api/v1/resources/office-writer-001/launch", login.Token, `{"client_name":"test-client"}`)
	var launch struct {
		SessionID, Machine, Host, Ticket string
		Port                             int
	}
	if json.Unmarshal(body, &launch); code != 200 || launch.Ticket == "" || launch.Port == 0 {
		t.Fatalf("launch: %d %s", code, body)
	}
	waitFor(t, "the simulated user's logon", func() bool {
		_, body := getBearer(t, s.url+"/api/v1/sessions", login.Token)
		return strings.Contains(string(body), `"state": "active"`) || strings.Contains(string(body), `"state":"active"`)
	})

	m := metrics(t, s.url)
	for _, re := range []string{
		`usher_broker_transactions_total\{operation="launch",result="ok"\} 1`,
		`usher_broker_transactions_total\{operation="enumerate",result="ok"\} [1-9]`,
		`usher_broker_transaction_duration_seconds_count\{operation="launch"\} 1`,
		`usher_machine_load_index\{delivery_group="Office Apps",machine="` + launch.Machine + `"\} [1-9]`,
	} {
		if !regexp.MustCompile(re).MatchString(m) {
			t.Errorf("/metrics lacks %s", re)
		}
	}
	if got := metricSum(m, "usher_sessions", `state="active"`); got != 1 {
		t.Errorf("usher_sessions{state=\"active\"} summed over zone: %v, want 1", got)
	}
}

// waitFor polls cond until it holds, failing the test after a generous
// deadline. The program under test serves on real TCP sockets, which a
// synctest bubble cannot wait on (they are not durably blocking), so this
// end-to-end test polls for a readiness condition instead of sleeping for
// a guess.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func metrics(t *testing.T, base string) string {
	t.Helper()
	_, body := get(t, base+"/metrics", "", "")
	return string(body)
}

// metricSum sums the samples of the metric name in a /metrics text whose
// labels include each of labels (`state="registered"`), whatever their
// others: usher_machines{state="registered"} summed over zone.
func metricSum(text, name string, labels ...string) float64 {
	var sum float64
	for line := range strings.Lines(text) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), name+"{")
		if !ok {
			continue
		}
		have, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		all := true
		for _, l := range labels {
			all = all && slices.Contains(strings.Split(have, ","), l)
		}
		if v, err := strconv.ParseFloat(value, 64); all && err == nil {
			sum += v
		}
	}
	return sum
}

func postJSON(t *testing.T, url, token, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func getBearer(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
