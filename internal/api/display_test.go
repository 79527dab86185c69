package api_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/gateway"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// registerVNC registers the demo's pooled desktops as machines whose
// sessions open in a browser (protocol vnc), their control listeners at
// https://NAME.demo.internal:9443/agent pinned to pin.
func (f *fixture) registerVNC(pin string) {
	f.t.Helper()
	for i := 1; i <= 5; i++ {
		name := fmt.Sprintf("pooled-vda-%02d", i)
		cred := f.enrol(name)
		f.want(f.do("POST", vdaproto.PathRegister, vdaproto.RegisterRequest{Machine: name, Address: name + ".demo.internal:5900",
			Protocol: vdaproto.ProtocolVNC, ControlURL: "https://" + name + ".demo.internal:9443/agent", ControlPin: pin,
			ControlToken: "control-token-0123456789"}, "Bearer "+cred), 200, "")
	}
}

// TestLaunchDisplayURL: a launch of a session on a vnc machine answers
// the gateway's display path, as does its reconnection; a launch on an
// RDP host answers none; in direct mode the answer is the agent's own
// wss:// URL under its control URL.
func TestLaunchDisplayURL(t *testing.T) {
	f := newFixture(t)
	f.registerVNC(strings.Repeat("ab", 32))
	cred := f.enrol("office-vda-01")
	f.want(f.do("POST", vdaproto.PathRegister, vdaproto.RegisterRequest{Machine: "office-vda-01", ControlURL: "http://vda.invalid/office-vda-01",
		ControlToken: "control-token-0123456789"}, "Bearer "+cred), 200, "")
	tok, _ := f.login("user0001", userPassword)
	as := "Bearer " + tok
	launch := func(srvURL, path string) api.LaunchResponse {
		t.Helper()
		r := f.doAt(srvURL, "POST", path, nil, as)
		f.want(r, 200, "")
		var l api.LaunchResponse
		json.Unmarshal(r.body, &l)
		return l
	}
	desktop := "/api/v1/resources/" + strings.ReplaceAll(demo.PooledDesktop, " ", "%20") + "/launch"

	l := launch(f.srv.URL, desktop)
	if l.Protocol != vdaproto.ProtocolVNC || l.DisplayURL != gateway.Path(l.SessionID) {
		t.Fatalf("launch of a vnc desktop: protocol %q, display_url %q; want vnc, %q", l.Protocol, l.DisplayURL, gateway.Path(l.SessionID))
	}
	if r := launch(f.srv.URL, "/api/v1/sessions/"+l.SessionID+"/reconnect"); r.DisplayURL != l.DisplayURL {
		t.Errorf("reconnection: display_url %q, want %q", r.DisplayURL, l.DisplayURL)
	}
	rdp := f.do("POST", "/api/v1/resources/office-writer-001/launch", nil, as)
	f.want(rdp, 200, "")
	var fields map[string]any
	json.Unmarshal(rdp.body, &fields)
	if u, ok := fields["display_url"]; !ok || u != "" {
		t.Errorf("a launch on an RDP host: display_url %v (there: %v), want empty", u, ok)
	}

	t.Run("direct", func(t *testing.T) {
		direct, err := gateway.New(gateway.Config{Resolver: gateway.FromBroker(f.broker), Direct: true})
		if err != nil {
			t.Fatal(err)
		}
		a, err := api.New(api.Config{Store: f.store, Signer: f.signer, PasswordParams: cheap, Broker: f.broker,
			EnrolmentSecret: enrolmentSecret, DisplayURL: direct.DisplayURL})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(a)
		defer srv.Close()
		l := launch(srv.URL, desktop)
		if want := "wss://" + l.Machine + ".demo.internal:9443/agent/display"; l.DisplayURL != want {
			t.Fatalf("direct mode: display_url %q, want %q", l.DisplayURL, want)
		}
		// Without Display, the gateway's route is neither served nor
		// documented.
		f.want(f.doAt(srv.URL, "GET", gateway.Path(l.SessionID), nil, as), 404, "")
		if strings.Contains(string(a.OpenAPI()), "/display") {
			t.Error("the OpenAPI document of a site without the gateway documents its route")
		}
	})
}
