package broker_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitetest"
)

// testSite has a multi-session group "Apps" of 57 machines publishing
// "calc", a pooled single-session group "VDI" of 20 machines publishing
// "vdi", an assigned group "Mine" of 3 machines publishing "mine", and
// users u0001..uN in group "all"; u0001 is also in "vip", the only group
// entitled to the "secret" application.
func testSite(users, maxSessions int) *site.Config {
	c := &site.Config{Settings: site.Settings{Name: "t", Domain: "T"}}
	c.Zones = []site.Zone{{Name: "z", Primary: true}}
	c.Catalogs = []site.Catalog{
		{Name: "rdsh", Kind: site.MultiSession, Zone: "z"},
		{Name: "pool", Kind: site.SingleSessionPooled, Zone: "z"},
		{Name: "own", Kind: site.SingleSessionAssigned, Zone: "z"},
	}
	for i := 1; i <= 57; i++ {
		c.Machines = append(c.Machines, site.Machine{Name: fmt.Sprintf("rdsh-%02d", i), Catalog: "rdsh", Address: fmt.Sprintf("rdsh-%02d.test:3389", i)})
	}
	for i := 1; i <= 20; i++ {
		c.Machines = append(c.Machines, site.Machine{Name: fmt.Sprintf("pool-%02d", i), Catalog: "pool", Address: fmt.Sprintf("pool-%02d.test:3389", i), MaxSessions: 1})
	}
	for i := 1; i <= 3; i++ {
		c.Machines = append(c.Machines, site.Machine{Name: fmt.Sprintf("own-%02d", i), Catalog: "own", Address: fmt.Sprintf("own-%02d.test:3389", i)})
	}
	apps := site.NewDeliveryGroup("Apps", "rdsh")
	apps.LoadRules.MaxSessions.Limit = maxSessions
	apps.LoadRules.ConcurrentLogons.Enabled = false
	vdi := site.NewDeliveryGroup("VDI", "pool")
	vdi.Reconnect = site.ReconnectDisconnectedOnly
	c.DeliveryGroups = []site.DeliveryGroup{apps, vdi, site.NewDeliveryGroup("Mine", "own")}
	c.Applications = []site.Resource{
		{Kind: site.Application, Name: "calc", DisplayName: "Calculator", CommandLine: "/usr/bin/calc", DeliveryGroups: []string{"Apps"}},
		{Kind: site.Application, Name: "secret", DisplayName: "Secret", CommandLine: "/usr/bin/secret", DeliveryGroups: []string{"Apps"}},
	}
	c.Desktops = []site.Resource{
		{Kind: site.Desktop, Name: "vdi", DisplayName: "Pooled", DeliveryGroups: []string{"VDI"}},
		{Kind: site.Desktop, Name: "mine", DisplayName: "Mine", DeliveryGroups: []string{"Mine"}},
	}
	c.Groups = []site.Group{{Name: "all"}, {Name: "vip"}}
	for i := 1; i <= users; i++ {
		u := site.User{Name: fmt.Sprintf("u%04d", i), Groups: []string{"all"}}
		if i == 1 {
			u.Groups = append(u.Groups, "vip")
		}
		c.Users = append(c.Users, u)
	}
	c.Entitlements = []site.Entitlement{
		{Name: "apps", DeliveryGroup: "Apps", Groups: []string{"all"}},
		{Name: "secret", DeliveryGroup: "Apps", Resources: []string{"secret"}, Groups: []string{"vip"}},
		{Name: "vdi", DeliveryGroup: "VDI", Groups: []string{"all"}},
		{Name: "mine", DeliveryGroup: "Mine", Groups: []string{"all"}},
	}
	return c
}

type harness struct {
	t       *testing.T
	store   site.Store
	control *sitetest.Control
	b       *broker.Broker
	cfg     *site.Config
}

