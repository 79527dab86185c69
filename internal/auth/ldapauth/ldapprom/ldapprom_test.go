package ldapprom_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/usher-vdi/usher/internal/auth/ldapauth"
	"github.com/usher-vdi/usher/internal/auth/ldapauth/ldapprom"
	"github.com/usher-vdi/usher/internal/dirserver"
	"github.com/usher-vdi/usher/internal/dirserver/dirservertest"
)

func TestMetrics(t *testing.T) {
	m := ldapprom.New()
	reg := prometheus.NewPedanticRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	m.Operation("ldaps://a:636", ldapauth.OpUserBind, ldapauth.ResultOK, 2*time.Millisecond)
	m.Operation("ldaps://a:636", ldapauth.OpUserBind, ldapauth.ResultRefused, 3*time.Millisecond)
	m.Operation("ldaps://a:636", ldapauth.OpUserBind, ldapauth.ResultOK, time.Millisecond)
	m.Pool("ldaps://a:636", 2, 4)
	m.Pool("ldaps://a:636", 1, 4)
	m.GroupCache(true)
	m.GroupCache(false)
	m.GroupCache(true)
	want := `
# HELP usher_directory_connections Connections of a server's pool: state in_use (serving a logon now) or open (all of them).
# TYPE usher_directory_connections gauge
usher_directory_connections{server="ldaps://a:636",state="in_use"} 1
usher_directory_connections{server="ldaps://a:636",state="open"} 4
# HELP usher_directory_group_cache_lookups_total Lookups of users' group memberships in the cache, by result: hit (no directory operation) or miss.
# TYPE usher_directory_group_cache_lookups_total counter
usher_directory_group_cache_lookups_total{result="hit"} 2
usher_directory_group_cache_lookups_total{result="miss"} 1
# HELP usher_directory_operations_total Directory operations by server, kind (dial, service_bind, user_bind, user_search, group_search, root_dse) and result (ok, refused, unavailable, canceled).
# TYPE usher_directory_operations_total counter
usher_directory_operations_total{op="user_bind",result="ok",server="ldaps://a:636"} 2
usher_directory_operations_total{op="user_bind",result="refused",server="ldaps://a:636"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "usher_directory_connections",
		"usher_directory_group_cache_lookups_total", "usher_directory_operations_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "usher_directory_operation_duration_seconds"); n != 1 {
		t.Fatalf("%d latency series, want 1 (one server, one kind)", n)
	}
}

// TestFromARealDirectory counts what a real logon does: a cold logon's
// operations, then a warm one's group-cache hit.
func TestFromARealDirectory(t *testing.T) {
	d := dirservertest.Start(t, dirserver.Options{Users: 20})
	m := ldapprom.New()
	reg := prometheus.NewPedanticRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	srv := d.Servers[0]
	dir, err := ldapauth.New(ldapauth.Config{Servers: []string{srv.LDAPS}, CAPEM: d.CAPEM, BindDN: d.BindDN, BindPassword: d.BindPassword,
		BaseDNs: []string{dirserver.BaseDN}, UserAttr: "uid"}, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	ctx := context.Background()
	for range 2 {
		if _, err := dir.Authenticate(ctx, "user0001", d.UserPassword); err != nil {
			t.Fatal(err)
		}
	}
	binds := testutil.ToFloat64(counter(t, reg, "usher_directory_operations_total", map[string]string{"server": srv.LDAPS, "op": "user_bind", "result": "ok"}))
	hits := testutil.ToFloat64(counter(t, reg, "usher_directory_group_cache_lookups_total", map[string]string{"result": "hit"}))
	if binds != 2 || hits != 1 {
		t.Fatalf("two logons: %v user binds and %v group-cache hits, want 2 and 1", binds, hits)
	}
}

// counter finds one series of a gathered family as a collector for
// testutil.ToFloat64.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) prometheus.Collector {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, mt := range f.GetMetric() {
			match := true
			for _, l := range mt.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					match = false
				}
			}
			if match {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
				c.Add(mt.GetCounter().GetValue())
				return c
			}
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return nil
}
