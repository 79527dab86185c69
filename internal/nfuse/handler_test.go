package nfuse_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/xml"
	"errors"
	"fmt"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/ctx1"
	"github.com/usher-vdi/usher/internal/memnet"
	"github.com/usher-vdi/usher/internal/nfuse"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// seed004For is the IMA/FMA test's body with a user's ctx1 password and domain.
func seed004For(user, password, domain string) string {
	r := strings.NewReplacer("adtest90", user, "PASSWORDLOL", ctx1.Encode(password), "HEALTHY", domain)
	return r.Replace(seed004)
}

// mustWellFormed fails unless s is well-formed XML (as encoding/xml, a
// strict parser, reads it).
func mustWellFormed(t testing.TB, s string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(s))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("answer is not well-formed: %v\n%.400s", err, s)
		}
	}
}

// appNames returns the FName of every AppData of an answer, and how many
// are desktops.
func appNames(t testing.TB, body string) (names []string, desktops int) {
	t.Helper()
	var doc struct {
		AppData []struct {
			FName    string `xml:"FName"`
			Settings struct {
				Desktop string `xml:"appisdesktop,attr"`
			} `xml:"Details>Settings"`
		} `xml:"ResponseAppData>AppDataSet>AppData"`
	}
	if err := xml.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	for _, a := range doc.AppData {
		names = append(names, a.FName)
		if a.Settings.Desktop == "true" {
			desktops++
		}
	}
	return names, desktops
}

func TestSeed004(t *testing.T) {
	t.Parallel()
	f := newFixture(t, options{})
	t.Run("valid ctx1 password lists the user's 400 applications", func(t *testing.T) {
		a := f.post(seed004For(financeUser, userPassword, "DEMO"))
		wantAnswer(t, a, "ResponseAppData", "")
		names, desktops := appNames(t, a.body)
		if got, want := len(names)-desktops, 400; got != want {
			t.Fatalf("%d applications, want %d", got, want)
		}
		if desktops != 1 {
			t.Fatalf("%d desktops, want 1 (Office Desktop)", desktops)
		}
		t.Logf("answer: %d bytes for %d resources", len(a.body), len(names))
	})
	t.Run("PASSWORDLOL is failed-credentials", func(t *testing.T) {
		wantAnswer(t, f.post(seed004), "ResponseAppData", "failed-credentials")
	})
	t.Run("the seed's other domain is failed-credentials", func(t *testing.T) {
		wantAnswer(t, f.post(seed004For(financeUser, userPassword, "HEALTHY")), "ResponseAppData", "failed-credentials")
	})
}

