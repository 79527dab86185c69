package nfuse_test

import (
	"context"
	"encoding/xml"
	"regexp"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
)

type addressAnswer struct {
	ServerAddress struct {
		Type  string `xml:"addresstype,attr"`
		Value string `xml:",chardata"`
	} `xml:"ResponseAddress>ServerAddress"`
	ServerType        string `xml:"ResponseAddress>ServerType"`
	ConnectionType    string `xml:"ResponseAddress>ConnectionType"`
	ClientType        string `xml:"ResponseAddress>ClientType"`
	TicketTag         string `xml:"ResponseAddress>TicketTag"`
	Ticket            string `xml:"ResponseAddress>Ticket"`
	LaunchRef         string `xml:"ResponseAddress>LaunchRef"`
	SessionSharingKey string `xml:"ResponseAddress>SessionSharingKey"`
	CGPAddress        string `xml:"ResponseAddress>CGPAddress"`
}

func parseAddress(t testing.TB, body string) addressAnswer {
	t.Helper()
	var a addressAnswer
	if err := xml.Unmarshal([]byte(body), &a); err != nil {
		t.Fatal(err)
	}
	return a
}

type sessionAnswer struct {
	Sessions []struct {
		InName    string `xml:"SessionName>InName"`
		HostID    string `xml:"SessionName>HostId"`
		SessionID string `xml:"SessionName>SessionId"`
		FName     string `xml:"FName"`
		State     string `xml:"SessionState"`
	} `xml:"ResponseReconnectSessionData>SessionData"`
}

