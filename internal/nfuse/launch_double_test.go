package nfuse_test

import (
	"encoding/xml"
	"sync"
	"testing"
)

// TestConcurrentLaunchesGiveOneSession: a client that sends
// RequestAddress for one application (or desktop) several times at once
// (two NFuse launches racing) gets one session: every answer a ticket of
// its own for it, under one session sharing key.
func TestConcurrentLaunchesGiveOneSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t, options{})
	const user, launches = "user0001", 8 // an engineer: also entitled to the pooled desktops
	for _, app := range []string{"office-writer-001", demoPooledDesktop} {
		body := []byte(requestWith("RequestAddress", `<Name><AppName>`+app+`</AppName></Name><ClientName>PC-1</ClientName>`+credentials(user, userPassword, "DEMO")))
		answers := make([]answer, launches)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range launches {
			wg.Go(func() {
				<-start
				answers[i] = postTo(f.handler, body)
			})
		}
		close(start)
		wg.Wait()
		tickets := map[string]bool{}
		keys := map[string]bool{}
		for _, a := range answers {
			wantAnswer(t, a, "ResponseAddress", "")
			var l addressAnswer
			if err := xml.Unmarshal([]byte(a.body), &l); err != nil {
				t.Fatal(err)
			}
			if l.Ticket == "" || tickets[l.Ticket] {
				t.Errorf("%s: ticket %q is empty or another launch's", app, l.Ticket)
			}
			tickets[l.Ticket] = true
			keys[l.SessionSharingKey+" "+l.ServerAddress.Value] = true
		}
		if len(keys) != 1 {
			t.Errorf("%s: %d launches answered with %d addresses and sharing keys, want one: %v", app, launches, len(keys), keys)
		}
	}
	live := f.sessions(t, user, "RequestReconnectSessionData")
	if len(live.Sessions) != 2 {
		t.Fatalf("%d live sessions after launching an application and a desktop %d times each, want 2: %+v", len(live.Sessions), launches, live.Sessions)
	}
}