func TestCredentials(t *testing.T) {
	t.Parallel()
	f := newFixture(t, options{brokerConfig: func(c *broker.Config) { c.LockoutThreshold = -1 }})
	validate := func(creds string) answer {
		return f.post(request(`<RequestValidateCredentials>` + creds + `</RequestValidateCredentials>`))
	}
	cleartext := func(user, password, domain string) string {
		d := ""
		if domain != "" {
			d = `<Domain type="NT">` + domain + `</Domain>`
		}
		return `<Credentials><UserName>` + user + `</UserName><Password encoding="cleartext">` + password + `</Password>` + d + `</Credentials>`
	}
	for _, tc := range []struct {
		name, creds, errorID string
	}{
		{"plain user name, cleartext", cleartext(financeUser, userPassword, ""), ""},
		{"Domain element, ctx1", credentials(financeUser, userPassword, "DEMO"), ""},
		{"DOMAIN\\user", cleartext(`DEMO\`+financeUser, userPassword, ""), ""},
		{"user@domain", cleartext(financeUser+"@DEMO", userPassword, ""), ""},
		{"domain in another case", cleartext(financeUser, userPassword, "demo"), ""},
		{"no password encoding given", `<Credentials><UserName>` + financeUser + `</UserName><Password>` + userPassword + `</Password></Credentials>`, ""},
		{"wrong password", cleartext(financeUser, "wrong", "DEMO"), "failed-credentials"},
		{"unknown user", cleartext("nobody", userPassword, "DEMO"), "failed-credentials"},
		{"another domain element", cleartext(financeUser, userPassword, "HEALTHY"), "failed-credentials"},
		{"another domain in DOMAIN\\user", cleartext(`HEALTHY\`+financeUser, userPassword, ""), "failed-credentials"},
		{"another domain in user@domain", cleartext(financeUser+"@healthy.example", userPassword, ""), "failed-credentials"},
		{"domains that disagree", cleartext(`DEMO\`+financeUser, userPassword, "HEALTHY"), "failed-credentials"},
		{"empty password", cleartext(financeUser, "", "DEMO"), "failed-credentials"},
		{"invalid ctx1", `<Credentials><UserName>` + financeUser + `</UserName><Password encoding="ctx1">PASSWORDLOL</Password></Credentials>`, "failed-credentials"},
		{"unknown encoding", `<Credentials><UserName>` + financeUser + `</UserName><Password encoding="rot13">x</Password></Credentials>`, "failed-credentials"},
		{"no credentials", ``, "failed-credentials"},
		{"anonymous", `<Credentials><AnonymousUser/></Credentials>`, "failed-credentials"},
		{"trusted IDs on an untrusting site", `<Credentials><ID type="SAM">DEMO\` + financeUser + `</ID></Credentials>`, "failed-credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantAnswer(t, validate(tc.creds), "ResponseValidateCredentials", tc.errorID)
		})
	}
	t.Run("a success is an empty response", func(t *testing.T) {
		a := validate(cleartext(financeUser, userPassword, ""))
		if !strings.Contains(a.body, "<ResponseValidateCredentials></ResponseValidateCredentials>") {
			t.Fatalf("not empty: %s", a.body)
		}
	})
}

func TestUserIdentity(t *testing.T) {
	t.Parallel()
	f := newFixture(t, options{})
	a := f.post(request(`<RequestValidateCredentials>` + credentials(financeUser, userPassword, "DEMO") + `<DesiredInfo>user-identity</DesiredInfo></RequestValidateCredentials>`))
	wantAnswer(t, a, "ResponseValidateCredentials", "")
	ids := identities(t, a.body)
	if ids["SAM"] != `DEMO\`+financeUser || ids["UPN"] != financeUser+"@DEMO" || !strings.HasPrefix(ids["SID"], "S-1-5-21-") {
		t.Fatalf("identities %v", ids)
	}
	other := identities(t, f.post(request(`<RequestValidateCredentials>`+credentials("user0251", userPassword, "DEMO")+`<DesiredInfo>user-identity</DesiredInfo></RequestValidateCredentials>`)).body)
	if other["SID"] == ids["SID"] {
		t.Fatalf("two users share the SID %s", ids["SID"])
	}
	again := identities(t, a.body)
	if again["SID"] != ids["SID"] {
		t.Fatal("SID is not deterministic")
	}
}

// identities returns the UserIdentityInfo IDs of an answer by type.
func identities(t testing.TB, body string) map[string]string {
	t.Helper()
	var doc struct {
		IDs []struct {
			Type  string `xml:"type,attr"`
			Value string `xml:",chardata"`
		} `xml:"ResponseValidateCredentials>UserIdentityInfo>ID"`
	}
	if err := xml.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, id := range doc.IDs {
		ids[id.Type] = id.Value
	}
	return ids
}

func TestTrustedCredentials(t *testing.T) {
	t.Parallel()
	f := newFixture(t, options{settings: func(s *site.Settings) { s.TrustXMLRequests = true }})
	sid := identities(t, f.post(request(`<RequestValidateCredentials>`+credentials(financeUser, userPassword, "DEMO")+`<DesiredInfo>user-identity</DesiredInfo></RequestValidateCredentials>`)).body)["SID"]
	disable(t, f, "user0300")
	for _, tc := range []struct {
		name, ids, errorID string
	}{
		{"SAM", `<ID type="SAM">DEMO\` + financeUser + `</ID>`, ""},
		{"UPN", `<ID type="UPN">` + financeUser + `@DEMO</ID>`, ""},
		{"SAM, UPN and SID", `<ID type="SAM">DEMO\` + financeUser + `</ID><ID type="UPN">` + financeUser + `@demo</ID><ID type="SID">` + sid + `</ID>`, ""},
		{"another user's SID", `<ID type="SAM">DEMO\user0251</ID><ID type="SID">` + sid + `</ID>`, "failed-credentials"},
		{"SID alone", `<ID type="SID">` + sid + `</ID>`, "failed-credentials"},
		{"SAM and UPN that disagree", `<ID type="SAM">DEMO\` + financeUser + `</ID><ID type="UPN">user0251@DEMO</ID>`, "failed-credentials"},
		{"another domain", `<ID type="SAM">HEALTHY\` + financeUser + `</ID>`, "failed-credentials"},
		{"unknown user", `<ID type="SAM">DEMO\nobody</ID>`, "failed-credentials"},
		{"disabled user", `<ID type="SAM">DEMO\user0300</ID>`, "account-disabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := f.post(request(`<RequestAppData><Scope traverse="subtree"/>` + `<Credentials>` + tc.ids + `</Credentials></RequestAppData>`))
			wantAnswer(t, a, "ResponseAppData", tc.errorID)
			if names, _ := appNames(t, a.body); tc.errorID == "" && len(names) != 401 {
				t.Fatalf("%d resources, want 401", len(names))
			}
		})
	}
}

// disable disables a user in the site DB and refreshes the broker.
func disable(t testing.TB, f *fixture, name string) {
	t.Helper()
	ctx := context.Background()
	err := f.store.Update(ctx, func(tx site.Tx) error {
		u, err := tx.Users().Get(ctx, name)
		if err != nil {
			return err
		}
		u.Disabled = true
		return tx.Users().Update(ctx, u)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.broker.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestAccountDisabled(t *testing.T) {
	t.Parallel()
	f := newFixture(t, options{})
	disable(t, f, financeUser)
	wantAnswer(t, f.post(seed004For(financeUser, userPassword, "DEMO")), "ResponseAppData", "account-disabled")
	wantAnswer(t, f.post(seed004For(financeUser, "wrong", "DEMO")), "ResponseAppData", "failed-credentials")
}

func TestLockout(t *testing.T) {
	t.Parallel()
	f := newFixture(t, options{brokerConfig: func(c *broker.Config) { c.LockoutThreshold = 3 }})
	for range 3 {
		wantAnswer(t, f.post(seed004For(financeUser, "wrong", "DEMO")), "ResponseAppData", "failed-credentials")
	}
	// A locked account answers as an unknown one does.
	wantAnswer(t, f.post(seed004For(financeUser, userPassword, "DEMO")), "ResponseAppData", "failed-credentials")
	wantAnswer(t, f.post(request(`<RequestValidateCredentials>`+credentials(financeUser, userPassword, "DEMO")+`</RequestValidateCredentials>`)), "ResponseValidateCredentials", "failed-credentials")
	wantAnswer(t, f.post(seed004For("user0251", userPassword, "DEMO")), "ResponseAppData", "")
}

func TestRetryRequired(t *testing.T) {
	t.Parallel()
	f := newFixture(t, options{brokerConfig: func(c *broker.Config) { c.MaxConcurrent = 1 }})
	release, err := f.broker.Admit()
	if err != nil {
		t.Fatal(err)
	}
	wantAnswer(t, f.post(seed004For(financeUser, userPassword, "DEMO")), "ResponseAppData", "retry-required")
	wantAnswer(t, f.post(request(`<RequestAddress><Name><AppName>office-writer-001</AppName></Name>`+credentials(financeUser, userPassword, "DEMO")+`</RequestAddress>`)), "ResponseAddress", "retry-required")
	wantAnswer(t, f.post(request(`<RequestValidateCredentials>`+credentials(financeUser, userPassword, "DEMO")+`</RequestValidateCredentials>`)), "ResponseValidateCredentials", "retry-required")
	// Requests that neither authenticate nor broker are answered.
	wantAnswer(t, f.post(request(`<RequestServerFarmData/>`)), "ResponseServerFarmData", "")
	wantAnswer(t, f.post(request(`<RequestCapabilities/>`)), "ResponseCapabilities", "")
	release()
	wantAnswer(t, f.post(seed004For(financeUser, userPassword, "DEMO")), "ResponseAppData", "")
}

func TestAnonymousAppData(t *testing.T) {
	t.Parallel()
	anonymous := request(`<RequestAppData><Scope traverse="onelevel"/><DesiredDetails>all</DesiredDetails><DesiredDetails>access-list</DesiredDetails><ServerType>all</ServerType><ClientType>ica30</ClientType></RequestAppData>`)
	t.Run("off by default: no list", func(t *testing.T) {
		f := newFixture(t, options{})
		a := f.post(anonymous)
		wantAnswer(t, a, "ResponseAppData", "failed-credentials")
		if strings.Contains(a.body, "<AppData>") || strings.Contains(a.body, "Writer") {
			t.Fatalf("the answer leaks applications: %.400s", a.body)
		}
		wantAnswer(t, f.post(request(`<RequestAppData><Credentials><AnonymousUser/></Credentials></RequestAppData>`)), "ResponseAppData", "failed-credentials")
	})
	t.Run("on: every enabled resource with its access list", func(t *testing.T) {
		f := newFixture(t, options{settings: func(s *site.Settings) { s.AnonymousAppData = true }})
		a := f.post(anonymous)
		wantAnswer(t, a, "ResponseAppData", "")
		names, desktops := appNames(t, a.body)
		if len(names) != 403 || desktops != 3 {
			t.Fatalf("%d resources and %d desktops, want 403 and 3", len(names), desktops)
		}
		if n := strings.Count(a.body, "<AccessList><Group><GroupName>domain-users</GroupName><Domain>DEMO</Domain></Group></AccessList>"); n != 401 {
			t.Fatalf("%d domain-users access lists, want 401", n)
		}
		if !strings.Contains(a.body, "<AccessList><Group><GroupName>engineering</GroupName><Domain>DEMO</Domain></Group></AccessList>") {
			t.Fatal("no access list of the engineering desktops")
		}
		// Wrong credentials are still wrong.
		wantAnswer(t, f.post(seed004For(financeUser, "wrong", "DEMO")), "ResponseAppData", "failed-credentials")
	})
}

func TestAppDataOptions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, options{})
	creds := credentials(financeUser, userPassword, "DEMO")
	list := func(inner string) []string {
		t.Helper()
		a := f.post(request(`<RequestAppData>` + inner + creds + `</RequestAppData>`))
		wantAnswer(t, a, "ResponseAppData", "")
		names, _ := appNames(t, a.body)
		return names
	}
	for _, tc := range []struct {
		name, inner string
		want        int
	}{
		{"no scope", ``, 401},
		{"root, one level", `<Scope traverse="onelevel"/>`, 401},
		{"root, subtree", `<Scope traverse="subtree"/>`, 401},
		{"a folder, one level", `<Scope traverse="onelevel">Office</Scope>`, 60},
		{"a folder, subtree", `<Scope traverse="subtree">Office</Scope>`, 130},
		{"a folder in Windows form", `<Scope traverse="subtree" type="PNFolder">\office\</Scope>`, 130},
		{"a subfolder", `<Scope traverse="onelevel">Office/Tools</Scope>`, 40},
		{"no such folder", `<Scope traverse="subtree">Nowhere</Scope>`, 0},
		{"a prefix that is no folder", `<Scope traverse="subtree">Off</Scope>`, 0},
		{"an application", `<AppName>office-writer-001</AppName>`, 1},
		{"an application in another case", `<AppName>OFFICE-WRITER-001</AppName>`, 1},
		{"an application the user may not use", `<AppName>Pooled Linux Desktop</AppName>`, 0},
		{"server type x", `<ServerType>x</ServerType>`, 0},
		{"server type win32", `<ServerType>win32</ServerType>`, 401},
		{"client type content only", `<ClientType>content</ClientType>`, 0},
		{"client type all", `<ClientType>all</ClientType>`, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := list(tc.inner); len(got) != tc.want {
				t.Fatalf("%d resources, want %d", len(got), tc.want)
			}
		})
	}
	t.Run("details", func(t *testing.T) {
		body := func(details ...string) string {
			var d string
			for _, x := range details {
				d += "<DesiredDetails>" + x + "</DesiredDetails>"
			}
			a := f.post(request(`<RequestAppData><AppName>office-writer-001</AppName>` + d + creds + `</RequestAppData>`))
			wantAnswer(t, a, "ResponseAppData", "")
			return a.body
		}
		for _, tc := range []struct {
			details       []string
			want, without []string
		}{
			{nil, []string{"<Settings ", "<Description>", "<PublisherName>usher demo</PublisherName>"}, []string{"<AccessList>", "<IconInfo>", "<Icon>"}},
			{[]string{"permissions"}, []string{`<Settings appisdisabled="false" appisdesktop="false"><Folder>Office</Folder></Settings>`}, []string{"<Description>", "<AccessList>"}},
			{[]string{"access-list"}, []string{"<AccessList>"}, []string{"<Details>"}},
			{[]string{"icon-info"}, []string{`<IconInfo><IconType size="16" bpp="32" format="png"/>`}, []string{"<Settings"}},
			{[]string{"icon"}, []string{"<Icon>AAABAAEAICAAAAEAIA"}, []string{"<Settings"}},
			{[]string{"file-type", "rade-offline-mode"}, []string{"<InName>office-writer-001</InName>"}, []string{"<Details>"}},
			{[]string{"all"}, []string{"<Settings ", "<AccessList>", "<IconInfo>", "<Icon>"}, nil},
		} {
			b := body(tc.details...)
			for _, w := range tc.want {
				if !strings.Contains(b, w) {
					t.Errorf("%v: no %q in %s", tc.details, w, b)
				}
			}
			for _, w := range tc.without {
				if strings.Contains(b, w) {
					t.Errorf("%v: %q in %s", tc.details, w, b)
				}
			}
		}
	})
	t.Run("icon data", func(t *testing.T) {
		for _, tc := range []struct {
			spec   string
			size   int
			format string
		}{
			{`size="48" bpp="32" format="png"`, 48, "png"},
			{`size="16" bpp="4" format="raw"`, 16, "raw"},
			{`size="40"`, 48, "png"},
			{``, 32, "png"},
		} {
			a := f.post(request(`<RequestAppData><AppName>office-writer-001</AppName><DesiredDetails>icon</DesiredDetails><DesiredIconData ` + tc.spec + `/>` + creds + `</RequestAppData>`))
			wantAnswer(t, a, "ResponseAppData", "")
			var doc struct {
				Icon struct {
					Size   int    `xml:"size,attr"`
					Format string `xml:"format,attr"`
					Data   string `xml:",chardata"`
				} `xml:"ResponseAppData>AppDataSet>AppData>Details>IconData"`
			}
			if err := xml.Unmarshal([]byte(a.body), &doc); err != nil {
				t.Fatal(err)
			}
			raw, err := base64.StdEncoding.DecodeString(doc.Icon.Data)
			if err != nil {
				t.Fatal(err)
			}
			if doc.Icon.Format != tc.format || doc.Icon.Size != tc.size {
				t.Fatalf("%s: icon %d %s, want %d %s", tc.spec, doc.Icon.Size, doc.Icon.Format, tc.size, tc.format)
			}
			if tc.format == "raw" {
				if !bytes.HasPrefix(raw, []byte{0, 0, 1, 0, 1, 0}) {
					t.Fatalf("raw icon is no ICO: % x", raw[:8])
				}
				raw = raw[22:]
			}
			img, err := png.Decode(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			if b := img.Bounds(); b.Dx() != tc.size || b.Dy() != tc.size {
				t.Fatalf("%s: a %v image", tc.spec, b)
			}
		}
	})
	t.Run("repeated enumerations are the same bytes", func(t *testing.T) {
		a, b := f.post(seed004For(financeUser, userPassword, "DEMO")), f.post(seed004For("user0251", userPassword, "DEMO"))
		if a.body != b.body {
			t.Fatal("two users with the same entitlements got different answers")
		}
	})
}

func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	f := newFixture(t, options{handlerConfig: func(c *nfuse.Config) { c.MaxBodyBytes = 4096 }})
	for _, tc := range []struct {
		name, body, response string
	}{
		{"empty body", "", "Response"},
		{"not XML", "GET / HTTP/1.0", "Response"},
		{"truncated", seed004[:200], "ResponseAppData"},
		{"mismatched tags", `<NFuseProtocol><RequestAddress></RequestAppData></NFuseProtocol>`, "ResponseAddress"},
		{"no request", `<NFuseProtocol/>`, "Response"},
		{"unknown request type", `<NFuseProtocol><RequestFrobnicate/></NFuseProtocol>`, "ResponseFrobnicate"},
		{"unknown request type with an odd name", `<NFuseProtocol><Request-x.y/></NFuseProtocol>`, "Response"},
		// An announced length over the limit is refused unread.
		{"over the body limit", strings.Replace(seed004, "LOADTESTER", strings.Repeat("X", 5000), 1), "Response"},
		{"too deep", request(`<RequestAppData>` + strings.Repeat("<a>", 100) + strings.Repeat("</a>", 100) + `</RequestAppData>`), "ResponseAppData"},
		{"unsupported encoding", `<?xml version="1.0" encoding="koi8-r"?><NFuseProtocol><RequestAppData/></NFuseProtocol>`, "ResponseAppData"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := f.post(tc.body)
			wantAnswer(t, a, tc.response, "unspecified")
			if tc.response == "ResponseAppData" && !strings.Contains(a.body, "<LeasingStatus>working</LeasingStatus>") {
				t.Fatalf("no LeasingStatus: %s", a.body)
			}
		})
	}
}

func TestHTTP(t *testing.T) {
	t.Parallel()
	f := newFixture(t, options{handlerConfig: func(c *nfuse.Config) { c.MaxBodyBytes = 4096 }})
	srv := httptest.NewServer(f.handler)
	t.Cleanup(srv.Close)
	post := func(path string, body io.Reader, header ...string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest("POST", srv.URL+path, body)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp, string(raw)
	}
	t.Run("the path in any case", func(t *testing.T) {
		for _, p := range []string{"/scripts/wpnbr.dll", "/scripts/WPnBr.dll", "/SCRIPTS/WPNBR.DLL"} {
			resp, body := post(p, strings.NewReader(request(`<RequestServerFarmData/>`)))
			if resp.StatusCode != 200 || !strings.Contains(body, "<ServerFarmName>usher demo</ServerFarmName>") {
				t.Fatalf("%s: %d %s", p, resp.StatusCode, body)
			}
		}
	})
	t.Run("other paths are not found", func(t *testing.T) {
		if resp, _ := post("/scripts/other.dll", strings.NewReader("")); resp.StatusCode != 404 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("only POST", func(t *testing.T) {
		resp, err := srv.Client().Get(srv.URL + nfuse.Path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
			t.Fatalf("status %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
		}
	})
	t.Run("Expect: 100-continue", func(t *testing.T) {
		resp, body := post(nfuse.Path, strings.NewReader(seed004For(financeUser, userPassword, "DEMO")), "Expect", "100-continue", "Content-Type", "text/xml")
		if resp.StatusCode != 200 || strings.Count(body, "<AppData>") != 401 {
			t.Fatalf("%d, %d AppData", resp.StatusCode, strings.Count(body, "<AppData>"))
		}
		if resp.ContentLength != int64(len(body)) {
			t.Fatalf("Content-Length %d for %d bytes", resp.ContentLength, len(body))
		}
	})
	t.Run("an oversize chunked body", func(t *testing.T) {
		big := io.MultiReader(strings.NewReader(`<NFuseProtocol><RequestAppData><ClientName>`), strings.NewReader(strings.Repeat("x", 1<<20)))
		resp, body := post(nfuse.Path, big)
		if resp.StatusCode != 200 || !strings.Contains(body, "<ResponseAppData><ErrorId>unspecified</ErrorId>") {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	})
	t.Run("an oversize announced body is refused unread", func(t *testing.T) {
		req, _ := http.NewRequest("POST", srv.URL+nfuse.Path, io.LimitReader(neverEnding('x'), 64<<20))
		req.ContentLength = 64 << 20
		req.Header.Set("Expect", "100-continue")
		client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 10 * time.Second}}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(body), "<ErrorId>unspecified</ErrorId>") {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	})
}

type neverEnding byte

func (b neverEnding) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

// TestLogsKeepSecrets logs at debug level through failed and successful
// logons, launches and redemptions, and checks no password, ctx1 string
// or ticket reached the log.
func TestLogsKeepSecrets(t *testing.T) {
	t.Parallel()
	var buf lockedBuffer
	f := newFixture(t, options{handlerConfig: func(c *nfuse.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}})
	secrets := []string{userPassword, ctx1.Encode(userPassword), "wrong password", ctx1.Encode("wrong password"), "PASSWORDLOL"}
	f.post(seed004)
	f.post(seed004For(financeUser, "wrong password", "DEMO"))
	f.post(requestWith("RequestValidateCredentials", `<Credentials><UserName>`+financeUser+`</UserName><Password>wrong password</Password></Credentials>`))
	l := f.launch(t, financeUser, "office-writer-001")
	secrets = append(secrets, l.Ticket, l.TicketTag, l.LaunchRef)
	f.post(requestWith("RequestTicket", `<TicketTag>`+l.TicketTag+`</TicketTag>`+credentials("user0251", userPassword, "DEMO")))
	f.post(requestWith("RequestTicket", `<TicketTag>`+l.TicketTag+`</TicketTag>`+credentials(financeUser, userPassword, "DEMO")))
	f.post(requestWith("RequestTicket", `<TicketTag>`+l.TicketTag+`</TicketTag>`+credentials(financeUser, userPassword, "DEMO")))
	f.post(`<NFuseProtocol><RequestAppData><Credentials><Password>` + userPassword + `</Password></Credentials></RequestAppData></NFuseProtocol>`)
	f.post(`<NFuseProtocol><RequestAppData><Credentials><Password>` + userPassword + `</Password></Credentials></RequestAppData>`)
	logs := buf.String()
	if !strings.Contains(logs, "NFuse logon failed") {
		t.Fatalf("no failed logon logged:\n%s", logs)
	}
	for _, s := range secrets {
		if strings.Contains(logs, s) {
			t.Errorf("the log holds %q:\n%s", s, logs)
		}
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// ioTimeoutServer serves a handler with a 300ms IOTimeout on an in-memory
// network of the test's synctest bubble, so that the deadlines on the
// connection run on the bubble's clock.
func ioTimeoutServer(t *testing.T) *memnet.Network {
	f := newFixture(t, options{handlerConfig: func(c *nfuse.Config) { c.IOTimeout = 300 * time.Millisecond }})
	n := memnet.New()
	ln, err := n.Listen("nfuse.test:80")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(f.handler)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return n
}

func TestIOTimeoutCutsOffAStalledBody(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		n := ioTimeoutServer(t)
		conn, err := n.DialContext(t.Context(), "tcp", "nfuse.test:80")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: text/xml\r\nContent-Length: 1000\r\n\r\n<NFuseProtocol><RequestAppData>", nfuse.Path)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(body), "<ResponseAppData><ErrorId>unspecified</ErrorId>") {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if took := time.Since(start); took != 300*time.Millisecond {
			t.Errorf("the stalled body was cut off after %v, want the 300ms IOTimeout", took)
		}
	})
}

func TestIOTimeoutSparesAKeptAliveConnection(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		n := ioTimeoutServer(t)
		tr := n.Transport()
		tr.MaxIdleConnsPerHost = 1
		client := &http.Client{Transport: tr}
		defer client.CloseIdleConnections()
		reused := 0
		for i := range 3 {
			if i > 0 {
				time.Sleep(500 * time.Millisecond) // past the IOTimeout, on the bubble's clock
			}
			trace := &httptrace.ClientTrace{GotConn: func(c httptrace.GotConnInfo) {
				if c.Reused {
					reused++
				}
			}}
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "POST", "http://nfuse.test"+nfuse.Path, strings.NewReader(request(`<RequestServerFarmData/>`)))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
		}
		if reused != 2 {
			t.Fatalf("the connection was reused %d times, want 2", reused)
		}
	})
}

// TestLenientRequests sends what real clients send, in every form the
// brokers accept, for a user whose password is not ASCII.
func TestLenientRequests(t *testing.T) {
	t.Parallel()
	f := newFixture(t, options{})
	const user, password = "user0999", "Grüße 1"
	setPassword(t, f, user, password)
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"ISO-8859-1 with a declaration", latin1("<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?>\r\n<!DOCTYPE NFuseProtocol SYSTEM \"NFuse.dtd\">\r\n<NFuseProtocol version=\"5.0\"><RequestValidateCredentials><Credentials><UserName>user0999</UserName><Password encoding=\"cleartext\">Grüße 1</Password><Domain type=\"NT\">DEMO</Domain></Credentials></RequestValidateCredentials></NFuseProtocol>\r\n")},
		{"ISO-8859-1 without a declaration", latin1("<NFuseProtocol><RequestValidateCredentials><Credentials><UserName>DEMO\\user0999</UserName><Password>Grüße 1</Password></Credentials></RequestValidateCredentials></NFuseProtocol>")},
		{"UTF-8 without a declaration", []byte("<NFuseProtocol><RequestValidateCredentials><Credentials><UserName>user0999@demo</UserName><Password>Grüße 1</Password></Credentials></RequestValidateCredentials></NFuseProtocol>")},
		{"lower case and character references", []byte(`<nfuseprotocol version="1.1"><requestvalidatecredentials><credentials><username>user0999</username><password encoding="cleartext">Gr&#252;&#xDF;e&#32;1</password><domain type="nt">demo</domain></credentials></requestvalidatecredentials></nfuseprotocol>`)},
		{"upper case, Nil placeholders and unknown elements", []byte(`<NFUSEPROTOCOL VERSION="9.9"><NIL/><REQUESTVALIDATECREDENTIALS><FUTURE a="b"><X/></FUTURE><CREDENTIALS><USERNAME>user0999</USERNAME><PASSWORD ENCODING="CTX1">` + ctx1.Encode(password) + `</PASSWORD><DOMAIN><NIL /></DOMAIN></CREDENTIALS><CLIENTNAME><NIL/></CLIENTNAME></REQUESTVALIDATECREDENTIALS></NFUSEPROTOCOL>`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantAnswer(t, f.postBytes(tc.body), "ResponseValidateCredentials", "")
		})
	}
}

// setPassword gives a user a new password in the site DB.
func setPassword(t testing.TB, f *fixture, name, password string) {
	t.Helper()
	ctx := context.Background()
	hash, err := auth.HashPassword(password, sitetest.Cheap)
	if err != nil {
		t.Fatal(err)
	}
	err = f.store.Update(ctx, func(tx site.Tx) error {
		u, err := tx.Users().Get(ctx, name)
		if err != nil {
			return err
		}
		u.PasswordHash = hash
		return tx.Users().Update(ctx, u)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.broker.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
}