// newHarness runs a broker over testSite (sitetest), with every machine
// registered; mod changes the broker's configuration.
func newHarness(t *testing.T, users, maxSessions int, mod func(*broker.Config)) *harness {
	t.Helper()
	s := sitetest.New(t, sitetest.Options{Config: testSite(users, maxSessions), Registered: true, Broker: mod})
	return &harness{t: t, store: s.Store, control: s.Control, b: s.Broker, cfg: s.Config}
}

// register registers machine again, as its VDA does after a silence.
func (h *harness) register(machine string) {
	h.t.Helper()
	i := slices.IndexFunc(h.cfg.Machines, func(m site.Machine) bool { return m.Name == machine })
	if err := h.b.Register(context.Background(), sitetest.Registration(i, machine)); err != nil {
		h.t.Fatal(err)
	}
}

// launchAll launches resource for users u0001..uN at once and returns the
// acknowledged launches and the error codes of the rest.
func (h *harness) launchAll(n int, resource string) (map[string]*broker.Launch, map[string]int) {
	h.t.Helper()
	var mu sync.Mutex
	ok := map[string]*broker.Launch{}
	failed := map[string]int{}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		user := fmt.Sprintf("u%04d", i)
		wg.Go(func() {
			<-start
			l, err := h.b.Launch(context.Background(), broker.LaunchRequest{User: user, Resource: resource})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed[site.ErrorCode(err)]++
				return
			}
			ok[user] = l
		})
	}
	close(start)
	wg.Wait()
	return ok, failed
}

