package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// Run runs the conformance suite. open returns a new, empty store for one
// subtest and arranges for it to be closed when the subtest ends; Close
// may then be called on a store the subtest closed already. Subtests run
// in parallel, each on its own store.
func Run(t *testing.T, open func(t *testing.T) site.Store) {
	t.Helper()
	RunWith(t, open, Capabilities{})
}

// Capabilities tell the suite how much of the contract a store under test
// holds. The zero value is the whole of it, which every site DB holds.
type Capabilities struct {
	// Seed makes the store a copy of a site, as the Local Host Cache in
	// outage mode serves: one whose configuration, admins and secrets
	// are written by whoever copies the site (Seed, which writes fn's
	// changes into the copy as the copy's maker would), not through the
	// store, which refuses them, and which holds no change history nor
	// users' preferences. The suite then seeds its fixtures with Seed and
	// runs only the parts of the contract a copy holds (the runtime
	// state: machine statuses and credentials, sessions, placements,
	// session reports, heartbeats, lock-outs, brokers); each other part
	// is skipped, saying why.
	Seed func(ctx context.Context, s site.Store, fn func(site.Tx) error) error
}

// Reasons a part of the contract does not hold on a copy of a site.
const (
	copyRefusesConfig  = "a copy of a site refuses configuration writes, which are the site DB's alone (its fixtures are seeded; what it refuses, lhc's TestOutageTxFailsClosed checks)"
	copyRefusesSecrets = "a copy of a site refuses secret writes, which are the site DB's alone"
	copyHasNoHistory   = "a copy of a site holds no change history: it refuses its reads and writes"
	copyHasNoPrefs     = "a copy of a site holds no users' preferences (every user has NoPreferences) and refuses their writes"
	copyHasNoBoots     = "a copy of a site refuses configuration writes (targets) and holds no boot log"
	copyDeletesNothing = "a copy of a site refuses deleting a machine (a configuration write), and sessions are never deleted from it"
	copyAssignsNothing = "a copy of a site makes no new assignment (a configuration write): the launch is refused"
)

// RunWith runs the conformance suite over a store that holds the part of
// the contract caps says, as Run does.
func RunWith(t *testing.T, open func(t *testing.T) site.Store, caps Capabilities) {
	t.Helper()
	suites := []struct {
		name string
		run  func(*testing.T, func(*testing.T) site.Store)
		// notOnCopy is why the part does not hold on a copy of a site
		// (Capabilities.Seed), "" when it does.
		notOnCopy string
	}{
		{"Collections", testCollections, copyRefusesConfig},
		{"AccountNames", testAccountNames, copyRefusesConfig},
		{"References", testReferences, copyRefusesConfig},
		{"ResourceNamespace", testResourceNamespace, copyRefusesConfig},
		{"Paging", testPaging, copyRefusesConfig},
		{"Transactions", testTransactions, copyRefusesConfig},
		{"ConfigVersion", testConfigVersion, copyRefusesConfig},
		{"ConfigChanges", testConfigChanges, copyRefusesConfig},
		{"ChangeHistory", testChangeHistory, copyHasNoHistory},
		{"Preferences", testPreferences, copyHasNoPrefs},
		{"Settings", testSettings, copyRefusesConfig},
		{"Directory", testDirectory, copyRefusesConfig},
		{"MachineStatus", testMachineStatus, ""},
		{"Sessions", testSessions, ""},
		{"DeleteMachineWithSessions", testDeleteMachineWithSessions, copyDeletesNothing},
		{"MachineCredential", testMachineCredential, ""},
		{"Config", testConfig, copyRefusesConfig},
		{"Concurrency", testConcurrency, copyRefusesConfig},
		{"Place", testPlace, ""},
		{"Secrets", testSecrets, copyRefusesSecrets},
		{"Brokers", testBrokers, ""},
		{"Lockout", testLockout, ""},
		{"ChangeSessions", testChangeSessions, ""},
		{"RecordHeartbeats", testRecordHeartbeats, ""},
		{"Targets", testTargets, copyHasNoBoots},
	}
	if caps.Seed != nil {
		inner := open
		open = func(t *testing.T) site.Store { return seeded{inner(t), caps.Seed} }
	}
	// The parts are independent (each opens its own stores) and spend
	// their time waiting on the store's disk or server: they run side by
	// side, as many at once as go test's -parallel lets.
	for _, s := range suites {
		t.Run(s.name, func(t *testing.T) {
			if caps.Seed != nil && s.notOnCopy != "" {
				t.Skip(s.notOnCopy)
			}
			t.Parallel()
			s.run(t, open)
		})
	}
}

// seeded is a store under test that is a copy of a site, with the Seed
// that writes its fixtures.
type seeded struct {
	site.Store
	seed func(ctx context.Context, s site.Store, fn func(site.Tx) error) error
}

