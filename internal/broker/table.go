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
	zone        string
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
	// credential is the machine credential of the registration.
	credential string
	// here is when the machine's VDA last registered or heartbeat with
	// this broker; reregister asks it to register again at its next
	// heartbeat (Broker.Reregister).
	here       time.Time
	reregister bool
}

// Control is where and how a broker reaches a machine's VDA: its control
// URL, the token it presents there, and, for an https URL, the
// fingerprint of the one certificate the VDA's listener may show (Pin;
// "" verifies the URL's host against the site's CA or the system roots).
// Machine names the machine in errors.
type Control struct {
	Machine, URL, Token, Pin string
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
		ms.zone = s.catalogs[m.Catalog].Zone
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

// pickN chooses up to n eligible machines of a delivery group in zone
// ("" for any), not in skip, least loaded first; the first counts the new session at once (so
// that concurrent launches spread) until settle. Ties go to the machine
// with fewer sessions, then to the first by name. For assigned desktops
// only unassigned machines are candidates. A soft concurrent-logons rule
// lets machines over it in when no other is eligible. It returns none
// when no machine is eligible.
func (t *table) pickN(group, zone string, skip map[string]bool, n int) []machineState {
	t.mu.Lock()
	defer t.mu.Unlock()
	inZone := func(ms *machineState) bool { return zone == "" || ms.zone == zone }
	best := t.best(group, skip, func(ms *machineState) bool { return inZone(ms) && ms.eligible(false) }, n)
	if len(best) == 0 && t.softLogons(group) {
		best = t.best(group, skip, func(ms *machineState) bool { return inZone(ms) && ms.eligible(true) }, n)
	}
	return t.picked(best)
}

// picked counts the new session on the first of best and returns copies.
// The caller holds t.mu.
func (t *table) picked(best []*machineState) []machineState {
	if len(best) == 0 {
		return nil
	}
	best[0].inflight++
	best[0].rescore()
	out := make([]machineState, len(best))
	for i, ms := range best {
		out[i] = *ms
	}
	return out
}

func (t *table) softLogons(group string) bool {
	ms := t.byGroup[group]
	return len(ms) > 0 && !ms[0].rules.ConcurrentLogons.Hard
}

// best returns up to n machines that ok takes, best first.
func (t *table) best(group string, skip map[string]bool, ok func(*machineState) bool, n int) []*machineState {
	best := make([]*machineState, 0, n)
	now := t.now()
	for _, ms := range t.byGroup[group] {
		if skip[ms.name] || !ok(ms) || (ms.kind == site.SingleSessionAssigned && ms.assigned != "") || now.Before(ms.coolUntil) {
			continue
		}
		// Insert in order, keeping n: groups are large, n is small.
		i := len(best)
		for i > 0 && better(ms, best[i-1]) {
			i--
		}
		if i < n {
			if len(best) < n {
				best = append(best, nil)
			}
			copy(best[i+1:], best[i:len(best)-1])
			best[i] = ms
		}
	}
	return best
}

// better reports whether a is a better choice than b.
func better(a, b *machineState) bool {
	return cmp.Or(
		cmp.Compare(a.load.Index, b.load.Index),
		cmp.Compare(a.effective().Sessions, b.effective().Sessions),
		cmp.Compare(a.name, b.name)) < 0
}

// candidate is the machine as a placement candidate: its limit, its load
// index with the new session counted (the picked machine counts it
// already), and whether the claim makes it the user's.
func (ms machineState) candidate(counted bool) site.Candidate {
	idx := ms.load.Index
	if !counted {
		u := ms.effective()
		u.Sessions++
		u.LogonsInProgress++
		idx = LoadOf(ms.rules, ms.limit, u).Index
	}
	return site.Candidate{Machine: ms.name, Limit: ms.limit, LoadIndex: min(idx, site.MaxLoadIndex),
		Assign: ms.kind == site.SingleSessionAssigned && ms.assigned == ""}
}

// settle ends a placement: the picked machine's in-flight count goes,
// a machine that took the session counts it (deltas commute, so
// concurrent placements settling in any order leave the right count),
// and candidates the site DB refused take the status it showed.
func (t *table) settle(picked string, p site.Placed, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// One critical section, so that no pick sees the in-flight session
	// gone before the claimed one counts.
	if ms := t.machines[picked]; ms != nil {
		ms.inflight = max(0, ms.inflight-1)
		ms.rescore()
	}
	if !ok {
		return
	}
	if ms := t.machines[p.Session.Machine]; p.Session.ID != "" && ms != nil {
		st := p.Status
		ms.usage.Sessions++
		ms.usage.LogonsInProgress++
		ms.registered = st.Registration == site.Registered
		ms.control = Control{Machine: ms.name, URL: st.ControlURL, Token: st.ControlToken, Pin: st.ControlPin}
		ms.address, ms.protocol = st.RegisteredAddress, st.Protocol
		ms.rescore()
	}
	for name, st := range p.Refused {
		if ms := t.machines[name]; ms != nil {
			ms.apply(st)
			ms.rescore()
		}
	}
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
	ms.control = Control{Machine: ms.name, URL: st.ControlURL, Token: st.ControlToken, Pin: st.ControlPin}
	ms.address, ms.protocol = st.RegisteredAddress, st.Protocol
	ms.credential = st.Credential
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
