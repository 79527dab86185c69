package nfuse_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/demo"
	"github.com/usher-vdi/usher/internal/nfuse"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
	"github.com/usher-vdi/usher/internal/vdaproto"
)

// cheap argon2id parameters keep the tests fast.
var cheap = auth.Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1, SaltLen: 16, KeyLen: 32}

// The demo users' password in the tests, and a user entitled to the 400
// applications and the Office Desktop only (finance: user0201..user0300).
const (
	userPassword = "user password"
	financeUser  = "user0250"
)

type fixture struct {
	t       testing.TB
	store   site.Store
	broker  *broker.Broker
	handler *nfuse.Handler
	control *fakeControl
}

type options struct {
	settings      func(*site.Settings)
	brokerConfig  func(*broker.Config)
	handlerConfig func(*nfuse.Config)
	// unregistered leaves the machines unregistered.
	unregistered bool
}

// newFixture serves NFuse over a real broker on a SQLite store holding the
// demo site, whose users all have userPassword and whose machines are
// registered as ICA hosts at 10.0.G.N:1494. The store is a copy of a
// template built once per test binary.
func newFixture(t testing.TB, o options) *fixture {
	t.Helper()
	ctx := context.Background()
	path := t.TempDir() + "/site.db"
	if err := copyFile(path, templateDB(t, !o.unregistered)); err != nil {
		t.Fatal(err)
	}
	store, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if o.settings != nil {
		err := store.Update(ctx, func(tx site.Tx) error {
			s, err := tx.Settings(ctx)
			if err != nil {
				return err
			}
			o.settings(&s)
			return tx.SetSettings(ctx, s)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	control := &fakeControl{}
	bc := broker.Config{Store: store, Control: control}
	if o.brokerConfig != nil {
		o.brokerConfig(&bc)
	}
	b, err := broker.New(ctx, bc)
	if err != nil {
		t.Fatal(err)
	}
	hc := nfuse.Config{Broker: b}
	if o.handlerConfig != nil {
		o.handlerConfig(&hc)
	}
	h, err := nfuse.New(hc)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, store: store, broker: b, handler: h, control: control}
}

// templates are site databases built once: the demo site with passwords,
// with its machines registered or not.
var templates struct {
	mu    sync.Mutex
	dir   string
	paths map[bool]string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if templates.dir != "" {
		os.RemoveAll(templates.dir)
	}
	os.Exit(code)
}

func templateDB(t testing.TB, registered bool) string {
	t.Helper()
	templates.mu.Lock()
	defer templates.mu.Unlock()
	if p, ok := templates.paths[registered]; ok {
		return p
	}
	if templates.dir == "" {
		dir, err := os.MkdirTemp("", "nfuse-test-")
		if err != nil {
			t.Fatal(err)
		}
		templates.dir, templates.paths = dir, map[bool]string{}
	}
	path := filepath.Join(templates.dir, fmt.Sprintf("site-%t.db", registered))
	if err := buildTemplate(path, registered); err != nil {
		t.Fatal(err)
	}
	templates.paths[registered] = path
	return path
}

func buildTemplate(path string, registered bool) error {
	ctx := context.Background()
	store, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	cfg := demo.Site()
	hash, err := auth.HashPassword(userPassword, cheap)
	if err != nil {
		return err
	}
	for i := range cfg.Users {
		cfg.Users[i].PasswordHash = hash
	}
	err = store.Update(ctx, func(tx site.Tx) error {
		_, err := site.ApplyConfig(ctx, tx, cfg, false)
		return err
	})
	if err != nil || !registered {
		return err
	}
	b, err := broker.New(ctx, broker.Config{Store: store, Control: &fakeControl{}})
	if err != nil {
		return err
	}
	for i, m := range cfg.Machines {
		err := b.Register(ctx, vdaproto.RegisterRequest{Machine: m.Name, Address: fmt.Sprintf("10.0.%d.%d:1494", i/100, i%100+1),
			Protocol: "ica", ControlURL: "http://vda.invalid/" + m.Name, ControlToken: "token-0123456789abcdef"})
		if err != nil {
			return err
		}
	}
	return store.Close()
}

func copyFile(dst, src string) error {
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(src + suffix)
		if errors.Is(err, fs.ErrNotExist) && suffix != "" {
			continue
		}
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst+suffix, b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// fakeControl stands in for the VDAs: it accepts every request.
type fakeControl struct {
	mu       sync.Mutex
	prepared int
}

func (c *fakeControl) Prepare(context.Context, broker.Control, vdaproto.PrepareRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prepared++
	return nil
}
func (c *fakeControl) Logoff(context.Context, broker.Control, string) error     { return nil }
func (c *fakeControl) Disconnect(context.Context, broker.Control, string) error { return nil }

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
		user, nfuse.EncodeCtx1(password), domain)
}

// request wraps a request element in the usual prolog.
func request(inner string) string {
	return `<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE NFuseProtocol SYSTEM "NFuse.dtd"><NFuseProtocol version="5.4">` + inner + `</NFuseProtocol>`
}
