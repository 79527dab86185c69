package lhc

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
)

// outagePermits is every method of site.Tx, and of the objects its
// methods hand out ("Sessions.Create"), that outage mode lets through to
// the local copy: reads, and the runtime writes of brokering. Every
// other method must answer site.ESiteDBUnavailable in outage mode. A
// method added to site.Tx (or to a collection, the sessions, ...) fails
// TestOutageTxFailsClosed until it is refused or listed here.
var outagePermits = []string{
	// The configuration as copied, read only.
	"ConfigVersion", "ConfigChanges", "Settings", "Directory", "Secret",
	"Zones.Get", "Zones.List", "Catalogs.Get", "Catalogs.List", "Groups.Get", "Groups.List",
	"Users.Get", "Users.List", "Machines.Get", "Machines.List", "DeliveryGroups.Get", "DeliveryGroups.List",
	"Applications.Get", "Applications.List", "Desktops.Get", "Desktops.List",
	"Entitlements.Get", "Entitlements.List", "Targets.Get", "Targets.List", "Admins.Get", "Admins.List",
	"Boots.List", "Preferences.Get",
	// Runtime state: registrations, enrolments, lock-outs, brokers.
	"MachineStatus", "SetMachineStatus", "MachineStatuses", "MachineSessions",
	"MachineCredential", "SetMachineCredential",
	"AccountLock", "SetAccountLock", "AccountLocks",
	"Brokers.Get", "Brokers.List", "Brokers.Create", "Brokers.Update", "Brokers.Delete",
	// Sessions, journaled for the write-back (Delete is refused).
	"Sessions.Get", "Sessions.List", "Sessions.Create", "Sessions.Update",
}

// TestOutageTxFailsClosed walks site.Tx's methods, and those of the
// objects its methods return, by reflection, and calls each with zero
// arguments on a Store in outage mode: what outagePermits lists must not
// be refused (it may fail otherwise, on its zero arguments); everything
// else must be refused with site.ESiteDBUnavailable.
func TestOutageTxFailsClosed(t *testing.T) {
	ctx := context.Background()
	s := open(t, newPrimary(t), t.TempDir())
	if _, err := s.Force(ctx, true); err != nil {
		t.Fatal(err)
	}
	if !s.InOutage() {
		t.Fatal("forced outage: not in outage mode")
	}
	var seen []string
	txType := reflect.TypeFor[site.Tx]()
	for i := range txType.NumMethod() {
		m := txType.Method(i)
		if m.Type.NumIn() == 0 && m.Type.NumOut() == 1 && m.Type.Out(0).Kind() == reflect.Interface {
			// An accessor: walk what it hands out.
			for j := range m.Type.Out(0).NumMethod() {
				sub := m.Type.Out(0).Method(j)
				name := m.Name + "." + sub.Name
				seen = append(seen, name)
				checkOutageCall(t, s, name, func(tx site.Tx) reflect.Value {
					return reflect.ValueOf(tx).MethodByName(m.Name).Call(nil)[0].Elem().MethodByName(sub.Name)
				})
			}
			continue
		}
		seen = append(seen, m.Name)
		checkOutageCall(t, s, m.Name, func(tx site.Tx) reflect.Value { return reflect.ValueOf(tx).MethodByName(m.Name) })
	}
	for _, p := range outagePermits {
		if !slices.Contains(seen, p) {
			t.Errorf("outagePermits lists %s, which site.Tx has not: remove it", p)
		}
	}
}

// checkOutageCall calls the method that method picks out of an outage
// transaction, in an Update of s rolled back after it, with a context and
// zero values as arguments, and checks that it is refused unless
// outagePermits lists it.
func checkOutageCall(t *testing.T, s *Store, name string, method func(site.Tx) reflect.Value) {
	t.Helper()
	ctx := context.Background()
	var got error
	_ = s.Update(ctx, func(tx site.Tx) error {
		fn := method(tx)
		ft := fn.Type()
		var args []reflect.Value
		for i := range ft.NumIn() {
			in := ft.In(i)
			switch {
			case ft.IsVariadic() && i == ft.NumIn()-1:
			case in == reflect.TypeFor[context.Context]():
				args = append(args, reflect.ValueOf(ctx))
			default:
				args = append(args, reflect.Zero(in))
			}
		}
		out := fn.Call(args)
		if last := out[len(out)-1]; last.Type() == reflect.TypeFor[error]() && !last.IsNil() {
			got = last.Interface().(error)
		}
		return errRollBack
	})
	refused := site.ErrorCode(got) == site.ESiteDBUnavailable
	switch permitted := slices.Contains(outagePermits, name); {
	case permitted && refused:
		t.Errorf("%s is refused in outage mode (%v), but outagePermits lists it", name, got)
	case !permitted && !refused:
		t.Errorf("%s is let through in outage mode (error %v): refuse it in outageTx, or list it in outagePermits if outage mode may do it", name, got)
	}
}

// errRollBack rolls a test's transaction back.
var errRollBack = rollBack{}

type rollBack struct{}

func (rollBack) Error() string { return "roll back (test)" }