func (f *fixture) sessions(t testing.TB, user, request string) sessionAnswer {
	t.Helper()
	a := f.post(requestWith(request, credentials(user, userPassword, "DEMO")))
	wantAnswer(t, a, "Response"+strings.TrimPrefix(request, "Request"), "")
	var s sessionAnswer
	body := strings.ReplaceAll(a.body, "ResponseDiscSessionData", "ResponseReconnectSessionData")
	if err := xml.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// requestWith renders a request element with inner content.
func requestWith(element, inner string) string {
	return request("<" + element + ">" + inner + "</" + element + ">")
}

func (f *fixture) launch(t testing.TB, user, app string) addressAnswer {
	t.Helper()
	a := f.post(requestWith("RequestAddress", `<Name><AppName>`+app+`</AppName></Name><ClientName>PC-`+user+`</ClientName>`+credentials(user, userPassword, "DEMO")))
	wantAnswer(t, a, "ResponseAddress", "")
	return parseAddress(t, a.body)
}

var upperHex = regexp.MustCompile(`^[0-9A-F]{32}$`)

func TestLaunch(t *testing.T) {
	t.Parallel()
	f := newFixture(t, options{})
	l := f.launch(t, financeUser, "office-writer-001")
	t.Run("the answer has what a 7.x client needs", func(t *testing.T) {
		if l.ServerAddress.Type != "dot-port" || !regexp.MustCompile(`^10\.0\.\d+\.\d+:1494$`).MatchString(l.ServerAddress.Value) {
			t.Errorf("ServerAddress %+v", l.ServerAddress)
		}
		if l.ServerType != "win32" || l.ConnectionType != "tcp" || l.ClientType != "ica30" || l.CGPAddress != "2598" {
			t.Errorf("types %+v", l)
		}
		if !upperHex.MatchString(l.TicketTag) || !upperHex.MatchString(l.LaunchRef) || !upperHex.MatchString(l.SessionSharingKey) || len(l.Ticket) < 32 {
			t.Errorf("ticket fields %+v", l)
		}
	})
	t.Run("applications of one group share a session", func(t *testing.T) {
		other := f.launch(t, financeUser, "office-spreadsheets-002")
		if other.SessionSharingKey != l.SessionSharingKey || other.ServerAddress != l.ServerAddress {
			t.Fatalf("%+v and %+v", other, l)
		}
		if s := f.sessions(t, financeUser, "RequestReconnectSessionData"); len(s.Sessions) != 1 {
			t.Fatalf("%d sessions, want 1", len(s.Sessions))
		}
	})
	t.Run("RequestTicket redeems a TicketTag once", func(t *testing.T) {
		l := f.launch(t, financeUser, "office-writer-001")
		redeem := func(user string) answer {
			return f.post(requestWith("RequestTicket", `<TicketTag>`+l.TicketTag+`</TicketTag>`+credentials(user, userPassword, "DEMO")))
		}
		wantAnswer(t, redeem("user0251"), "ResponseTicket", "unspecified") // another user's
		a := redeem(financeUser)
		wantAnswer(t, a, "ResponseTicket", "")
		if !strings.Contains(a.body, "<Ticket>"+l.Ticket+"</Ticket>") {
			t.Fatalf("not the launch's ticket: %s", a.body)
		}
		wantAnswer(t, redeem(financeUser), "ResponseTicket", "unspecified")
	})
	t.Run("RequestLaunchRef redeems a LaunchRef once", func(t *testing.T) {
		l := f.launch(t, financeUser, "office-writer-001")
		body := requestWith("RequestLaunchRef", `<LaunchRef>`+l.LaunchRef+`</LaunchRef>`+credentials(financeUser, userPassword, "DEMO"))
		a := f.post(body)
		wantAnswer(t, a, "ResponseLaunchRef", "")
		if !strings.Contains(a.body, "<LaunchRef>"+l.LaunchRef+"</LaunchRef>") || !strings.Contains(a.body, "<Ticket>"+l.Ticket+"</Ticket>") {
			t.Fatalf("answer %s", a.body)
		}
		wantAnswer(t, f.post(body), "ResponseLaunchRef", "unspecified")
		wantAnswer(t, f.post(requestWith("RequestLaunchRef", `<LaunchRef>nonsense</LaunchRef>`+credentials(financeUser, userPassword, "DEMO"))), "ResponseLaunchRef", "unspecified")
	})
	t.Run("an unknown and a forbidden resource answer alike", func(t *testing.T) {
		ask := func(app string) answer {
			return f.post(requestWith("RequestAddress", `<Name><AppName>`+app+`</AppName></Name>`+credentials(financeUser, userPassword, "DEMO")))
		}
		forbidden, unknown := ask(demoPooledDesktop), ask("no-such-application")
		wantAnswer(t, forbidden, "ResponseAddress", "unspecified")
		if forbidden.body != unknown.body {
			t.Fatalf("answers differ:\n%s\n%s", forbidden.body, unknown.body)
		}
	})
	t.Run("names other than an application are not supported", func(t *testing.T) {
		for _, name := range []string{`<ServerName>office-vda-01</ServerName>`, `<UnspecifiedName/>`, ``} {
			wantAnswer(t, f.post(requestWith("RequestAddress", `<Name>`+name+`</Name>`+credentials(financeUser, userPassword, "DEMO"))), "ResponseAddress", "unspecified")
		}
	})
	t.Run("wrong credentials", func(t *testing.T) {
		wantAnswer(t, f.post(requestWith("RequestAddress", `<Name><AppName>office-writer-001</AppName></Name>`+credentials(financeUser, "wrong", "DEMO"))), "ResponseAddress", "failed-credentials")
		wantAnswer(t, f.post(requestWith("RequestAddress", `<Name><AppName>office-writer-001</AppName></Name>`)), "ResponseAddress", "failed-credentials")
	})
}

const demoPooledDesktop = "Pooled Linux Desktop"

func TestNoAvailableWorkstation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, options{unregistered: true})
	a := f.post(requestWith("RequestAddress", `<Name><AppName>office-writer-001</AppName></Name>`+credentials(financeUser, userPassword, "DEMO")))
	wantAnswer(t, a, "ResponseAddress", "no-available-workstation")
}

