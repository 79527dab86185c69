package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

func (f *fixture) login(username, password string) (string, response) {
	f.t.Helper()
	r := f.do("POST", "/api/v1/login", api.LoginRequest{Username: username, Password: password}, "none")
	var lr api.LoginResponse
	json.Unmarshal(r.body, &lr)
	return lr.Token, r
}

// registerAll enrols and registers every demo machine through the VDA API.
func (f *fixture) registerAll() {
	f.t.Helper()
	var machines api.ListResponse[site.MachineState]
	json.Unmarshal(f.do("GET", "/api/v1/admin/machines?limit=1000", nil).body, &machines)
	for _, m := range machines.Items {
		cred := f.enrol(m.Name)
		f.want(f.do("POST", vdaproto.PathRegister, vdaproto.RegisterRequest{Machine: m.Name, ControlURL: "http://vda.invalid/" + m.Name,
			ControlToken: "control-token-0123456789"}, "Bearer "+cred), 200, "")
	}
}

func (f *fixture) enrol(machine string) string {
	f.t.Helper()
	r := f.do("POST", vdaproto.PathEnrol, vdaproto.EnrolRequest{Machine: machine, Secret: enrolmentSecret}, "none")
	f.want(r, 200, "")
	var er vdaproto.EnrolResponse
	json.Unmarshal(r.body, &er)
	return er.Credential
}

func TestUserLoginAndEnumerate(t *testing.T) {
	f := newFixture(t)
	for _, name := range []string{"user0001", `DEMO\user0001`, "user0001@demo", `demo\user0001`} {
		if tok, r := f.login(name, userPassword); r.status != 200 || tok == "" {
			t.Fatalf("login as %q: %d %s", name, r.status, r.body)
		}
	}
	var bodies []string
	for _, tc := range []struct{ user, pw string }{
		{"user0001", "wrong"}, {"nobody", userPassword}, {`OTHER\user0001`, userPassword}, {"user0001", ""}, {"", ""},
	} {
		_, r := f.login(tc.user, tc.pw)
		f.want(r, 401, site.EUnauthorized)
		bodies = append(bodies, string(r.body))
	}
	for _, b := range bodies {
		if b != bodies[0] {
			t.Fatalf("failed logins answer differently: %q vs %q", b, bodies[0])
		}
	}

	tok, _ := f.login("user0001", userPassword)
	r := f.do("GET", "/api/v1/resources", nil, "Bearer "+tok)
	f.want(r, 200, "")
	var res api.ResourcesResponse
	if err := json.Unmarshal(r.body, &res); err != nil {
		t.Fatal(err)
	}
	apps := 0
	for _, x := range res.Resources {
		if x.Kind == "application" {
			apps++
		}
	}
	if apps != 400 || len(res.Folders) < 10 {
		t.Fatalf("user0001 sees %d applications in %d folders; want 400 in the demo's folders", apps, len(res.Folders))
	}

	// Tokens are for one API only, and need a live user.
	f.want(f.do("GET", "/api/v1/admin/site", nil, "Bearer "+tok), 401, site.EUnauthorized)
	admin := f.do("POST", "/api/v1/admin/tokens", nil)
	var at api.TokenResponse
	json.Unmarshal(admin.body, &at)
	f.want(f.do("GET", "/api/v1/resources", nil, "Bearer "+at.Token), 401, site.EUnauthorized)
	f.want(f.do("GET", "/api/v1/resources", nil, "none"), 401, site.EUnauthorized)
}

