package broker

import (
	"cmp"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/site"
)

// machineState is the broker's live view of one machine.
type machineState struct {
	name, group string
	kind        site.CatalogKind
	rules       site.LoadRules
	limit       int // session limit, 0 for none
	maintenance bool
	assigned    string // the owner of an assigned single-session machine

	registered    bool
	lastHeartbeat time.Time
	usage         site.Usage // as recorded in the site DB
	// inflight counts sessions picked for this machine whose claim in the
	// site DB has not finished; they count as sessions and logons.
	inflight int
	load     Load
	control  Control
	address  string
	protocol string
	// coolUntil keeps a machine whose VDA refused a session out of
	// selection for a while.
	coolUntil time.Time
}

// Control is where and how a broker reaches a VDA.
type Control struct {
	URL, Token string
}

// table is the broker's live view of every machine, used to choose where
// a session goes without asking the site DB. The site DB stays the judge:
// a choice is only a candidate until the atomic claim on that machine's
// status succeeds.
type table struct {
	now      func() time.Time
	mu       sync.Mutex
	machines map[string]*machineState
	byGroup  map[string][]*machineState
}

func newTable(now func() time.Time) *table {
	return &table{now: now, machines: map[string]*machineState{}, byGroup: map[string][]*machineState{}}
}

// configure aligns the table with a snapshot, keeping runtime state of
// machines that remain.
func (t *table) configure(s *Snapshot) {
	t.mu.Lock()
	defer t.mu.Unlock()
	machines := make(map[string]*machineState, len(s.machines))
	byGroup := map[string][]*machineState{}
	for name, m := range s.machines {
		ms := t.machines[name]
		if ms == nil {
			ms = &machineState{name: name}
		}
		ms.group = s.groupOf[name]
		ms.maintenance = m.Maintenance
		ms.assigned = m.AssignedUser
		ms.kind = s.catalogs[m.Catalog].Kind
		if g, ok := s.groups[ms.group]; ok {
			ms.rules = g.LoadRules
		} else {
			ms.rules = site.DefaultLoadRules()
		}
		ms.limit = SessionLimit(ms.rules, ms.kind, m.MaxSessions)
		ms.rescore()
		machines[name] = ms
		if ms.group != "" {
			byGroup[ms.group] = append(byGroup[ms.group], ms)
		}
	}
	t.machines, t.byGroup = machines, byGroup
}

// update applies fn to a machine's state under the table lock and
// recomputes its load. It reports false for an unknown machine.
func (t *table) update(name string, fn func(*machineState)) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ms, ok := t.machines[name]
	if !ok {
		return false
	}
	fn(ms)
	ms.rescore()
	return true
}

// effective returns the usage with in-flight picks counted.
func (ms *machineState) effective() site.Usage {
	u := ms.usage
	u.Sessions += ms.inflight
	u.LogonsInProgress += ms.inflight
	return u
}

func (ms *machineState) rescore() { ms.load = LoadOf(ms.rules, ms.limit, ms.effective()) }

// get returns a copy of a machine's state.
func (t *table) get(name string) (machineState, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ms, ok := t.machines[name]
	if !ok {
		return machineState{}, false
	}
	return *ms, true
}

// eligible reports whether a machine may take a new session, ignoring the
// concurrent-logons rule when soft.
func (ms *machineState) eligible(ignoreLogons bool) bool {
	if !ms.registered || ms.maintenance || ms.load.Index >= site.MaxLoadIndex {
		return false
	}
	if ms.limit > 0 && ms.effective().Sessions >= ms.limit {
		return false
	}
	return !ms.load.LogonsFull || ignoreLogons
}

// pick chooses the least-loaded eligible machine of a delivery group, not
// in skip, for user, and counts the new session on it at once (so that
// concurrent launches spread) before the caller claims it in the site DB.
// Ties go to the machine with fewer sessions, then to the first by name.
// For assigned desktops only unassigned machines are candidates. It
// returns false when no machine is eligible.
func (t *table) pick(group string, skip map[string]bool) (machineState, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	best := t.best(group, skip, false)
	if best == nil && t.softLogons(group) {
		best = t.best(group, skip, true)
	}
	if best == nil {
		return machineState{}, false
	}
	best.inflight++
	best.rescore()
	return *best, true
}

func (t *table) softLogons(group string) bool {
	ms := t.byGroup[group]
	return len(ms) > 0 && !ms[0].rules.ConcurrentLogons.Hard
}

func (t *table) best(group string, skip map[string]bool, ignoreLogons bool) *machineState {
	var best *machineState
	now := t.now()
	for _, ms := range t.byGroup[group] {
		if skip[ms.name] || !ms.eligible(ignoreLogons) || (ms.kind == site.SingleSessionAssigned && ms.assigned != "") || now.Before(ms.coolUntil) {
			continue
		}
		if best == nil || cmp.Or(
			cmp.Compare(ms.load.Index, best.load.Index),
			cmp.Compare(ms.effective().Sessions, best.effective().Sessions),
			cmp.Compare(ms.name, best.name)) < 0 {
			best = ms
		}
	}
	return best
}

// settle ends an in-flight pick. When the claim in the site DB succeeded
// the session is counted (deltas commute, so concurrent claims settling in
// any order leave the right count); when it was refused, st is the status
// the site DB showed, which replaces the table's view.
func (t *table) settle(name string, claimed bool, st *site.MachineStatus) {
	t.update(name, func(ms *machineState) {
		ms.inflight = max(0, ms.inflight-1)
		switch {
		case claimed:
			ms.usage.Sessions++
			ms.usage.LogonsInProgress++
		case st != nil:
			ms.apply(*st)
		}
	})
}

// coolDown keeps a machine out of selection until the time.
func (t *table) coolDown(name string, until time.Time) {
	t.update(name, func(ms *machineState) { ms.coolUntil = until })
}

// ended counts a session off a machine; pending says it never logged on.
func (t *table) ended(name string, pending bool) {
	t.update(name, func(ms *machineState) {
		ms.usage.Sessions = max(0, ms.usage.Sessions-1)
		if pending {
			ms.usage.LogonsInProgress = max(0, ms.usage.LogonsInProgress-1)
		}
	})
}

// loggedOn counts a finished logon.
func (t *table) loggedOn(name string) {
	t.update(name, func(ms *machineState) { ms.usage.LogonsInProgress = max(0, ms.usage.LogonsInProgress-1) })
}

// sync copies the site DB's view of a machine's status into the table.
func (t *table) sync(name string, st site.MachineStatus) {
	t.update(name, func(ms *machineState) { ms.apply(st) })
}

func (ms *machineState) apply(st site.MachineStatus) {
	ms.registered = st.Registration == site.Registered
	ms.lastHeartbeat = st.LastHeartbeat
	ms.usage = st.Usage
	ms.control = Control{URL: st.ControlURL, Token: st.ControlToken}
	ms.address, ms.protocol = st.RegisteredAddress, st.Protocol
}

// stale returns the registered machines whose last heartbeat is older
// than deadline.
func (t *table) stale(deadline time.Time) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for name, ms := range t.machines {
		if ms.registered && ms.lastHeartbeat.Before(deadline) {
			out = append(out, name)
		}
	}
	return out
}

// snapshot returns a copy of every machine's state, for metrics.
func (t *table) snapshot() []machineState {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]machineState, 0, len(t.machines))
	for _, ms := range t.machines {
		out = append(out, *ms)
	}
	return out
}