// check reads the final state from the site DB and verifies the
// invariants: every acknowledged launch has exactly its session, no
// session exists that no launch acknowledged, no machine is over its
// limit, and each machine's counter matches its sessions.
func (h *harness) check(ok map[string]*broker.Launch, limit map[string]int) map[string]int {
	h.t.Helper()
	ctx := context.Background()
	perMachine := map[string]int{}
	err := h.store.View(ctx, func(tx site.Tx) error {
		p, err := tx.Sessions().List(ctx, site.SessionFilter{}, site.ListOptions{})
		if err != nil {
			return err
		}
		byID := map[string]site.Session{}
		for _, s := range p.Items {
			if s.State == site.SessionLoggedOff {
				continue
			}
			byID[s.ID] = s
			perMachine[s.Machine]++
		}
		for user, l := range ok {
			s, found := byID[l.Session.ID]
			if !found {
				h.t.Errorf("lost: the launch acknowledged to %s (session %s) has no session", user, l.Session.ID)
				continue
			}
			if s.User != user || s.Machine != l.Session.Machine {
				h.t.Errorf("session %s is %s on %s; acknowledged to %s on %s", s.ID, s.User, s.Machine, user, l.Session.Machine)
			}
			delete(byID, l.Session.ID)
		}
		for id, s := range byID {
			h.t.Errorf("unexpected: session %s of %s on %s was never acknowledged", id, s.User, s.Machine)
		}
		for m, n := range perMachine {
			if lim, has := limit[m]; has && n > lim {
				h.t.Errorf("machine %s holds %d sessions, over its limit of %d", m, n, lim)
			}
			st, err := tx.MachineStatus(ctx, m)
			if err != nil {
				return err
			}
			if st.Sessions != n {
				h.t.Errorf("machine %s counts %d sessions but holds %d", m, st.Sessions, n)
			}
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return perMachine
}

func TestConcurrentLaunchesSpreadEvenly(t *testing.T) {
	h := newHarness(t, 2000, 250, nil)
	ok, failed := h.launchAll(2000, "calc")
	if len(ok) != 2000 {
		t.Fatalf("%d of 2000 launches acknowledged; failures %v", len(ok), failed)
	}
	per := h.check(ok, nil)
	lo, hi := 1<<30, 0
	for i := 1; i <= 57; i++ {
		n := per[fmt.Sprintf("rdsh-%02d", i)]
		lo, hi = min(lo, n), max(hi, n)
	}
	if hi-lo > 1 {
		t.Fatalf("sessions spread from %d to %d per machine across 57 equal machines; want within one: %v", lo, hi, per)
	}
}

func TestConcurrentLaunchesNeverOverfill(t *testing.T) {
	h := newHarness(t, 3000, 10, nil) // 57 x 10 = 570 seats for 3,000 users
	ok, failed := h.launchAll(3000, "calc")
	if len(ok) != 570 || failed[site.ENoCapacity] != 2430 {
		t.Fatalf("%d acknowledged, failures %v; want 570 and 2430 no_capacity", len(ok), failed)
	}
	limits := map[string]int{}
	for i := 1; i <= 57; i++ {
		limits[fmt.Sprintf("rdsh-%02d", i)] = 10
	}
	per := h.check(ok, limits)
	for m, n := range per {
		if n != 10 {
			t.Errorf("machine %s has %d sessions; all 57 should be full at 10", m, n)
		}
	}
}

func TestConcurrentPooledDesktopsOneUserEach(t *testing.T) {
	h := newHarness(t, 200, 250, nil)
	ok, failed := h.launchAll(200, "vdi")
	if len(ok) != 20 || failed[site.ENoCapacity] != 180 {
		t.Fatalf("%d acknowledged, failures %v; want 20 and 180 no_capacity", len(ok), failed)
	}
	limits := map[string]int{}
	for i := 1; i <= 20; i++ {
		limits[fmt.Sprintf("pool-%02d", i)] = 1
	}
	users := map[string]string{}
	for user, l := range ok {
		if other, taken := users[l.Session.Machine]; taken {
			t.Errorf("desktop %s given to %s and %s", l.Session.Machine, other, user)
		}
		users[l.Session.Machine] = user
	}
	h.check(ok, limits)
}

func TestEntitlements(t *testing.T) {
	h := newHarness(t, 3, 250, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		user, resource string
		ok             bool
	}{
		{"u0001", "secret", true},
		{"u0002", "secret", false},
		{"u0002", "nonexistent", false},
		{"nobody", "calc", false},
	} {
		_, err := h.b.Launch(ctx, broker.LaunchRequest{User: tc.user, Resource: tc.resource})
		if tc.ok != (err == nil) {
			t.Errorf("%s launching %s: err %v", tc.user, tc.resource, err)
		}
		if !tc.ok && err != broker.ErrNotEntitled {
			t.Errorf("%s launching %s: %v, want ErrNotEntitled whether or not it exists", tc.user, tc.resource, err)
		}
	}
	names := func(user string) []string {
		var out []string
		for _, r := range h.b.Resources(ctx, user).Resources {
			out = append(out, r.Name)
		}
		return out
	}
	if got := fmt.Sprint(names("u0001")); got != "[calc mine vdi secret]" {
		t.Errorf("u0001 sees %s", got)
	}
	if got := fmt.Sprint(names("u0002")); got != "[calc mine vdi]" {
		t.Errorf("u0002 sees %s", got)
	}
	if a, b := h.b.Resources(ctx, "u0002"), h.b.Resources(ctx, "u0003"); a != b {
		t.Error("users with the same groups do not share one resolution")
	}
}

func TestReconnection(t *testing.T) {
	h := newHarness(t, 3, 250, nil)
	ctx := context.Background()
	first, err := h.b.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: "calc", ClientName: "laptop"})
	if err != nil {
		t.Fatal(err)
	}
	event := func(e broker.SessionChange) {
		t.Helper()
		err := h.b.SessionEvent(ctx, broker.SessionEvent{Machine: first.Session.Machine, SessionID: first.Session.ID, Change: e})
		if err != nil {
			t.Fatal(err)
		}
	}
	event(broker.ChangeLogon)
	event(broker.ChangeDisconnect)
	again, err := h.b.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: "calc", ClientName: "phone"})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Reconnected || again.Session.ID != first.Session.ID || again.Session.Machine != first.Session.Machine {
		t.Fatalf("relaunch went to session %s on %s (reconnected %v); want %s on %s",
			again.Session.ID, again.Session.Machine, again.Reconnected, first.Session.ID, first.Session.Machine)
	}
	if again.Ticket == first.Ticket {
		t.Fatal("a reconnection reused the first ticket")
	}
	// Another application of the same group shares the session.
	event(broker.ChangeReconnect)
	shared, err := h.b.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: "secret"})
	if err != nil || shared.Session.ID != first.Session.ID {
		t.Fatalf("second application: %v, session %v; want the shared session %s", err, shared, first.Session.ID)
	}
	// After logoff, a launch makes a new session.
	event(broker.ChangeLogoff)
	fresh, err := h.b.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: "calc"})
	if err != nil || fresh.Reconnected || fresh.Session.ID == first.Session.ID {
		t.Fatalf("launch after logoff: %+v, %v", fresh, err)
	}

	t.Run("disconnected-only policy", func(t *testing.T) {
		l, err := h.b.Launch(ctx, broker.LaunchRequest{User: "u0002", Resource: "vdi"})
		if err != nil {
			t.Fatal(err)
		}
		h.b.SessionEvent(ctx, broker.SessionEvent{Machine: l.Session.Machine, SessionID: l.Session.ID, Change: broker.ChangeLogon})
		// Active elsewhere: the policy refuses to take it over, and the
		// user gets a second desktop.
		l2, err := h.b.Launch(ctx, broker.LaunchRequest{User: "u0002", Resource: "vdi"})
		if err != nil || l2.Reconnected || l2.Session.Machine == l.Session.Machine {
			t.Fatalf("second launch of an active pooled desktop: %+v, %v", l2, err)
		}
	})
}

