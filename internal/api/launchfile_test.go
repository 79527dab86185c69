package api

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
)

// rdpKeys and icaKeys are the settings the writers emit, per section for
// ICA; any other line in a launch file was injected.
var (
	rdpKeys = map[string]bool{"full address": true, "username": true, "loadbalanceinfo": true,
		"prompt for credentials": true, "authentication level": true, "remoteapplicationmode": true,
		"remoteapplicationname": true, "remoteapplicationprogram": true}
	icaKeys = map[string]bool{"InputEncoding": true, "Version": true, "Address": true, "InitialProgram": true,
		"LogonTicket": true, "Username": true, "Domain": true, "TransportDriver": true}
)

// checkLaunchFile fails when content has a line the writer did not mean
// to write: an unknown key, a second section for the application, a
// line break other than CRLF.
func checkLaunchFile(t *testing.T, lf launchFileExt) {
	t.Helper()
	content := lf.Content
	if !strings.HasSuffix(content, "\r\n") {
		t.Fatalf("%s does not end in CRLF: %q", lf.ext, content)
	}
	lines := strings.Split(strings.TrimSuffix(content, "\r\n"), "\r\n")
	for _, line := range lines {
		if strings.IndexFunc(line, lineBreaking) >= 0 {
			t.Fatalf("%s line %q holds a line break or control character", lf.ext, line)
		}
	}
	if lf.ext == "rdp" {
		for _, line := range lines {
			key, _, ok := strings.Cut(line, ":")
			if !ok || !rdpKeys[key] {
				t.Fatalf("injected .rdp line %q in:\n%s", line, content)
			}
		}
		return
	}
	var sections []string
	appServers := 0
	for _, line := range lines {
		switch {
		case line == "":
		case strings.HasPrefix(line, "["):
			if !strings.HasSuffix(line, "]") || strings.Count(line, "[") != 1 || strings.Count(line, "]") != 1 {
				t.Fatalf("bad .ica section header %q in:\n%s", line, content)
			}
			sections = append(sections, line)
		default:
			key, _, ok := strings.Cut(line, "=")
			if !ok || strings.HasPrefix(key, ";") {
				t.Fatalf("injected .ica line %q in:\n%s", line, content)
			}
			if sections[len(sections)-1] == "[ApplicationServers]" {
				appServers++
			} else if !icaKeys[key] {
				t.Fatalf("injected .ica key %q in:\n%s", key, content)
			}
		}
	}
	if len(sections) != 4 || appServers != 1 {
		t.Fatalf(".ica has sections %q and %d application servers:\n%s", sections, appServers, content)
	}
}

func TestLaunchFileRefusesInjection(t *testing.T) {
	const evil = "x\r\nalternate shell:s:calc\n[Evil]\rAddress=evil:1\u2028drivestoredirect:s:*\x85;c=1"
	res := &site.Resource{Kind: site.Application, Name: "app", DisplayName: evil}
	for _, proto := range []string{"rdp", "ica"} {
		lf := launchFile("DOM"+evil, "user"+evil, res, &broker.Launch{Protocol: proto, Ticket: "t" + evil}, "host"+evil, 3389)
		checkLaunchFile(t, lf)
		if strings.Contains(lf.Filename, "\n") || strings.Contains(lf.Filename, "\r") {
			t.Fatalf("file name %q", lf.Filename)
		}
	}
}

// FuzzLaunchFile: whatever the names, addresses and tickets, a launch
// file holds only the writer's own settings, one per CRLF-ended line.
func FuzzLaunchFile(f *testing.F) {
	f.Add("DEMO", "user0001", "Writer", "writer", "host.example", "ticket", true, false)
	f.Add("D", "u", "A\r\nalternate shell:s:calc", "a", "h\nx:s:y", "t\r", false, true)
	f.Add("D", "u", "[x]", "a=b", ";h", "\u2028", true, true)
	f.Fuzz(func(t *testing.T, domain, user, display, name, host, ticket string, app, ica bool) {
		kind := site.Desktop
		if app {
			kind = site.Application
		}
		proto := "rdp"
		if ica {
			proto = "ica"
		}
		lf := launchFile(domain, user, &site.Resource{Kind: kind, Name: name, DisplayName: display},
			&broker.Launch{Protocol: proto, Ticket: ticket}, host, 3389)
		checkLaunchFile(t, lf)
	})
}

// FuzzDecodeRequests: the JSON decoders of the login, launch and admin
// requests never panic, and every error is a clean API error: a 4xx JSON
// document with code invalid.
func FuzzDecodeRequests(f *testing.F) {
	f.Add([]byte(`{"username":"DEMO\\user0001","password":"pw"}`), "application/json")
	f.Add([]byte(`{"client_name":"laptop"}`), "application/json; charset=utf-8")
	f.Add([]byte(`{"name":"m1","catalog":"c1","address":"m1:3389","max_sessions":1e99}`), "application/json")
	f.Add([]byte(`{"name":"u","groups":[1]}{}`), "")
	f.Add([]byte(`[`), "text/plain")
	types := []reflect.Type{
		reflect.TypeFor[LoginRequest](), reflect.TypeFor[LaunchRequestBody](), reflect.TypeFor[AdminRequest](),
		reflect.TypeFor[UserRequest](), reflect.TypeFor[site.Machine](), reflect.TypeFor[site.Resource](),
		reflect.TypeFor[site.DeliveryGroup](), reflect.TypeFor[site.Entitlement](), reflect.TypeFor[site.Settings](),
	}
	s := &Server{log: slog.New(slog.DiscardHandler)}
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		for _, typ := range types {
			r := httptest.NewRequest("POST", "/api/v1/x", strings.NewReader(string(body)))
			r.Header.Set("Content-Type", contentType)
			w := httptest.NewRecorder()
			r.Body = http.MaxBytesReader(w, r.Body, 1<<10)
			err := decodeJSON(r, reflect.New(typ).Interface())
			if err == nil {
				continue
			}
			var he *httpError
			var tooBig *http.MaxBytesError
			if !errors.As(err, &he) && !errors.As(err, &tooBig) && site.ErrorCode(err) != site.EInvalid {
				t.Fatalf("%s: error %v is not an API error (code %q)", typ, err, site.ErrorCode(err))
			}
			s.writeError(w, r, err)
			if w.Code < 400 || w.Code > 499 || w.Header().Get("Content-Type") != "application/json" ||
				!strings.Contains(w.Body.String(), `"code": "invalid"`) {
				t.Fatalf("%s: error %v answered %d %s", typ, err, w.Code, w.Body)
			}
		}
	})
}
