package nfuse_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/usher-vdi/usher/internal/nfuse"
)

// seed004 is the exact request body of the IMA/FMA test's WCAT scenario.
const seed004 = `<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE NFuseProtocol SYSTEM "NFuse.dtd"><NFuseProtocol version="5.4"><RequestAppData><Scope traverse="subtree"></Scope><DesiredDetails>permissions</DesiredDetails><ServerType>all</ServerType><ClientType>ica30</ClientType><ClientType>content</ClientType><Credentials><UserName>adtest90</UserName><Password encoding="ctx1">PASSWORDLOL</Password><Domain type="NT">HEALTHY</Domain></Credentials><ClientName>LOADTESTER</ClientName><ClientAddress addresstype="dot">10.10.10.10</ClientAddress></RequestAppData></NFuseProtocol>`

func TestDecodeSeed004(t *testing.T) {
	req, err := nfuse.Decode([]byte(seed004), nfuse.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := &nfuse.Request{
		Version: "5.4", Kind: nfuse.KindAppData, Element: "RequestAppData",
		Scope:          nfuse.Scope{Traverse: "subtree"},
		DesiredDetails: []string{"permissions"},
		ServerTypes:    []string{"all"},
		ClientTypes:    []string{"ica30", "content"},
		Credentials: &nfuse.Credentials{UserName: "adtest90", Password: nfuse.Password{Encoding: "ctx1", Value: "PASSWORDLOL"},
			Domain: "HEALTHY", DomainType: "NT"},
		ClientName:    "LOADTESTER",
		ClientAddress: nfuse.Address{Type: "dot", Value: "10.10.10.10"},
	}
	if !reflect.DeepEqual(req, want) {
		t.Fatalf("got  %+v\nwant %+v", req, want)
	}
}

// latin1 encodes s, which must be in ISO-8859-1's range, as ISO-8859-1.
func latin1(s string) []byte {
	var b []byte
	for _, r := range s {
		if r > 0xFF {
			panic("not latin1")
		}
		b = append(b, byte(r))
	}
	return b
}

func utf16le(s string, bom bool) []byte {
	var b []byte
	if bom {
		b = []byte{0xFF, 0xFE}
	}
	for _, u := range utf16.Encode([]rune(s)) {
		b = append(b, byte(u), byte(u>>8))
	}
	return b
}

func TestDecodeLenient(t *testing.T) {
	for _, tc := range []struct {
		name string
		body []byte
		// check inspects the decoded request.
		check func(*nfuse.Request) error
	}{
		{"lower-case names", []byte(`<nfuseprotocol VERSION="5.0"><requestappdata><scope TRAVERSE="SubTree">Office</scope><desireddetails>ICON-INFO</desireddetails><credentials><username>u</username><password ENCODING="CLEARTEXT">p</password></credentials></requestappdata></nfuseprotocol>`),
			func(r *nfuse.Request) error {
				return want(r.Kind == nfuse.KindAppData && r.Version == "5.0" && r.Scope.Traverse == "subtree" && r.Scope.Folder == "Office" &&
					reflect.DeepEqual(r.DesiredDetails, []string{"icon-info"}) && r.Credentials.Password.Encoding == "cleartext" && r.Credentials.Password.Value == "p")
			}},
		{"upper-case names", []byte(`<NFUSEPROTOCOL><REQUESTADDRESS><NAME><APPNAME>Writer</APPNAME></NAME><CLIENTNAME>PC1</CLIENTNAME></REQUESTADDRESS></NFUSEPROTOCOL>`),
			func(r *nfuse.Request) error {
				return want(r.Kind == nfuse.KindAddress && r.Name.AppName == "Writer" && r.ClientName == "PC1")
			}},
		{"no declaration or DOCTYPE", []byte(`<NFuseProtocol version="1.1"><RequestServerFarmData/></NFuseProtocol>`),
			func(r *nfuse.Request) error { return want(r.Kind == nfuse.KindServerFarmData && r.Version == "1.1") }},
		{"DOCTYPE with an internal subset", []byte(`<!DOCTYPE NFuseProtocol [ <!ENTITY x "]>"> ]><NFuseProtocol><RequestCapabilities/></NFuseProtocol>`),
			func(r *nfuse.Request) error { return want(r.Kind == nfuse.KindCapabilities) }},
		{"ISO-8859-1 with a non-ASCII character", latin1("<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?>\r\n<NFuseProtocol version=\"5.0\"><RequestValidateCredentials><Credentials><UserName>jürgen</UserName><Password encoding=\"cleartext\">Grüße</Password><Domain type=\"NT\">DEMO</Domain></Credentials></RequestValidateCredentials></NFuseProtocol>"),
			func(r *nfuse.Request) error {
				return want(r.Credentials.UserName == "jürgen" && r.Credentials.Password.Value == "Grüße")
			}},
		{"ISO-8859-1 without a declaration", latin1("<NFuseProtocol><RequestAppData><ClientName>Büro</ClientName></RequestAppData></NFuseProtocol>"),
			func(r *nfuse.Request) error { return want(r.ClientName == "Büro") }},
		{"windows-1252", append(latin1(`<?xml version='1.0' encoding='windows-1252'?><NFuseProtocol><RequestAppData><ClientName>`), 0x80, 0xE9, '<', '/', 'C', 'l', 'i', 'e', 'n', 't', 'N', 'a', 'm', 'e', '>', '<', '/', 'R', 'e', 'q', 'u', 'e', 's', 't', 'A', 'p', 'p', 'D', 'a', 't', 'a', '>', '<', '/', 'N', 'F', 'u', 's', 'e', 'P', 'r', 'o', 't', 'o', 'c', 'o', 'l', '>'),
			func(r *nfuse.Request) error { return want(r.ClientName == "€é") }},
		{"UTF-8 with a byte order mark", append([]byte{0xEF, 0xBB, 0xBF}, `<?xml version="1.0" encoding="utf-8"?><NFuseProtocol><RequestAppData><ClientName>Büro</ClientName></RequestAppData></NFuseProtocol>`...),
			func(r *nfuse.Request) error { return want(r.ClientName == "Büro") }},
		{"UTF-16 with a byte order mark", utf16le(`<?xml version="1.0" encoding="UTF-16"?><NFuseProtocol><RequestAppData><ClientName>Büro €</ClientName></RequestAppData></NFuseProtocol>`, true),
			func(r *nfuse.Request) error { return want(r.ClientName == "Büro €") }},
		{"character references", []byte(`<NFuseProtocol><RequestAddress><Name><AppName>Office&#32;Writer&#x21;</AppName></Name><ClientName>a&amp;b&lt;&gt;&quot;&apos;</ClientName></RequestAddress></NFuseProtocol>`),
			func(r *nfuse.Request) error {
				return want(r.Name.AppName == "Office Writer!" && r.ClientName == `a&b<>"'`)
			}},
		{"an unescaped ampersand", []byte(`<NFuseProtocol><RequestValidateCredentials><Credentials><UserName>u</UserName><Password>a&b&c;&#;&</Password></Credentials></RequestValidateCredentials></NFuseProtocol>`),
			func(r *nfuse.Request) error { return want(r.Credentials.Password.Value == "a&b&c;&#;&") }},
		{"Nil placeholders", []byte(`<NFuseProtocol><RequestAppData><Scope traverse="onelevel"><Nil /></Scope><ClientName><Nil/></ClientName><Nil /><DesiredDetails>defaults</DesiredDetails></RequestAppData></NFuseProtocol>`),
			func(r *nfuse.Request) error {
				return want(r.Scope.Folder == "" && r.ClientName == "" && reflect.DeepEqual(r.DesiredDetails, []string{"defaults"}))
			}},
		{"unknown elements", []byte(`<NFuseProtocol><Extra a="1"><Deep><Deeper/></Deep></Extra><RequestAppData><Future>x</Future><ServerType>win32</ServerType><Credentials><Token>t</Token><UserName>u</UserName></Credentials></RequestAppData><Trailer/></NFuseProtocol>`),
			func(r *nfuse.Request) error {
				return want(r.Kind == nfuse.KindAppData && reflect.DeepEqual(r.ServerTypes, []string{"win32"}) && r.Credentials.UserName == "u")
			}},
		{"comments, CDATA and processing instructions", []byte("<?xml version=\"1.0\"?>\n<!-- hello -->\n<NFuseProtocol><?pi x?><RequestValidateCredentials><Credentials><UserName>us<!-- c -->er</UserName><Password><![CDATA[p<w>&]]></Password></Credentials></RequestValidateCredentials></NFuseProtocol>\n<!-- bye -->\n"),
			func(r *nfuse.Request) error {
				return want(r.Credentials.UserName == "user" && r.Credentials.Password.Value == "p<w>&")
			}},
		{"namespace prefixes", []byte(`<n:NFuseProtocol xmlns:n="urn:x"><n:RequestCapabilities/></n:NFuseProtocol>`),
			func(r *nfuse.Request) error { return want(r.Kind == nfuse.KindCapabilities) }},
		{"a bare request element", []byte(`<RequestServerData><ServerType>all</ServerType></RequestServerData>`),
			func(r *nfuse.Request) error { return want(r.Kind == nfuse.KindServerData && r.Version == "") }},
		{"white space and a password's spaces", []byte("<NFuseProtocol>\n  <RequestValidateCredentials>\n    <Credentials>\n      <UserName> u </UserName>\n      <Password encoding=\"cleartext\"> p w </Password>\n    </Credentials>\n  </RequestValidateCredentials>\n</NFuseProtocol>"),
			func(r *nfuse.Request) error {
				return want(r.Credentials.UserName == "u" && r.Credentials.Password.Value == " p w ")
			}},
		{"unquoted and valueless attributes", []byte(`<NFuseProtocol version=5.0><RequestAppData><Scope traverse=subtree checked/></RequestAppData></NFuseProtocol>`),
			func(r *nfuse.Request) error { return want(r.Version == "5.0" && r.Scope.Traverse == "subtree") }},
		{"keyword lists in one element", []byte(`<NFuseProtocol><RequestAppData><DesiredDetails>Permissions, icon-info access-list</DesiredDetails></RequestAppData></NFuseProtocol>`),
			func(r *nfuse.Request) error {
				return want(reflect.DeepEqual(r.DesiredDetails, []string{"permissions", "icon-info", "access-list"}))
			}},
		{"an unknown request type", []byte(`<NFuseProtocol><RequestFrobnicate/></NFuseProtocol>`),
			func(r *nfuse.Request) error {
				return want(r.Kind == nfuse.KindUnknown && r.Element == "RequestFrobnicate")
			}},
		{"every field of RequestAddress", []byte(`<NFuseProtocol version="5.8"><RequestAddress><Flags>alt-addr no-load-bias</Flags><Name><SessionName><InName>Writer</InName><HostId>h1</HostId><SessionId>s1</SessionId></SessionName></Name><ClientName>PC</ClientName><ClientAddress addresstype="dot">1.2.3.4</ClientAddress><ServerAddress addresstype="dot-port">5.6.7.8:1494</ServerAddress><Credentials><ID type="sam">DEMO\u</ID><ID type="SID">S-1-5</ID></Credentials><ClientType>ica30</ClientType><DeviceId>dev</DeviceId><SessionSettings/></RequestAddress></NFuseProtocol>`),
			func(r *nfuse.Request) error {
				return want(reflect.DeepEqual(r.Flags, []string{"alt-addr", "no-load-bias"}) &&
					reflect.DeepEqual(r.Name.Session, &nfuse.SessionName{InName: "Writer", HostID: "h1", SessionID: "s1"}) &&
					r.ClientAddress == nfuse.Address{Type: "dot", Value: "1.2.3.4"} && r.ServerAddress == nfuse.Address{Type: "dot-port", Value: "5.6.7.8:1494"} &&
					reflect.DeepEqual(r.Credentials.IDs, []nfuse.ID{{"SAM", `DEMO\u`}, {"SID", "S-1-5"}}) && r.DeviceID == "dev")
			}},
		{"RequestAppData's icon, name and filters", []byte(`<NFuseProtocol><RequestAppData><DesiredIconData size="48" bpp="32" format="PNG"/><AppName>Writer</AppName><ServerType>x</ServerType><ClientType>all</ClientType></RequestAppData></NFuseProtocol>`),
			func(r *nfuse.Request) error {
				return want(reflect.DeepEqual(r.DesiredIconData, &nfuse.IconSpec{Size: 48, BPP: 32, Format: "png"}) && r.AppName == "Writer")
			}},
		{"ticket, launch reference, desired info and session IDs", []byte(`<NFuseProtocol><RequestLogoffUserSessions><TicketTag>T</TicketTag><LaunchRef>L</LaunchRef><DesiredInfo>user-identity</DesiredInfo><SessionIds><SessionId>a</SessionId><SessionId>b</SessionId></SessionIds><Credentials><AnonymousUser/></Credentials></RequestLogoffUserSessions></NFuseProtocol>`),
			func(r *nfuse.Request) error {
				return want(r.Kind == nfuse.KindLogoffUserSessions && r.TicketTag == "T" && r.LaunchRef == "L" &&
					reflect.DeepEqual(r.DesiredInfo, []string{"user-identity"}) && reflect.DeepEqual(r.SessionIDs, []string{"a", "b"}) && r.Credentials.Anonymous)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := nfuse.Decode(tc.body, nfuse.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.check(req); err != nil {
				t.Fatalf("%v: %+v", err, req)
			}
		})
	}
}

func want(ok bool) error {
	if !ok {
		return errors.New("unexpected request")
	}
	return nil
}

func TestDecodeErrors(t *testing.T) {
	deep := strings.Repeat("<a>", 40) + strings.Repeat("</a>", 40)
	many := strings.Repeat("<a/>", 20000)
	for _, tc := range []struct {
		name, body string
		// element is the request element the error should name.
		element string
	}{
		{"empty", "", ""},
		{"text only", "hello", ""},
		{"unclosed root", `<NFuseProtocol><RequestAppData></RequestAppData>`, "RequestAppData"},
		{"mismatched end tag", `<NFuseProtocol><RequestAppData></RequestAddress></NFuseProtocol>`, "RequestAppData"},
		{"truncated tag", `<NFuseProtocol><RequestAppData><Scope traverse="subtree`, "RequestAppData"},
		{"end tag without start", `</NFuseProtocol>`, ""},
		{"two roots", `<NFuseProtocol><RequestCapabilities/></NFuseProtocol><NFuseProtocol/>`, "RequestCapabilities"},
		{"text after the root", `<NFuseProtocol><RequestCapabilities/></NFuseProtocol>junk`, "RequestCapabilities"},
		{"no request element", `<NFuseProtocol><Hello/></NFuseProtocol>`, ""},
		{"another root", `<html><body/></html>`, ""},
		{"reference to NUL", `<NFuseProtocol><RequestAppData><AppName>&#0;</AppName></RequestAppData></NFuseProtocol>`, "RequestAppData"},
		{"reference to a surrogate", `<NFuseProtocol><RequestAppData><AppName>&#xD800;</AppName></RequestAppData></NFuseProtocol>`, "RequestAppData"},
		{"unsupported encoding", `<?xml version="1.0" encoding="EBCDIC"?><NFuseProtocol><RequestAppData/></NFuseProtocol>`, "RequestAppData"},
		// Sniffing the element of a broken body is best effort.
		{"unterminated comment", `<NFuseProtocol><!-- <RequestAppData/>`, "RequestAppData"},
		{"too deep", `<NFuseProtocol><RequestAppData>` + deep + `</RequestAppData></NFuseProtocol>`, "RequestAppData"},
		{"too many elements", `<NFuseProtocol><RequestAppData>` + many + `</RequestAppData></NFuseProtocol>`, "RequestAppData"},
		{"'<' in an attribute", `<NFuseProtocol><RequestAppData><Scope traverse="<"/></RequestAppData></NFuseProtocol>`, "RequestAppData"},
		{"a name starting with a digit", `<NFuseProtocol><RequestAppData><1a/></RequestAppData></NFuseProtocol>`, "RequestAppData"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := nfuse.Decode([]byte(tc.body), nfuse.Limits{})
			var de *nfuse.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode = %+v, %v; want a *DecodeError", req, err)
			}
			if de.Element != tc.element {
				t.Fatalf("error names element %q, want %q (%v)", de.Element, tc.element, err)
			}
		})
	}
}