// TestReconnectionToALostSession: the site holds a live session its VDA
// no longer has (its logoff's report was lost): a launch that would go
// back to it gets a new session instead, and the lost one is ended, so
// that the user does not hold two.
func TestReconnectionToALostSession(t *testing.T) {
	h := newHarness(t, 3, 250, nil)
	ctx := context.Background()
	first, err := h.b.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: "calc"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.b.SessionEvent(ctx, broker.SessionEvent{Machine: first.Session.Machine, SessionID: first.Session.ID, Change: broker.ChangeLogon}); err != nil {
		t.Fatal(err)
	}
	h.control.Lose(first.Session.ID)
	again, err := h.b.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: "calc"})
	if err != nil {
		t.Fatal(err)
	}
	if again.Reconnected || again.Session.ID == first.Session.ID {
		t.Fatalf("launch went back to the lost session %s (reconnected %v)", again.Session.ID, again.Reconnected)
	}
	var live []string
	err = h.store.View(ctx, func(tx site.Tx) error {
		p, err := tx.Sessions().List(ctx, site.SessionFilter{User: "u0001", Live: true}, site.ListOptions{})
		for _, s := range p.Items {
			live = append(live, s.ID)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 1 || live[0] != again.Session.ID {
		t.Fatalf("u0001's live sessions: %v; want only %s", live, again.Session.ID)
	}
}

func TestAssignedDesktop(t *testing.T) {
	h := newHarness(t, 5, 250, nil)
	ctx := context.Background()
	l, err := h.b.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	h.b.SessionEvent(ctx, broker.SessionEvent{Machine: l.Session.Machine, SessionID: l.Session.ID, Change: broker.ChangeLogoff})
	if err := h.b.Refresh(ctx); err != nil { // the assignment is configuration
		t.Fatal(err)
	}
	again, err := h.b.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: "mine"})
	if err != nil || again.Session.Machine != l.Session.Machine {
		t.Fatalf("second launch: %+v, %v; want machine %s", again, err, l.Session.Machine)
	}
	for _, u := range []string{"u0002", "u0003"} {
		other, err := h.b.Launch(ctx, broker.LaunchRequest{User: u, Resource: "mine"})
		if err != nil || other.Session.Machine == l.Session.Machine {
			t.Fatalf("%s: %+v, %v", u, other, err)
		}
	}
	if _, err := h.b.Launch(ctx, broker.LaunchRequest{User: "u0004", Resource: "mine"}); site.ErrorCode(err) != site.ENoCapacity {
		t.Fatalf("fourth user of three assigned machines: %v, want no capacity", err)
	}
	var m site.Machine
	h.store.View(ctx, func(tx site.Tx) (err error) { m, err = tx.Machines().Get(ctx, l.Session.Machine); return err })
	if m.AssignedUser != "u0001" {
		t.Fatalf("machine %s assigned to %q, want u0001", m.Name, m.AssignedUser)
	}
}

