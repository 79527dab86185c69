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
	suites := []struct {
		name string
		run  func(*testing.T, func(*testing.T) site.Store)
	}{
		{"Collections", testCollections},
		{"AccountNames", testAccountNames},
		{"References", testReferences},
		{"ResourceNamespace", testResourceNamespace},
		{"Paging", testPaging},
		{"Transactions", testTransactions},
		{"ConfigVersion", testConfigVersion},
		{"ConfigChanges", testConfigChanges},
		{"ChangeHistory", testChangeHistory},
		{"Preferences", testPreferences},
		{"Settings", testSettings},
		{"Directory", testDirectory},
		{"MachineStatus", testMachineStatus},
		{"Sessions", testSessions},
		{"DeleteMachineWithSessions", testDeleteMachineWithSessions},
		{"MachineCredential", testMachineCredential},
		{"Config", testConfig},
		{"Concurrency", testConcurrency},
		{"Place", testPlace},
		{"Secrets", testSecrets},
		{"Brokers", testBrokers},
		{"Lockout", testLockout},
		{"ChangeSessions", testChangeSessions},
		{"RecordHeartbeats", testRecordHeartbeats},
		{"Targets", testTargets},
	}
	for _, s := range suites {
		t.Run(s.name, func(t *testing.T) {
			s.run(t, open)
		})
	}
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
