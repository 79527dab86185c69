package nfuse_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/ctx1"
	"github.com/usher-vdi/usher/internal/nfuse"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// The demo users' password in the tests, and a user entitled to the 400
// applications and the Office Desktop only (finance: user0201..user0300).
const (
	userPassword = sitetest.UserPassword
	financeUser  = "user0250"
)

type fixture struct {
	t       testing.TB
	store   site.Store
	broker  *broker.Broker
	handler *nfuse.Handler
	control *sitetest.Control
}

type options struct {
	settings      func(*site.Settings)
	brokerConfig  func(*broker.Config)
	handlerConfig func(*nfuse.Config)
	// unregistered leaves the machines unregistered.
	unregistered bool
}

// newFixture serves NFuse over a real broker on a SQLite store holding the
// demo site (sitetest), whose users all have userPassword and whose
// machines are registered as ICA hosts at 10.0.G.N:1494.
func newFixture(t testing.TB, o options) *fixture {
	t.Helper()
	s := sitetest.New(t, sitetest.Options{Registered: !o.unregistered, Settings: o.settings, Broker: o.brokerConfig})
	hc := nfuse.Config{Broker: s.Broker}
	if o.handlerConfig != nil {
		o.handlerConfig(&hc)
	}
	h, err := nfuse.New(hc)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, store: s.Store, broker: s.Broker, handler: h, control: s.Control}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type answer struct {
	status int
	header http.Header
	body   string
}

// post sends a request body to the handler in process.
func (f *fixture) post(body string) answer { return f.postBytes([]byte(body)) }

func (f *fixture) postBytes(body []byte) answer { return postTo(f.handler, body) }

func postTo(h http.Handler, body []byte) answer {
	r := httptest.NewRequest("POST", "http://xml.example/scripts/wpnbr.dll", bytes.NewReader(body))
	r.Header.Set("Content-Type", "text/xml")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	raw, _ := io.ReadAll(w.Result().Body)
	return answer{w.Code, w.Result().Header, string(raw)}
}

// errorID returns the ErrorId of an answer, "" for none.
func (a answer) errorID() string {
	_, rest, ok := strings.Cut(a.body, "<ErrorId>")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "</ErrorId>")
	return id
}

// want checks an answer is a well-formed 200 NFuse answer with the
// response element and ErrorId ("" for success).
func wantAnswer(t testing.TB, a answer, response, errorID string) {
	t.Helper()
	if a.status != 200 {
		t.Fatalf("status %d, want 200; body %s", a.status, a.body)
	}
	if ct := a.header.Get("Content-Type"); ct != "text/xml" {
		t.Fatalf("Content-Type %q, want text/xml", ct)
	}
	mustWellFormed(t, a.body)
	if !strings.Contains(a.body, "<"+response+">") && !strings.Contains(a.body, "<"+response+"/>") {
		t.Fatalf("no <%s> in %s", response, a.body)
	}
	if got := a.errorID(); got != errorID {
		t.Fatalf("ErrorId %q, want %q; body %.600s", got, errorID, a.body)
	}
}

// credentials renders a Credentials element with a ctx1 password.
func credentials(user, password, domain string) string {
	return fmt.Sprintf(`<Credentials><UserName>%s</UserName><Password encoding="ctx1">%s</Password><Domain type="NT">%s</Domain></Credentials>`,
		user, ctx1.Encode(password), domain)
}

// request wraps a request element in the usual prolog.
func request(inner string) string {
	return `<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE NFuseProtocol SYSTEM "NFuse.dtd"><NFuseProtocol version="5.4">` + inner + `</NFuseProtocol>`
}