func TestRefusingVDAIsSkipped(t *testing.T) {
	h := newHarness(t, 100, 250, nil)
	broken := map[string]bool{"rdsh-01": true, "rdsh-02": true, "rdsh-30": true}
	for m := range broken {
		h.control.Refuse(m)
	}
	ok, failed := h.launchAll(100, "calc")
	if len(ok) != 100 {
		t.Fatalf("%d of 100 launched; failures %v", len(ok), failed)
	}
	for _, l := range ok {
		if broken[l.Session.Machine] {
			t.Fatalf("session placed on refusing machine %s", l.Session.Machine)
		}
	}
	h.check(ok, nil)
	if n := len(h.control.Prepared("")); n != 0 {
		t.Fatalf("%d prepares went to an empty control URL: the registered control URL was lost", n)
	}
	for m := range broken {
		if n := len(h.control.Prepared(m)); n != 0 {
			t.Errorf("refusing machine %s recorded %d prepares", m, n)
		}
	}
}

// TestSilentMachineStopsGettingLaunches runs on a synctest bubble: the
// broker's sweep and the heartbeats run on its fake clock, so the test sees
// the machine expire at the exact sweep that should expire it.
func TestSilentMachineStopsGettingLaunches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval, timeout = 3 * time.Second, 10 * time.Second
		sweep := interval / 3 // how often Run looks for silent machines
		h := newHarness(t, 200, 250, func(c *broker.Config) {
			c.HeartbeatInterval = interval
			c.HeartbeatTimeout = timeout
		})
		ctx := context.Background()
		run(t, h.b)
		silent := "rdsh-07"
		beat := func() {
			for _, m := range h.cfg.Machines {
				if m.Name != silent {
					if _, err := h.b.Heartbeat(ctx, broker.Heartbeat{Machine: m.Name}); err != nil {
						t.Errorf("heartbeat %s: %v", m.Name, err)
					}
				}
			}
		}
		// Every machine registered at 0; all but one heartbeat every
		// interval. The silent one stays registered while it has been
		// silent for no more than the timeout, and is unregistered at the
		// first sweep after that.
		for elapsed := sweep; elapsed <= timeout+sweep; elapsed += sweep {
			advance(sweep)
			if elapsed%interval == 0 {
				beat()
			}
			want := site.Registered
			if elapsed > timeout {
				want = site.Unregistered
			}
			if got := machineStatus(t, h.store, silent).Registration; got != want {
				t.Fatalf("silent for %v with a heartbeat timeout of %v: %s, want %s", elapsed, timeout, got, want)
			}
		}
		for _, m := range h.cfg.Machines {
			if got := machineStatus(t, h.store, m.Name).Registration; m.Name != silent && got != site.Registered {
				t.Fatalf("machine %s heartbeating every %v is %s", m.Name, interval, got)
			}
		}
		ok, failed := h.launchAll(200, "calc")
		if len(ok) != 200 {
			t.Fatalf("%d launched; failures %v", len(ok), failed)
		}
		for _, l := range ok {
			if l.Session.Machine == silent {
				t.Fatal("a launch went to the unregistered machine")
			}
		}
		if _, err := h.b.Heartbeat(ctx, broker.Heartbeat{Machine: silent}); site.ErrorCode(err) != broker.ENotRegistered {
			t.Fatalf("heartbeat of the expired machine: %v, want not_registered", err)
		}
		h.register(silent)
		if _, err := h.b.Heartbeat(ctx, broker.Heartbeat{Machine: silent}); err != nil {
			t.Fatalf("heartbeat after registering again: %v", err)
		}
	})
}

