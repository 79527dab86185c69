package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/usher-vdi/usher/internal/ctx1"
)

func TestParseUsers(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Users
	}{
		{"colon lines", "# comment\nalice:pa:ss\n\nDEMO\\bob:secret\r\n", Users{{User: "alice", Password: "pa:ss"}, {User: "bob", Password: "secret", Domain: "DEMO"}}},
		{"csv", "domain,username,password\nDEMO,alice,\"a,b\"\n,bob,x\n", Users{{User: "alice", Password: "a,b", Domain: "DEMO"}, {User: "bob", Password: "x"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseUsers(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	for _, bad := range []string{"", "no-colon\n", "user,password\n", "user,password\n,x\n"} {
		if _, err := ParseUsers(strings.NewReader(bad)); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
	if got := (Users{{User: "a"}, {User: "b"}}).At(3).User; got != "b" {
		t.Errorf("At(3) = %s", got)
	}
}

func TestTemplate(t *testing.T) {
	tp := ParseTemplate(`<U>{{user}}</U><P e="{{ encoding }}">{{password}}</P>{{domain}}/{{app}}/{{i}}/{{other}}`)
	got := tp.Expand(Vars{Cred: Credential{User: "a&b", Password: "a", Domain: "D"}, Encoding: Ctx1, App: "x", I: 7}, xmlEscape)
	if want := `<U>a&amp;b</U><P e="ctx1">MEGB</P>D/x/7/{{other}}`; got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
}

func TestCredentialTemplateOfSeed004Body(t *testing.T) {
	seed := `<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE NFuseProtocol SYSTEM "NFuse.dtd"><NFuseProtocol version="5.4"><RequestAppData><Scope traverse="subtree"></Scope><DesiredDetails>permissions</DesiredDetails><ServerType>all</ServerType><ClientType>ica30</ClientType><ClientType>content</ClientType><Credentials><UserName>adtest90</UserName><Password encoding="ctx1">PASSWORDLOL</Password><Domain type="NT">HEALTHY</Domain></Credentials><ClientName>LOADTESTER</ClientName><ClientAddress addresstype="dot">10.10.10.10</ClientAddress></RequestAppData></NFuseProtocol>`
	if got := CredentialTemplate(seed); got != AppDataRequest {
		t.Errorf("got %s\nwant %s", got, AppDataRequest)
	}
}

// nfuseStub answers RequestAppData like a broker: an ErrorId for a wrong
// ctx1 password, retry-required now and then, and apps otherwise.
func nfuseStub(t *testing.T) (*httptest.Server, *[]string) {
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/xml")
		head := `<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE NFuseProtocol SYSTEM "NFuse.dtd"><NFuseProtocol version="5.9">`
		switch {
		case r.Header.Get("Content-Type") != "text/xml":
			w.WriteHeader(415)
		case strings.Contains(string(b), "<UserName>busy</UserName>"):
			fmt.Fprint(w, head+`<ResponseAppData><ErrorId>retry-required</ErrorId></ResponseAppData></NFuseProtocol>`)
		case strings.Contains(string(b), "<UserName>cut</UserName>"):
			fmt.Fprint(w, head+`<ResponseAppData><LeasingStatus>working</LeasingStatus>`)
		case !strings.Contains(string(b), `<Password encoding="ctx1">`+ctx1.Encode("secret")+`</Password>`):
			fmt.Fprint(w, head+`<ResponseAppData><ErrorId>failed-credentials</ErrorId></ResponseAppData></NFuseProtocol>`)
		default:
			fmt.Fprint(w, head+`<ResponseAppData><LeasingStatus>working</LeasingStatus><AppDataSet><AppData><InName>a</InName></AppData></AppDataSet></ResponseAppData></NFuseProtocol>`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &bodies
}

func TestNFuseTarget(t *testing.T) {
	srv, bodies := nfuseStub(t)
	users := Users{{User: "alice", Password: "secret", Domain: "DEMO"}, {User: "bob", Password: "wrong"},
		{User: "busy", Password: "secret"}, {User: "cut", Password: "secret"}}
	n := &NFuse{URL: srv.URL + "/scripts/wpnbr.dll", Users: users}
	var kinds []string
	for i := range int64(4) {
		kinds = append(kinds, KindOf(n.Do(context.Background(), i)))
	}
	if want := []string{"", "nfuse-failed-credentials", "nfuse-retry-required", KindMismatch}; fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Errorf("kinds %q, want %q", kinds, want)
	}
	if !strings.Contains((*bodies)[0], `<UserName>alice</UserName><Password encoding="ctx1">`+ctx1.Encode("secret")+`</Password><Domain type="NT">DEMO</Domain>`) {
		t.Errorf("request body: %s", (*bodies)[0])
	}
	if err := (&NFuse{URL: srv.URL}).Check(); err == nil {
		t.Error("credential placeholders without users were accepted")
	}
	if err := (&NFuse{URL: srv.URL, Body: AddressRequest, Users: users}).Check(); err == nil {
		t.Error("an {{app}} placeholder without applications was accepted")
	}
	// Unreachable: a transport error.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	if k := KindOf((&NFuse{URL: dead.URL, Users: users}).Do(context.Background(), 0)); k != KindTransport {
		t.Errorf("kind of a refused connection: %q", k)
	}
	// A certificate the client does not trust: a certificate error; one it
	// trusts (NewClientTLS): answered.
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "<NFuseProtocol><ResponseAppData></ResponseAppData></NFuseProtocol>")
	}))
	defer tlsSrv.Close()
	if k := KindOf((&NFuse{Client: NewClient(1), URL: tlsSrv.URL, Users: users}).Do(context.Background(), 0)); k != KindTLS {
		t.Errorf("kind of an untrusted certificate: %q", k)
	}
	trusting := NewClientTLS(1, tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig)
	if err := (&NFuse{Client: trusting, URL: tlsSrv.URL, Users: users}).Do(context.Background(), 0); err != nil {
		t.Errorf("a client trusting the certificate: %v", err)
	}
}

func TestRequestTarget(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "%s %s %s %s", r.Method, r.URL.Path, r.Header.Get("X-Test"), b)
	}))
	defer srv.Close()
	users := Users{{User: "alice", Password: "pw"}}
	for _, tc := range []struct {
		name string
		req  *Request
		kind string
	}{
		{"ok", &Request{Method: "PUT", URL: srv.URL + "/u/{{user}}", Header: http.Header{"X-Test": {"1"}}, Body: "{{password}}-{{i}}", Users: users,
			BodyContains: "PUT /u/alice 1 pw-0"}, ""},
		{"status", &Request{URL: srv.URL + "/missing"}, "http-404"},
		{"expected status", &Request{URL: srv.URL + "/missing", Status: []int{404}}, ""},
		{"contains", &Request{URL: srv.URL + "/x", BodyContains: "nope"}, KindMismatch},
		{"match", &Request{URL: srv.URL + "/x", BodyMatch: regexp.MustCompile(`^GET /x`)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if k := KindOf(tc.req.Do(context.Background(), 0)); k != tc.kind {
				t.Errorf("kind %q, want %q", k, tc.kind)
			}
		})
	}
}

