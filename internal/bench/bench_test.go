package bench

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/loadgen"
	"github.com/usher-vdi/usher/internal/site"
)

func TestSiteConfig(t *testing.T) {
	c := SiteConfig(1500, 10_000, "$argon2id$stub")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(c.Machines) != Machines || len(c.DeliveryGroups) != 1 || len(c.Catalogs) != 1 || c.Catalogs[0].Kind != site.MultiSession {
		t.Errorf("machines %d, groups %d, catalogs %v", len(c.Machines), len(c.DeliveryGroups), c.Catalogs)
	}
	if len(c.Applications) != 400 || len(c.Desktops) != 0 || len(Applications()) != 400 {
		t.Errorf("%d applications, %d desktops", len(c.Applications), len(c.Desktops))
	}
	if len(c.Users) != 1500 || c.Users[1499].Name != "user1500" || c.Users[0].PasswordHash != "$argon2id$stub" {
		t.Errorf("users: %d, last %+v", len(c.Users), c.Users[len(c.Users)-1])
	}
	if got := c.DeliveryGroups[0].LoadRules.MaxSessions.Limit; got*Machines < 10_000 {
		t.Errorf("session limit %d leaves no room for 10,000 sessions", got)
	}
	if got := SiteConfig(10, 10, "").DeliveryGroups[0].LoadRules.MaxSessions.Limit; got != 250 {
		t.Errorf("a small site's session limit is %d, want Citrix's 250", got)
	}
	if u := Users(3, "pw"); len(u) != 3 || u[2] != (loadgen.Credential{User: "user0003", Password: "pw", Domain: Domain}) {
		t.Errorf("users %v", u)
	}
}

func TestTablesBesideSeeds(t *testing.T) {
	res := &loadgen.Result{Executor: "fixed", Model: loadgen.Closed, Steps: []loadgen.Step{
		{Concurrency: 12, TPS: 280, TimeToFinish: 7.1, Latency: loadgen.Latency{Avg: 42, P99: 130}},
		{Concurrency: 13, TPS: 300, TimeToFinish: 6.6, Latency: loadgen.Latency{Avg: 43}},
	}}
	lt := LaunchTable(res, 2000)
	if got := strings.Join(lt.Rows[0], "|"); got != "12|0.04|0.13|280.0|0.00|7.10s|35.71s|0.9|14.0|0.00|11m57s|20x" {
		t.Errorf("row at 12: %s", got)
	}
	if lt.Rows[1][7] != "-" {
		t.Errorf("a concurrency the zones-and-latency test did not run has figures: %v", lt.Rows[1])
	}
	et := EnumerateTable(&loadgen.Result{Steps: []loadgen.Step{{Concurrency: 10, TPS: 2084, Latency: loadgen.Latency{Avg: 4.8}}}},
		&loadgen.Result{Steps: []loadgen.Step{{Concurrency: 10, TPS: 20840}}})
	row := map[string]string{}
	for i, h := range et.Header {
		row[h] = et.Rows[0][i]
	}
	if row["usher / nginx (in-process client)"] != "0.10" || row["E5-2690v4 tx/s"] != "104.2" || row["usher / best the LHC test"] != "20x" {
		t.Errorf("enumerate row %v", row)
	}
	st := StormTable(loadgen.Step{TimeToFinish: 50.2, Latency: loadgen.Latency{Avg: 40}}, 1000, 20)
	if st.Rows[0][3] != "50.00s" || st.Rows[0][5] != "1.004" || st.Rows[1][4] != "54.48s" {
		t.Errorf("storm rows %v", st.Rows)
	}
}

func TestNginxServesTheBytes(t *testing.T) {
	if _, err := StartNginx(context.Background(), "/nonexistent/nginx", NFusePath, nil, "text/xml"); !errors.Is(err, ErrNoNginx) {
		t.Fatalf("missing binary: %v", err)
	}
	if _, err := os.Stat(DefaultNginx); err != nil {
		t.Skip("nginx is not installed")
	}
	body := []byte(`<?xml version="1.0"?><NFuseProtocol version="5.9"><ResponseAppData></ResponseAppData></NFuseProtocol>`)
	n, err := StartNginx(context.Background(), DefaultNginx, NFusePath, body, "text/xml")
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	if !strings.HasPrefix(n.URL, "http://127.0.0.1:") {
		t.Fatalf("nginx at %s", n.URL)
	}
	resp, err := http.Post(n.URL, "text/xml", strings.NewReader("<NFuseProtocol/>"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(got) != string(body) || resp.Header.Get("Content-Type") != "text/xml" {
		t.Errorf("POST: %d %s %q", resp.StatusCode, resp.Header.Get("Content-Type"), got)
	}
	n.Stop()
	c := &http.Client{Timeout: time.Second}
	if _, err := c.Get(n.URL); err == nil {
		t.Error("nginx still answers after Stop")
	}
}
