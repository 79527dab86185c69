package api_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/usher-vdi/usher/internal/api"
	"github.com/usher-vdi/usher/internal/auth"
	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitegen"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// countingStore counts the reads of the whole configuration (of every
// user at once, which site.LoadConfig makes) in its transactions.
type countingStore struct {
	site.Store
	loads atomic.Int64
}

func (s *countingStore) View(ctx context.Context, fn func(site.Tx) error) error {
	return s.Store.View(ctx, func(tx site.Tx) error { return fn(countingTx{tx, &s.loads}) })
}

func (s *countingStore) Update(ctx context.Context, fn func(site.Tx) error) error {
	return s.Store.Update(ctx, func(tx site.Tx) error { return fn(countingTx{tx, &s.loads}) })
}

type countingTx struct {
	site.Tx
	loads *atomic.Int64
}

func (t countingTx) Users() site.Collection[site.User] { return countingUsers{t.Tx.Users(), t.loads} }

type countingUsers struct {
	site.Collection[site.User]
	loads *atomic.Int64
}

func (c countingUsers) List(ctx context.Context, opts site.ListOptions) (site.Page[site.User], error) {
	if opts == (site.ListOptions{}) {
		c.loads.Add(1)
	}
	return c.Collection.List(ctx, opts)
}

// newCountingFixture serves the API over the mid-size generated site,
// with a broker, both on a countingStore.
func newCountingFixture(t *testing.T) (*fixture, *countingStore, site.Store) {
	t.Helper()
	s := sitetest.New(t, sitetest.Options{Config: sitegen.Generate(sitegen.MidSize, ""), NoBroker: true})
	store := &countingStore{Store: s.Store}
	b, err := broker.New(context.Background(), broker.Config{Store: store, Control: s.Control, SourceFree: -1})
	if err != nil {
		t.Fatal(err)
	}
	signer, err := auth.NewSigner([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Config{Store: store, Signer: signer, PasswordParams: cheap, Broker: b, EnrolmentSecret: enrolmentSecret})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return &fixture{t: t, srv: srv, api: a, store: store, broker: b, control: s.Control}, store, s.Store
}

// reloaded returns the snapshot a broker builds from the site as it is.
func reloaded(t *testing.T, s site.Store) *broker.Snapshot {
	t.Helper()
	ctx := context.Background()
	var snap *broker.Snapshot
	err := s.View(ctx, func(tx site.Tx) error {
		v, err := tx.ConfigVersion(ctx)
		if err != nil {
			return err
		}
		c, err := site.LoadConfig(ctx, tx)
		snap = broker.NewSnapshot(v, c)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// wantServed fails the test unless the broker serves what a reload of
// the site gives: the same version and configuration, the same objects,
// the same entitlements for users.
func wantServed(t *testing.T, what string, b *broker.Broker, s site.Store, objects []string, users []string) {
	t.Helper()
	got, want := b.Snapshot(), reloaded(t, s)
	if got.Version != want.Version {
		t.Fatalf("%s: the broker serves version %d, the site is at %d", what, got.Version, want.Version)
	}
	if !reflect.DeepEqual(got.Config(), want.Config()) {
		t.Fatalf("%s: the broker serves another configuration than the site's: %s", what, firstDifference(got.Config(), want.Config()))
	}
	same := func(kind, name string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: %s %s is served as %+v; a reload gives %+v", what, kind, name, a, b)
		}
	}
	same("settings", "", got.Settings, want.Settings)
	same("counts", "", got.Counts(), want.Counts())
	for _, o := range objects {
		kind, name, _ := strings.Cut(o, " ")
		switch kind {
		case "resource":
			r1, ok1 := got.Resource(name)
			r2, ok2 := want.Resource(name)
			same(kind, name, []any{r1, ok1}, []any{r2, ok2})
		case "user":
			u1, ok1 := got.User(name)
			u2, ok2 := want.User(name)
			same(kind, name, []any{u1, ok1}, []any{u2, ok2})
		case "machine":
			m1, g1, ok1 := got.Machine(name)
			m2, g2, ok2 := want.Machine(name)
			same(kind, name, []any{m1, g1, ok1}, []any{m2, g2, ok2})
			same("machines of", g2, got.MachinesOf(g2), want.MachinesOf(g2))
		case "delivery-group":
			g1, ok1 := got.DeliveryGroup(name)
			g2, ok2 := want.DeliveryGroup(name)
			same(kind, name, []any{g1, ok1}, []any{g2, ok2})
		default:
			t.Fatalf("unknown kind %q", kind)
		}
	}
	for _, u := range users {
		e1, e2 := got.EntitlementsOf(u), want.EntitlementsOf(u)
		same("entitlements of", u, entitled(e1), entitled(e2))
	}
}

// firstDifference describes the first object that differs between got
// and want.
func firstDifference(got, want *site.Config) string {
	if got.Settings != want.Settings {
		return fmt.Sprintf("settings %+v, want %+v", got.Settings, want.Settings)
	}
	gv, wv := reflect.ValueOf(got).Elem(), reflect.ValueOf(want).Elem()
	for i := range gv.NumField() {
		g, w := gv.Field(i), wv.Field(i)
		if g.Kind() != reflect.Slice || reflect.DeepEqual(g.Interface(), w.Interface()) {
			continue
		}
		field := gv.Type().Field(i).Name
		for j := range min(g.Len(), w.Len()) {
			if !reflect.DeepEqual(g.Index(j).Interface(), w.Index(j).Interface()) {
				return fmt.Sprintf("%s[%d] = %+v, want %+v", field, j, g.Index(j).Interface(), w.Index(j).Interface())
			}
		}
		return fmt.Sprintf("%s: %d objects, want %d", field, g.Len(), w.Len())
	}
	return "no difference"
}

// entitled renders what entitlements allow: each resource and its groups.
func entitled(e *broker.Entitlements) []string {
	var out []string
	for _, r := range e.Resources {
		out = append(out, r.Name+":"+strings.Join(e.Groups(r.Name), ","))
	}
	return out
}

// TestAdminChangesAreServedAtOnce makes changes through the admin API and
// expects each served by the broker when the answer comes, without the
// site being read back, and served as a reload of the site would serve
// it.
func TestAdminChangesAreServedAtOnce(t *testing.T) {
	f, counting, s := newCountingFixture(t)
	users := []string{"user0001", "user0002", "user0005", "newuser"}
	for _, step := range []struct {
		method, path, body string
		status             int
		objects            []string
		// reloads is set for changes made through the broker
		// (Broker.DeleteMachine), which still read the site back.
		reloads bool
	}{
		{method: "POST", path: "applications", status: 201, objects: []string{"resource new-app"},
			body: `{"name":"new-app","display_name":"New App","command_line":"C:\\new.exe","delivery_groups":["dg-01"]}`},
		{method: "PUT", path: "applications/new-app", status: 200, objects: []string{"resource new-app"},
			body: `{"display_name":"New App","folder":"Tools","command_line":"C:\\new.exe","delivery_groups":["dg-02","dg-01"]}`},
		{method: "POST", path: "users", status: 201, objects: []string{"user newuser"},
			body: `{"name":"newuser","groups":["GROUP-02","group-01"],"password":"a long password"}`},
		{method: "PUT", path: "users/user0001", status: 200, objects: []string{"user user0001"}, // keeps its password
			body: `{"display_name":"Renamed","groups":["group-02"]}`},
		{method: "PUT", path: "users/USER0002/password", status: 204, objects: []string{"user user0002"},
			body: `{"password":"another password"}`},
		{method: "POST", path: "entitlements", status: 201, objects: []string{"resource new-app"},
			body: `{"name":"e-new","delivery_group":"dg-01","resources":["new-app"],"users":["NEWUSER"]}`},
		{method: "PUT", path: "settings", status: 200, body: `{"name":"Renamed Farm","domain":"GEN"}`},
		{method: "POST", path: "machines", status: 201, objects: []string{"machine vda-new"},
			body: `{"name":"vda-new","catalog":"catalog-01","address":"10.9.9.9:1494","maintenance":true}`},
		{method: "PUT", path: "delivery-groups/dg-01", status: 200, objects: []string{"delivery-group dg-01", "machine vda-new"},
			body: `{"catalogs":["catalog-01"],"load_rules":{"max_sessions":{"enabled":true,"limit":7}},"reconnect":"always","zone_preference":"user-location"}`},
		{method: "POST", path: "applications", status: 400, objects: []string{"resource bad"},
			body: `{"name":"bad","display_name":"Bad","command_line":"C:\\bad.exe","delivery_groups":["nowhere"]}`},
		{method: "DELETE", path: "entitlements/e-new", status: 204, objects: []string{"resource new-app"}},
		{method: "DELETE", path: "applications/new-app", status: 204, objects: []string{"resource new-app"}},
		{method: "DELETE", path: "users/newuser", status: 204, objects: []string{"user newuser"}},
		{method: "DELETE", path: "delivery-groups/dg-01", status: 409, objects: []string{"delivery-group dg-01"}},
		{method: "DELETE", path: "machines/vda-new", status: 204, objects: []string{"machine vda-new"}, reloads: true},
	} {
		what := step.method + " " + step.path
		var body any
		if step.body != "" {
			body = step.body
		}
		counting.loads.Store(0)
		r := f.do(step.method, "/api/v1/admin/"+step.path, body)
		if r.status != step.status {
			t.Fatalf("%s: status %d, want %d: %s", what, r.status, step.status, r.body)
		}
		if n := counting.loads.Load(); n > 0 && !step.reloads {
			t.Errorf("%s: the site was read back %d times", what, n)
		}
		wantServed(t, what, f.broker, s, step.objects, users)
	}
}

// TestConcurrentAdminChanges makes changes from several clients at once
// while users enumerate: the broker ends up serving the last version,
// as a reload would, and every change.
func TestConcurrentAdminChanges(t *testing.T) {
	f, _, s := newCountingFixture(t)
	const clients, perClient = 4, 5
	done := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			f.broker.Resources(context.Background(), "user0001")
			c := f.broker.Snapshot().Config()
			n := 0
			for _, r := range c.Applications {
				n += len(slices.Concat(r.DeliveryGroups))
			}
			for _, u := range c.Users {
				n += len(slices.Concat(u.Groups))
			}
		}
	})
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			for j := range perClient {
				body := fmt.Sprintf(`{"name":"app-%d-%d","display_name":"App","command_line":"C:\\app.exe","delivery_groups":["dg-01"]}`, i, j)
				if r := f.do("POST", "/api/v1/admin/applications", body); r.status != 201 {
					t.Errorf("POST: %d %s", r.status, r.body)
				}
			}
		})
	}
	wg.Wait()
	close(done)
	readers.Wait()
	var objects []string
	for i := range clients {
		for j := range perClient {
			objects = append(objects, fmt.Sprintf("resource app-%d-%d", i, j))
		}
	}
	wantServed(t, "concurrent changes", f.broker, s, objects, []string{"user0001"})
	for _, o := range objects {
		if _, ok := f.broker.Snapshot().Resource(strings.TrimPrefix(o, "resource ")); !ok {
			t.Errorf("%s is not served", o)
		}
	}
}