// restStub is a small fake of usher's user API.
func restStub(t *testing.T) (*httptest.Server, *sync.Map) {
	var live sync.Map // session → user
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/login", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Username, Password string }
		if r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&req) != nil || req.Password != "pw" {
			w.WriteHeader(401)
			fmt.Fprint(w, `{"error":{"code":"unauthorized"}}`)
			return
		}
		json.NewEncoder(w).Encode(map[string]string{"token": "t-" + req.Username})
	})
	user := func(r *http.Request) string { return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer t-") }
	mux.HandleFunc("GET /api/v1/resources", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"resources":[{"name":"writer"},{"name":"mail"}],"folders":[]}`)
	})
	var n int64
	var mu sync.Mutex
	mux.HandleFunc("POST /api/v1/resources/{name}/launch", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		id := fmt.Sprintf("s%d-%s", n, r.PathValue("name"))
		mu.Unlock()
		live.Store(id, user(r))
		json.NewEncoder(w).Encode(map[string]string{"session_id": id})
	})
	mux.HandleFunc("POST /api/v1/sessions/{id}/logoff", func(w http.ResponseWriter, r *http.Request) {
		if u, ok := live.LoadAndDelete(r.PathValue("id")); !ok || u != user(r) {
			w.WriteHeader(404)
			return
		}
		w.WriteHeader(204)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, &live
}

func TestRESTFlow(t *testing.T) {
	srv, live := restStub(t)
	users := Users{{User: "alice", Password: "pw", Domain: "DEMO"}, {User: "bob", Password: "pw"}, {User: "eve", Password: "bad"}}
	count := func() int {
		n := 0
		live.Range(func(any, any) bool { n++; return true })
		return n
	}
	t.Run("full flow", func(t *testing.T) {
		r := &REST{BaseURL: srv.URL, Users: users, Flow: []string{StepLogin, StepEnumerate, StepLaunch, StepLogoff}}
		if err := r.Check(); err != nil {
			t.Fatal(err)
		}
		res, err := FixedWork{Concurrency: []int{2}, Requests: 6}.Run(context.Background(), r, Options{})
		if err != nil {
			t.Fatal(err)
		}
		s := res.Steps[0]
		if s.OK != 4 || s.ErrorsByKind["http-401"] != 2 {
			t.Errorf("ok %d, errors %v", s.OK, s.ErrorsByKind)
		}
		for _, p := range []string{StepLogin, StepEnumerate, StepLaunch, StepLogoff} {
			if s.Phases[p].Count == 0 {
				t.Errorf("phase %s not measured: %v", p, s.Phases)
			}
		}
		if count() != 0 {
			t.Errorf("%d sessions left", count())
		}
	})
	t.Run("launch with tokens logged on before", func(t *testing.T) {
		r := &REST{BaseURL: srv.URL, Users: users[:2], Flow: []string{StepLaunch}, Resources: []string{"mail"}}
		if err := r.LogOn(context.Background(), 2); err != nil {
			t.Fatal(err)
		}
		res, err := FixedWork{Concurrency: []int{2}, Requests: 4}.Run(context.Background(), r, Options{})
		if err != nil || res.Steps[0].OK != 4 {
			t.Fatalf("err %v, %+v", err, res.Steps[0])
		}
		if count() != 4 || r.Sessions() != 4 {
			t.Fatalf("%d sessions live, %d remembered, want 4", count(), r.Sessions())
		}
		n, err := r.LogoffAll(context.Background(), 3)
		if err != nil || n != 4 || count() != 0 {
			t.Errorf("logged off %d (err %v), %d left", n, err, count())
		}
	})
	for _, flow := range []string{"launch", "login,logoff", "login,dance"} {
		f, err := ParseFlow(flow)
		if err == nil {
			err = (&REST{BaseURL: srv.URL, Users: users, Flow: f}).Check()
		}
		if err == nil {
			t.Errorf("flow %q was accepted", flow)
		}
	}
}

func TestNFuseLaunchTarget(t *testing.T) {
	var mu sync.Mutex
	var apps []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		app := regexp.MustCompile(`<AppName>([^<]*)</AppName>`).FindSubmatch(b)
		mu.Lock()
		apps = append(apps, string(app[1]))
		mu.Unlock()
		inner := `<ServerAddress addresstype="dot-port">10.1.2.14:1494</ServerAddress><TicketTag>ABC</TicketTag>`
		if string(app[1]) == "full" {
			inner = `<ErrorId>no-available-workstation</ErrorId>`
		}
		fmt.Fprintf(w, `<?xml version="1.0"?><NFuseProtocol version="5.9"><ResponseAddress>%s</ResponseAddress></NFuseProtocol>`, inner)
	}))
	defer srv.Close()
	n := &NFuse{URL: srv.URL, Body: AddressRequest, Users: Users{{User: "u", Password: "p"}}, Apps: []string{"writer", "R&D <tool>", "full"},
		Expect: "<TicketTag>"}
	var kinds []string
	for i := range int64(3) {
		kinds = append(kinds, KindOf(n.Do(context.Background(), i)))
	}
	if want := []string{"", "", "nfuse-no-available-workstation"}; fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Errorf("kinds %q, want %q", kinds, want)
	}
	if want := []string{"writer", "R&amp;D &lt;tool&gt;", "full"}; fmt.Sprint(apps) != fmt.Sprint(want) {
		t.Errorf("applications sent %q, want %q", apps, want)
	}
}