// onCopy reports whether s is a copy of a site (Capabilities.Seed).
func onCopy(s site.Store) bool {
	_, ok := s.(seeded)
	return ok
}

// notOnCopy skips t, saying why, when s is a copy of a site.
func notOnCopy(t *testing.T, s site.Store, why string) {
	t.Helper()
	if onCopy(s) {
		t.Skip(why)
	}
}

// setUp writes a subtest's fixtures: through Seed on a copy of a site,
// else in an Update, failing the test on an error.
func setUp(t *testing.T, s site.Store, fn func(ctx context.Context, tx site.Tx) error) {
	t.Helper()
	ctx := t.Context()
	if c, ok := s.(seeded); ok {
		if err := c.seed(ctx, c.Store, func(tx site.Tx) error { return fn(ctx, tx) }); err != nil {
			t.Fatalf("seed: %v", err)
		}
		return
	}
	update(t, s, fn)
}

// errTest is what test transactions return to roll back.
var errTest = errors.New("storetest: roll back")

// update runs fn in s.Update and fails the test on an error.
func update(t *testing.T, s site.Store, fn func(ctx context.Context, tx site.Tx) error) {
	t.Helper()
	ctx := t.Context()
	if err := s.Update(ctx, func(tx site.Tx) error { return fn(ctx, tx) }); err != nil {
		t.Fatalf("update: %v", err)
	}
}

// view runs fn in s.View and fails the test on an error.
func view(t *testing.T, s site.Store, fn func(ctx context.Context, tx site.Tx) error) {
	t.Helper()
	ctx := t.Context()
	if err := s.View(ctx, func(tx site.Tx) error { return fn(ctx, tx) }); err != nil {
		t.Fatalf("view: %v", err)
	}
}

// try runs fn in its own Update and returns fn's error; the transaction is
// rolled back when fn fails.
func try(t *testing.T, s site.Store, fn func(ctx context.Context, tx site.Tx) error) error {
	t.Helper()
	ctx := t.Context()
	return s.Update(ctx, func(tx site.Tx) error { return fn(ctx, tx) })
}

// wantCode fails the test unless err carries the site error code.
func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := site.ErrorCode(err); got != code {
		t.Fatalf("got error %v (code %q), want code %q", err, got, code)
	}
}

// wantMessage fails the test unless err carries code and a client-safe
// message that contains every one of parts.
func wantMessage(t *testing.T, err error, code string, parts ...string) {
	t.Helper()
	wantCode(t, err, code)
	msg := site.ErrorMessage(err)
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Fatalf("error message %q does not mention %s", msg, p)
		}
	}
}

// version returns the store's committed configuration version.
func version(t *testing.T, s site.Store) int64 {
	t.Helper()
	var v int64
	view(t, s, func(ctx context.Context, tx site.Tx) (err error) {
		v, err = tx.ConfigVersion(ctx)
		return err
	})
	return v
}

// wantVersion fails the test unless the committed configuration version is
// want.
func wantVersion(t *testing.T, s site.Store, want int64) {
	t.Helper()
	if got := version(t, s); got != want {
		t.Fatalf("config version = %d, want %d", got, want)
	}
}

// q quotes a name as error messages do.
func q(kind site.Kind, name string) string { return fmt.Sprintf("%s %q", kind, name) }

// same reports whether a and b are deeply equal, counting an empty slice
// equal to nil and times equal when they are the same instant.
func same(a, b any) bool {
	return reflect.DeepEqual(canonical(reflect.ValueOf(a)).Interface(), canonical(reflect.ValueOf(b)).Interface())
}

var timeType = reflect.TypeFor[time.Time]()

// canonical returns a copy of v with empty slices nil and times in UTC.
func canonical(v reflect.Value) reflect.Value {
	switch {
	case !v.IsValid():
		return v
	case v.Type() == timeType:
		return reflect.ValueOf(v.Interface().(time.Time).UTC())
	}
	switch v.Kind() {
	case reflect.Slice:
		if v.Len() == 0 {
			return reflect.Zero(v.Type())
		}
		out := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			out.Index(i).Set(canonical(v.Index(i)))
		}
		return out
	case reflect.Struct:
		out := reflect.New(v.Type()).Elem()
		out.Set(v)
		for i := range v.NumField() {
			if f := out.Field(i); f.CanSet() {
				f.Set(canonical(v.Field(i)))
			}
		}
		return out
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		out := reflect.New(v.Type().Elem())
		out.Elem().Set(canonical(v.Elem()))
		return out
	}
	return v
}

// ms is a time with millisecond precision, which every store keeps; a nil
// loc is UTC.
func ms(year int, month time.Month, day, hour, min, sec, milli int, loc *time.Location) time.Time {
	if loc == nil {
		loc = time.UTC
	}
	return time.Date(year, month, day, hour, min, sec, milli*int(time.Millisecond), loc)
}

// names returns the names of objects.
func names[T any](objs []T, name func(T) string) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = name(o)
	}
	return out
}