func TestDecodeLimits(t *testing.T) {
	body := func(depth int) []byte {
		return []byte(`<NFuseProtocol><RequestAppData>` + strings.Repeat("<a>", depth) + strings.Repeat("</a>", depth) + `</RequestAppData></NFuseProtocol>`)
	}
	if _, err := nfuse.Decode(body(8), nfuse.Limits{MaxDepth: 10}); err != nil {
		t.Fatalf("depth 10: %v", err)
	}
	if _, err := nfuse.Decode(body(9), nfuse.Limits{MaxDepth: 10}); err == nil {
		t.Fatal("depth 11 passed a limit of 10")
	}
	if _, err := nfuse.Decode(body(8), nfuse.Limits{MaxElements: 10}); err != nil {
		t.Fatalf("10 elements: %v", err)
	}
	if _, err := nfuse.Decode(body(9), nfuse.Limits{MaxElements: 10}); err == nil {
		t.Fatal("11 elements passed a limit of 10")
	}
}

// TestDecodeLinear checks that no input makes the decoder do quadratic
// work: text split by many comments and attributes galore.
func TestDecodeLinear(t *testing.T) {
	split := `<NFuseProtocol><RequestAppData><AppName>` + strings.Repeat("a<!---->", 100000) + `</AppName></RequestAppData></NFuseProtocol>`
	req, err := nfuse.Decode([]byte(split), nfuse.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(req.AppName) != 100000 {
		t.Fatalf("AppName of %d bytes, want 100000", len(req.AppName))
	}
	mixed := `<NFuseProtocol><RequestAppData><AppName>` + strings.Repeat("a<Nil/>", 5000) + `</AppName></RequestAppData></NFuseProtocol>`
	if _, err := nfuse.Decode([]byte(mixed), nfuse.Limits{}); err != nil {
		t.Fatal(err)
	}
}

func TestPasswordIsRedacted(t *testing.T) {
	req, err := nfuse.Decode([]byte(`<NFuseProtocol><RequestValidateCredentials><Credentials><UserName>u</UserName><Password encoding="cleartext">hunter2</Password></Credentials></RequestValidateCredentials></NFuseProtocol>`), nfuse.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(format, req.Credentials); strings.Contains(s, "hunter2") {
			t.Errorf("%s shows the password: %s", format, s)
		}
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(seed004))
	f.Add([]byte(`<nfuseprotocol><requestaddress><name><sessionname><inname>a</inname><sessionid>1</sessionid></sessionname></name><credentials><id type="SAM">D\u</id></credentials></requestaddress></nfuseprotocol>`))
	f.Add(latin1("<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><NFuseProtocol><RequestAppData><ClientName>Büro&#32;1</ClientName><Nil /></RequestAppData></NFuseProtocol>"))
	f.Add([]byte(`<!DOCTYPE x [<!ENTITY a "b">]><NFuseProtocol><RequestAppData><![CDATA[x]]><!-- c --><DesiredIconData size="32"/></RequestAppData></NFuseProtocol>`))
	f.Add(utf16le(`<NFuseProtocol><RequestCapabilities/></NFuseProtocol>`, true))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := nfuse.Decode(body, nfuse.Limits{MaxDepth: 16, MaxElements: 256})
		if err != nil {
			var de *nfuse.DecodeError
			if !errors.As(err, &de) || req != nil {
				t.Fatalf("Decode = %v, %v; want nil and a *DecodeError", req, err)
			}
			return
		}
		if req.Element == "" || !strings.HasPrefix(strings.ToLower(req.Element), "request") {
			t.Fatalf("request element %q", req.Element)
		}
		if !bytes.Contains(bytes.ToLower(body), []byte("request")) && !bytes.Contains(body, []byte{0}) {
			t.Fatalf("decoded a request from a body without one: %q", body)
		}
	})
}