func TestUserLaunch(t *testing.T) {
	f := newFixture(t)
	f.registerAll()
	tok, _ := f.login("user0001", userPassword)
	as := "Bearer " + tok

	r := f.do("POST", "/api/v1/resources/office-writer-001/launch", api.LaunchRequestBody{ClientName: "laptop"}, as)
	f.want(r, 200, "")
	var l api.LaunchResponse
	json.Unmarshal(r.body, &l)
	if l.Ticket == "" || l.Host == "" || l.Port != 3389 || l.Protocol != "rdp" || !strings.HasPrefix(l.Machine, "office-vda-") {
		t.Fatalf("launch answer %s", r.body)
	}
	if !strings.Contains(l.LaunchFile.Content, "full address:s:"+l.Host+":3389") || !strings.Contains(l.LaunchFile.Content, l.Ticket) ||
		!strings.HasSuffix(l.LaunchFile.Filename, ".rdp") {
		t.Fatalf("launch file %+v", l.LaunchFile)
	}
	last, _ := f.control.LastPrepared()
	if last.Ticket != l.Ticket || last.SessionID != l.SessionID || last.User != "user0001" {
		t.Fatalf("the VDA was prepared with %+v", last)
	}

	rdp := f.do("POST", "/api/v1/resources/office-writer-001/launch?format=rdp", nil, as)
	f.want(rdp, 200, "")
	if ct := rdp.header.Get("Content-Type"); ct != "application/x-rdp" || !strings.Contains(string(rdp.body), "loadbalanceinfo:s:usher-ticket:") {
		t.Fatalf("rdp download: %s\n%s", ct, rdp.body)
	}

	r = f.do("GET", "/api/v1/sessions", nil, as)
	var ss api.SessionsResponse
	json.Unmarshal(r.body, &ss)
	if len(ss.Sessions) != 1 || ss.Sessions[0].ID != l.SessionID {
		t.Fatalf("sessions %s; the second launch should have joined the first session", r.body)
	}

	t.Run("not entitled and unknown look the same", func(t *testing.T) {
		a := f.do("POST", "/api/v1/resources/nonexistent/launch", nil, as)
		f.want(a, 403, site.EForbidden)
		b := f.do("POST", "/api/v1/resources/"+strings.ReplaceAll("My Workstation", " ", "%20")+"/launch", nil, as) // helpdesk only
		f.want(b, 403, site.EForbidden)
		if string(a.body) != string(b.body) {
			t.Fatalf("answers differ: %s vs %s", a.body, b.body)
		}
	})
	t.Run("someone else's session", func(t *testing.T) {
		other, _ := f.login("user0002", userPassword)
		f.want(f.do("POST", "/api/v1/sessions/"+l.SessionID+"/logoff", nil, "Bearer "+other), 404, site.ENotFound)
	})
	t.Run("bad bodies", func(t *testing.T) {
		f.want(f.do("POST", "/api/v1/resources/office-writer-001/launch", `{"client_name":`, as), 400, site.EInvalid)
		f.want(f.do("POST", "/api/v1/resources/office-writer-001/launch", `{"client_name":"`+strings.Repeat("x", 70<<10)+`"}`, as), 413, site.EInvalid)
		f.want(f.do("POST", "/api/v1/login", `{"username":"user0001","password":"x","extra":1}`, "none"), 400, site.EInvalid)
		f.want(f.do("POST", "/api/v1/resources/office-writer-001/launch?format=pdf", nil, as), 400, site.EInvalid)
	})
	t.Run("logoff", func(t *testing.T) {
		f.want(f.do("POST", "/api/v1/sessions/"+l.SessionID+"/logoff", nil, as), 204, "")
		r := f.do("GET", "/api/v1/sessions", nil, as)
		json.Unmarshal(r.body, &ss)
		if len(ss.Sessions) != 0 {
			t.Fatalf("sessions after logoff: %s", r.body)
		}
	})
}

func TestNoCapacity(t *testing.T) {
	f := newFixture(t) // no machine registered
	tok, _ := f.login("user0001", userPassword)
	r := f.do("POST", "/api/v1/resources/office-writer-001/launch", nil, "Bearer "+tok)
	f.want(r, 503, site.ENoCapacity)
	if !strings.Contains(r.errorMessage(), "no available machine") || r.header.Get("Retry-After") == "" {
		t.Fatalf("no capacity answer: %s %v", r.body, r.header)
	}
}