func TestSessions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, options{})
	ctx := context.Background()
	const user = "user0001" // an engineer: also entitled to the pooled desktops
	f.launch(t, user, "office-writer-001")
	f.launch(t, user, demoPooledDesktop)
	live := f.sessions(t, user, "RequestReconnectSessionData")
	if len(live.Sessions) != 2 {
		t.Fatalf("%d live sessions, want 2", len(live.Sessions))
	}
	if s := live.Sessions[0]; s.InName != "office-writer-001" || s.FName != "Writer" || s.State != "active" || s.HostID == "" || s.SessionID == "" {
		t.Fatalf("session %+v", s)
	}
	if d := f.sessions(t, user, "RequestDiscSessionData"); len(d.Sessions) != 0 {
		t.Fatalf("%d disconnected sessions, want 0", len(d.Sessions))
	}
	desktop := live.Sessions[1]
	event := func(ev broker.SessionChange) {
		t.Helper()
		if err := f.broker.SessionEvent(ctx, broker.SessionEvent{Machine: desktop.HostID, SessionID: desktop.SessionID, Change: ev}); err != nil {
			t.Fatal(err)
		}
	}
	event(broker.ChangeLogon)
	event(broker.ChangeDisconnect)
	disc := f.sessions(t, user, "RequestDiscSessionData")
	if len(disc.Sessions) != 1 || disc.Sessions[0].SessionID != desktop.SessionID || disc.Sessions[0].State != "disconnected" {
		t.Fatalf("disconnected sessions %+v", disc.Sessions)
	}
	t.Run("reconnect to a named session", func(t *testing.T) {
		a := f.post(requestWith("RequestAddress", `<Name><SessionName><InName>`+desktop.InName+`</InName><HostId>`+desktop.HostID+`</HostId><SessionId>`+desktop.SessionID+`</SessionId></SessionName></Name>`+credentials(user, userPassword, "DEMO")))
		wantAnswer(t, a, "ResponseAddress", "")
		if got := len(f.sessions(t, user, "RequestReconnectSessionData").Sessions); got != 2 {
			t.Fatalf("%d sessions after reconnecting, want 2", got)
		}
		other := f.post(requestWith("RequestAddress", `<Name><SessionName><SessionId>`+desktop.SessionID+`</SessionId></SessionName></Name>`+credentials("user0002", userPassword, "DEMO")))
		wantAnswer(t, other, "ResponseAddress", "unspecified")
	})
	event(broker.ChangeReconnect)
	t.Run("disconnect", func(t *testing.T) {
		a := f.post(requestWith("RequestDisconnectUserSessions", credentials(user, userPassword, "DEMO")))
		wantAnswer(t, a, "ResponseDisconnectUserSessions", "")
		if !strings.Contains(a.body, "<ResponseDisconnectUserSessions></ResponseDisconnectUserSessions>") {
			t.Fatalf("not empty: %s", a.body)
		}
		if got := len(f.sessions(t, user, "RequestDiscSessionData").Sessions); got != 1 {
			t.Fatalf("%d disconnected sessions, want 1", got)
		}
	})
	t.Run("log off one session by ID", func(t *testing.T) {
		a := f.post(requestWith("RequestLogoffUserSessions", `<SessionIds><SessionId>`+desktop.SessionID+`</SessionId></SessionIds>`+credentials(user, userPassword, "DEMO")))
		wantAnswer(t, a, "ResponseLogoffUserSessions", "")
		left := f.sessions(t, user, "RequestReconnectSessionData").Sessions
		if len(left) != 1 || left[0].SessionID == desktop.SessionID {
			t.Fatalf("sessions left %+v", left)
		}
	})
	t.Run("log off all", func(t *testing.T) {
		wantAnswer(t, f.post(requestWith("RequestLogoffUserSessions", credentials(user, userPassword, "DEMO"))), "ResponseLogoffUserSessions", "")
		if left := f.sessions(t, user, "RequestReconnectSessionData").Sessions; len(left) != 0 {
			t.Fatalf("sessions left %+v", left)
		}
		var n int
		f.store.View(ctx, func(tx site.Tx) error {
			p, err := tx.Sessions().List(ctx, site.SessionFilter{User: user, State: site.SessionLoggedOff}, site.ListOptions{})
			n = len(p.Items)
			return err
		})
		if n != 2 {
			t.Fatalf("%d logged-off sessions, want 2", n)
		}
	})
	t.Run("wrong credentials", func(t *testing.T) {
		for _, r := range []string{"RequestReconnectSessionData", "RequestDiscSessionData", "RequestDisconnectUserSessions", "RequestLogoffUserSessions"} {
			wantAnswer(t, f.post(requestWith(r, credentials(user, "wrong", "DEMO"))), "Response"+strings.TrimPrefix(r, "Request"), "failed-credentials")
		}
	})
}