// TestAbandonedPendingSessionsEnd runs on a synctest bubble: a pending
// session ends at the first sweep after the ticket lifetime plus the prepare
// timeout, on the fake clock, and a session whose user arrived does not.
func TestAbandonedPendingSessionsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl, prepare, interval = 90 * time.Second, 5 * time.Second, 3 * time.Second
		sweep := interval / 3
		h := newHarness(t, 3, 250, func(c *broker.Config) {
			c.TicketTTL = ttl
			c.PrepareTimeout = prepare
			c.HeartbeatInterval = interval
			c.HeartbeatTimeout = time.Hour
		})
		ctx := context.Background()
		l, err := h.b.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: "vdi"})
		if err != nil {
			t.Fatal(err)
		}
		came, err := h.b.Launch(ctx, broker.LaunchRequest{User: "u0002", Resource: "vdi"})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.b.SessionEvent(ctx, broker.SessionEvent{Machine: came.Session.Machine, SessionID: came.Session.ID, Change: broker.ChangeLogon}); err != nil {
			t.Fatal(err)
		}
		run(t, h.b)
		advance(ttl + prepare)
		if got := session(t, h.store, l.Session.ID).State; got != site.SessionPending {
			t.Fatalf("a session pending for exactly the ticket lifetime plus the prepare timeout is %s, want still pending", got)
		}
		advance(sweep)
		if got := session(t, h.store, l.Session.ID).State; got != site.SessionLoggedOff {
			t.Fatalf("a pending session whose user never came is %s a sweep after it expired, want logged off", got)
		}
		if st := machineStatus(t, h.store, l.Session.Machine); st.Sessions != 0 || st.LogonsInProgress != 0 {
			t.Fatalf("the abandoned session's slot was not given back: %+v", st)
		}
		if got := session(t, h.store, came.Session.ID).State; got != site.SessionActive {
			t.Fatalf("the session whose user logged on is %s, want active", got)
		}
	})
}

func TestSessionEventFromAnotherMachineRefused(t *testing.T) {
	h := newHarness(t, 3, 250, nil)
	ctx := context.Background()
	l, err := h.b.Launch(ctx, broker.LaunchRequest{User: "u0001", Resource: "calc"})
	if err != nil {
		t.Fatal(err)
	}
	other := "rdsh-01"
	if l.Session.Machine == other {
		other = "rdsh-02"
	}
	err = h.b.SessionEvent(ctx, broker.SessionEvent{Machine: other, SessionID: l.Session.ID, Change: broker.ChangeLogoff})
	if site.ErrorCode(err) != site.EForbidden {
		t.Fatalf("logoff from another machine: %v, want forbidden", err)
	}
	// A credential that does not hold the machine's registration: refused
	// in the event's own transaction, which changes nothing.
	for _, c := range []broker.SessionChange{broker.ChangeLogon, broker.ChangeLogoff} {
		err = h.b.SessionEvent(ctx, broker.SessionEvent{Machine: l.Session.Machine, SessionID: l.Session.ID, Change: c, Credential: "another-credential"})
		if site.ErrorCode(err) != broker.ENotRegistered {
			t.Fatalf("%s with a credential that is not the registration's: %v, want not_registered", c, err)
		}
	}
	if got := session(t, h.store, l.Session.ID); got.State != site.SessionPending {
		t.Fatalf("session %s after refused events, want pending", got.State)
	}
	if err := h.b.SessionEvent(ctx, broker.SessionEvent{Machine: l.Session.Machine, SessionID: l.Session.ID, Change: "explode"}); site.ErrorCode(err) != site.EInvalid {
		t.Fatalf("unknown event: %v", err)
	}
}