func TestVDAAPI(t *testing.T) {
	f := newFixture(t)
	t.Run("wrong enrolment secret", func(t *testing.T) {
		r := f.do("POST", vdaproto.PathEnrol, vdaproto.EnrolRequest{Machine: "office-vda-01", Secret: "guess"}, "none")
		f.want(r, 401, site.EUnauthorized)
	})
	t.Run("unknown machine", func(t *testing.T) {
		r := f.do("POST", vdaproto.PathEnrol, vdaproto.EnrolRequest{Machine: "ghost", Secret: enrolmentSecret}, "none")
		f.want(r, 404, site.ENotFound)
	})
	cred := f.enrol("office-vda-01")
	reg := vdaproto.RegisterRequest{Machine: "office-vda-01", ControlURL: "http://vda.invalid", ControlToken: "control-token-0123456789"}
	t.Run("forged credential", func(t *testing.T) {
		f.want(f.do("POST", vdaproto.PathRegister, reg, "Bearer "+cred+"x"), 401, site.EUnauthorized)
		f.want(f.do("POST", vdaproto.PathRegister, reg, "none"), 401, site.EUnauthorized)
		user, _ := f.login("user0001", userPassword)
		f.want(f.do("POST", vdaproto.PathRegister, reg, "Bearer "+user), 401, site.EUnauthorized)
	})
	t.Run("credential of another machine", func(t *testing.T) {
		other := reg
		other.Machine = "office-vda-02"
		f.want(f.do("POST", vdaproto.PathRegister, other, "Bearer "+cred), 403, site.EForbidden)
	})
	t.Run("heartbeat before registering", func(t *testing.T) {
		f.want(f.do("POST", vdaproto.PathHeartbeat, vdaproto.Heartbeat{Machine: "office-vda-01"}, "Bearer "+cred), 409, vdaproto.CodeNotRegistered)
	})
	f.want(f.do("POST", vdaproto.PathRegister, reg, "Bearer "+cred), 200, "")
	r := f.do("POST", vdaproto.PathHeartbeat, vdaproto.Heartbeat{Machine: "office-vda-01", CPUPercent: 40, MemoryPercent: 50}, "Bearer "+cred)
	f.want(r, 200, "")
	t.Run("malformed", func(t *testing.T) {
		f.want(f.do("POST", vdaproto.PathHeartbeat, `{"machine":"office-vda-01","cpu_percent":"hot"}`, "Bearer "+cred), 400, site.EInvalid)
		f.want(f.do("POST", vdaproto.PathEvents, vdaproto.SessionEvent{Machine: "office-vda-01", SessionID: "nope", Event: "logon"}, "Bearer "+cred), 404, site.ENotFound)
	})
	var m site.MachineState
	json.Unmarshal(f.do("GET", "/api/v1/admin/machines/office-vda-01", nil).body, &m)
	if m.Registration != site.Registered || m.CPUPercent != 40 {
		t.Fatalf("machine after register and heartbeat: %+v", m)
	}
	if strings.Contains(string(f.do("GET", "/api/v1/admin/machines/office-vda-01", nil).body), "control-token") {
		t.Fatal("the control token leaks through the admin API")
	}

	t.Run("heartbeat of a machine deleted from the site", func(t *testing.T) {
		cred := f.enrol("office-vda-40")
		f.want(f.do("DELETE", "/api/v1/admin/machines/office-vda-40", nil), 204, "")
		if err := f.broker.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		f.want(f.do("POST", vdaproto.PathHeartbeat, vdaproto.Heartbeat{Machine: "office-vda-40"}, "Bearer "+cred), 401, site.EUnauthorized)
	})
}

// TestAdminLogsSessionOff: an admin logs off any user's session through
// the broker (the VDA hears of it), not only deletes its record; a user
// cannot.
func TestAdminLogsSessionOff(t *testing.T) {
	f := newFixture(t)
	f.registerAll()
	tok, _ := f.login("user0001", userPassword)
	r := f.do("POST", "/api/v1/resources/office-writer-001/launch", nil, "Bearer "+tok)
	f.want(r, 200, "")
	var l api.LaunchResponse
	json.Unmarshal(r.body, &l)
	f.want(f.do("POST", "/api/v1/admin/sessions/"+l.SessionID+"/logoff", nil, "Bearer "+tok), 401, site.EUnauthorized)
	f.want(f.do("POST", "/api/v1/admin/sessions/nonexistent/logoff", nil), 404, site.ENotFound)
	f.want(f.do("POST", "/api/v1/admin/sessions/"+l.SessionID+"/logoff", nil), 204, "")
	var ss api.SessionsResponse
	json.Unmarshal(f.do("GET", "/api/v1/sessions", nil, "Bearer "+tok).body, &ss)
	if len(ss.Sessions) != 0 {
		t.Fatalf("the user's sessions after an admin's logoff: %+v", ss.Sessions)
	}
	if got := f.control.Logoffs(); len(got) != 1 || got[0] != l.SessionID {
		t.Fatalf("the VDA was asked to log off %v, want [%s]", got, l.SessionID)
	}
}
