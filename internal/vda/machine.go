package vda

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usher-vdi/usher/internal/vdaproto"
)

const (
	// maxQueuedEvents bounds the events kept while the broker is away; the
	// oldest go first. Registration reports every session, so the broker
	// catches up with what was dropped.
	maxQueuedEvents = 10000
	// pendingGrace is how long a prepared session waits for its client
	// after its ticket expired before the VDA forgets it.
	pendingGrace = 30 * time.Second
	// ticketMemory is how long a spent or expired ticket is remembered, so
	// that a replay is told "already used" or "expired", not "unknown".
	ticketMemory = 10 * time.Minute
	// renewBefore is how long before its credential expires a machine
	// enrols again.
	renewBefore = time.Hour
)

// MachineConfig configures a Machine.
type MachineConfig struct {
	// Name is the machine's name in the site.
	Name string
	// Client reaches the broker; Secret is the site's enrolment secret.
	Client *Client
	Secret string
	// EnrolmentToken, instead of Secret, is a single-use machine enrolment
	// token (usher admin enrol-token): the machine enrols with it once and
	// then renews its credential before it expires.
	EnrolmentToken string
	// ControlURL is where the broker reaches the machine's Handler.
	ControlURL string
	// ControlPin, for an https ControlURL, returns the fingerprint
	// (tlsconf.Fingerprint) of the certificate the control listener
	// serves now; the machine registers it, so that brokers dial the
	// listener pinned to it. The machine looks again at each heartbeat
	// and at ControlCertChanged, and registers again when it changed (a
	// certificate rotated). nil registers no pin.
	ControlPin func() string
	// Address is where clients reach the display protocol, host:port; ""
	// lets the broker use the address configured for the machine.
	Address string
	// Protocol is the display protocol, "rdp" or "ica"; "" means rdp, or
	// vnc with a Display.
	Protocol string
	// MaxSessions is the most sessions the host takes; 0 leaves the limit
	// to the site's load rules.
	MaxSessions int
	// Load measures the machine; nil sends heartbeats without CPU and
	// memory figures.
	Load LoadSource
	// Hook hands sessions to the host; nil only tracks them.
	Hook SessionHook
	// Display, when set, starts each new session's display at prepare,
	// which the machine serves at vdaproto.PathDisplay (protocol vnc).
	// RunAgent stops the displays when it returns.
	Display DisplayStarter
	// DisplayOrigins are the origins of the web pages that may open the
	// displays, path.Match patterns of a host ("portal.example.com",
	// "*.example.com") or of scheme://host; a request without Origin
	// (not from a browser) needs none.
	DisplayOrigins []string
	// DisplayPingInterval is how often a viewer's WebSocket is pinged; one
	// that does not answer within the interval is cut, and its session
	// disconnected. 0 means DefaultDisplayPingInterval.
	DisplayPingInterval time.Duration
	// HeartbeatInterval, when set, overrides the broker's.
	HeartbeatInterval time.Duration
	// MinBackoff and MaxBackoff bound the wait between attempts to enrol
	// or register; 0 means DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// StateFile, when set, keeps the sessions across agent restarts.
	StateFile string
	Logger    *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Machine is one VDA: it enrols, registers and heartbeats with the broker
// while Run runs, and takes sessions through its Handler. Sessions live in
// memory (and in the state file, if configured); a re-registration reports
// them to the broker.
type Machine struct {
	cfg   MachineConfig
	log   *slog.Logger
	now   func() time.Time
	token string // the control token the broker presents
	obs   observer
	// chatter is the level of routine news (registration, sessions), and
	// trouble that of a broker out of reach: Info and Warn for an agent,
	// Debug for the simulator's thousand machines, whose simulator sums up.
	chatter, trouble slog.Level
	// simulated is set by the simulator, and told to the broker.
	simulated bool

	mu         sync.Mutex
	sessions   map[string]*session
	tickets    map[string]*ticket // by ticket hash
	events     []queuedEvent
	seq        uint64          // of the last queued event
	runCtx     context.Context // nil while Run is not running
	registered bool
	// cred is the machine credential, kept in the state file so that a
	// restarted agent registers with it instead of enrolling again (a
	// machine enrolment token is single-use).
	cred Credential

	tasks  sync.WaitGroup // goroutines started by spawn
	wake   chan struct{}  // events queued, or pause toggled
	paused atomic.Bool
	saveMu sync.Mutex // serialises writes of the state file
}

type session struct {
	Session
	ticket  string  // hash of the newest ticket
	display Display // nil on a machine without displays
	view    *viewer // the client's display WebSocket, if one is open
	// idle is the delivery group's idle timer of the newest prepare: a
	// viewer without input for so long is disconnected; 0: never.
	idle time.Duration
}

type ticket struct {
	session    string
	expires    time.Time
	used       bool
	superseded bool // a newer prepare of the session issued another
}

type queuedEvent struct {
	seq uint64
	ev  vdaproto.SessionEvent
}

// observer hears of session changes. The simulator's clients and users
// are observers; calls come with no lock held.
type observer interface {
	prepared(m *Machine, id, ticketHash string, expires time.Time)
	connected(m *Machine, id string, logon bool)
}

// NewMachine returns a Machine, with the sessions of its state file if it
// has one.
func NewMachine(cfg MachineConfig) (*Machine, error) {
	switch {
	case cfg.Name == "":
		return nil, errors.New("machine name is required")
	case cfg.Client == nil:
		return nil, fmt.Errorf("machine %q: a broker client is required", cfg.Name)
	case cfg.Secret == "" && cfg.EnrolmentToken == "":
		return nil, fmt.Errorf("machine %q: the enrolment secret or a machine enrolment token is required", cfg.Name)
	case cfg.MaxSessions < 0:
		return nil, fmt.Errorf("machine %q: negative MaxSessions", cfg.Name)
	}
	if u, err := url.Parse(cfg.ControlURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("machine %q: control URL %q is not an http(s) URL", cfg.Name, cfg.ControlURL)
	} else if cfg.ControlPin != nil && u.Scheme != "https" {
		return nil, fmt.Errorf("machine %q: a control pin needs an https control URL, not %q", cfg.Name, cfg.ControlURL)
	}
	switch {
	case cfg.Display != nil && cfg.Protocol != "" && cfg.Protocol != vdaproto.ProtocolVNC:
		return nil, fmt.Errorf("machine %q: a machine that runs displays speaks %s, not %q", cfg.Name, vdaproto.ProtocolVNC, cfg.Protocol)
	case cfg.Display != nil:
		cfg.Protocol = vdaproto.ProtocolVNC
	case cfg.Protocol != "" && cfg.Protocol != "rdp" && cfg.Protocol != "ica":
		return nil, fmt.Errorf("machine %q: protocol %q is not rdp or ica", cfg.Name, cfg.Protocol)
	}
	for _, p := range cfg.DisplayOrigins {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			return nil, fmt.Errorf("machine %q: display origin %q is not a pattern", cfg.Name, p)
		}
	}
	cfg.DisplayPingInterval = cmp.Or(max(cfg.DisplayPingInterval, 0), DefaultDisplayPingInterval)
	cfg.MinBackoff = cmp.Or(max(cfg.MinBackoff, 0), DefaultMinBackoff)
	cfg.MaxBackoff = max(cmp.Or(max(cfg.MaxBackoff, 0), DefaultMaxBackoff), cfg.MinBackoff)
	if cfg.Logger == nil {
		cfg.Logger = discard
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &Machine{
		cfg:      cfg,
		log:      cfg.Logger.With(keyMachine, cfg.Name),
		now:      cfg.Now,
		chatter:  slog.LevelInfo,
		trouble:  slog.LevelWarn,
		token:    rand.Text(),
		sessions: map[string]*session{},
		tickets:  map[string]*ticket{},
		wake:     make(chan struct{}, 1),
	}
	if cfg.StateFile != "" {
		if err := m.load(); err != nil {
			return nil, fmt.Errorf("machine %q: %w", cfg.Name, err)
		}
		if cfg.Display != nil {
			m.dropRestored()
		}
	}
	return m, nil
}

// Name returns the machine's name.
func (m *Machine) Name() string { return m.cfg.Name }

// Registered reports whether the machine is registered with the broker, as
// far as it knows.
func (m *Machine) Registered() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.registered
}

// Sessions returns the machine's sessions, by ID.
func (m *Machine) Sessions() []Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		out = append(out, s.Session)
	}
	slices.SortFunc(out, func(a, b Session) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Pause makes the machine fall silent towards the broker, as a hung host
// would: no heartbeats, registrations or events (they queue) until Resume.
// Its control endpoint keeps answering.
func (m *Machine) Pause() {
	m.paused.Store(true)
	m.poke()
}

// Resume undoes Pause.
func (m *Machine) Resume() {
	m.paused.Store(false)
	m.poke()
}

func (m *Machine) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Run enrols, registers and heartbeats until ctx is done, then returns nil.
// It rides out an unreachable broker, registers again when the broker asks,
// and enrols again when its credential is refused or about to expire. It
// returns an error, and gives up, only when the broker refuses the machine
// for good: a wrong enrolment secret, or a machine the site does not know.
// Run may be called again after it returns, but not concurrently.
func (m *Machine) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	m.mu.Lock()
	if m.runCtx != nil {
		m.mu.Unlock()
		cancel()
		return fmt.Errorf("machine %q is already running", m.cfg.Name)
	}
	m.runCtx = ctx
	m.mu.Unlock()
	defer func() {
		cancel()
		m.mu.Lock()
		m.runCtx, m.registered = nil, false
		m.mu.Unlock()
		m.tasks.Wait()
	}()
	m.mu.Lock()
	saved := m.cred
	m.mu.Unlock()
	r := &runner{m: m, cred: saved, hb: time.NewTimer(time.Hour)}
	r.hb.Stop()
	defer r.hb.Stop()
	return r.run(ctx)
}

// runner is the state of one Run: the credential, the registration and the
// heartbeat timer, owned by Run's goroutine.
type runner struct {
	m          *Machine
	cred       Credential
	registered bool
	interval   time.Duration
	hb         *time.Timer
	failures   int    // consecutive failures to reach the broker
	usedToken  bool   // the machine enrolment token was spent
	pin        string // the control pin of the registration
}

func (r *runner) run(ctx context.Context) error {
	m := r.m
	for ctx.Err() == nil {
		if m.paused.Load() {
			r.waitResume(ctx)
			continue
		}
		if r.cred.Token == "" || (!r.cred.ExpiresAt.IsZero() && m.now().After(r.cred.ExpiresAt.Add(-renewBefore))) {
			cred, err := r.enrol(ctx)
			if err != nil {
				if fatal(err) {
					return err
				}
				r.backoff(ctx, err)
				continue
			}
			r.setCred(cred)
			m.log.DebugContext(ctx, "enrolled", "credential", cred)
		}
		if !r.registered {
			if err := r.register(ctx); err != nil {
				if errors.Is(err, ErrUnauthorized) {
					r.setCred(Credential{})
				} else if fatal(err) {
					return err
				}
				r.backoff(ctx, err)
				continue
			}
			r.flush(ctx)
			continue
		}
		select {
		case <-ctx.Done():
		case <-r.hb.C:
			if r.repin(ctx) {
				continue
			}
			r.heartbeat(ctx)
			m.pruneSessions()
			r.flush(ctx)
			r.hb.Reset(r.next())
		case <-m.wake:
			if r.repin(ctx) {
				continue
			}
			r.flush(ctx)
		}
	}
	return nil
}

// setCred makes cred the machine's credential (none, when refused) and
// saves it in the state file.
func (r *runner) setCred(cred Credential) {
	r.cred = cred
	m := r.m
	m.mu.Lock()
	changed := m.cred != cred
	m.cred = cred
	m.mu.Unlock()
	if changed {
		m.save()
	}
}

// enrol gets a credential: a renewal of the current one when the machine
// enrolled with a single-use token, else an enrolment.
func (r *runner) enrol(ctx context.Context) (Credential, error) {
	m := r.m
	if r.cred.Token != "" && m.cfg.EnrolmentToken != "" {
		cred, err := m.cfg.Client.Renew(ctx, r.cred, m.cfg.Name)
		if err == nil {
			return cred, nil
		}
		m.log.WarnContext(ctx, "could not renew the machine credential", keyErr, err)
		if !errors.Is(err, ErrUnauthorized) {
			return Credential{}, err
		}
	}
	token := m.cfg.EnrolmentToken
	if r.usedToken {
		token = ""
	}
	if token == "" && m.cfg.Secret == "" {
		return Credential{}, &BrokerError{StatusCode: http.StatusUnauthorized, Code: "unauthorized",
			Message: "the machine enrolment token was used: ask an admin for a new one (usher admin enrol-token " + m.cfg.Name + ")"}
	}
	cred, err := m.cfg.Client.enrol(ctx, vdaproto.EnrolRequest{Machine: m.cfg.Name, Secret: m.cfg.Secret, Token: token, Simulated: m.simulated})
	if err == nil && token != "" {
		r.usedToken = true
	}
	return cred, err
}

// fatal reports whether err means the broker will never accept the
// machine as configured.
func fatal(err error) bool {
	var be *BrokerError
	if !errors.As(err, &be) || be.temporary() {
		return false
	}
	switch be.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusBadRequest:
		return true
	}
	return false
}

func (r *runner) waitResume(ctx context.Context) {
	r.m.log.InfoContext(ctx, "paused: not talking to the broker")
	for r.m.paused.Load() {
		select {
		case <-ctx.Done():
			return
		case <-r.m.wake:
		}
	}
	r.m.log.InfoContext(ctx, "resumed")
	r.m.poke() // events may have queued meanwhile
}

// repin reports whether the control listener's certificate is no longer
// the one registered, and if so drops the registration, so that the
// machine registers again with the new pin.
func (r *runner) repin(ctx context.Context) bool {
	m := r.m
	if m.cfg.ControlPin == nil || !r.registered {
		return false
	}
	pin := m.cfg.ControlPin()
	if pin == r.pin {
		return false
	}
	m.log.InfoContext(ctx, "the control listener's certificate changed; registering again to pin the new one", keyPin, pin)
	r.unregister()
	return true
}

// ControlCertChanged tells the machine that its control listener's
// certificate may have changed (a reload on SIGHUP): it looks at once,
// rather than at the next heartbeat, and registers the new pin.
func (m *Machine) ControlCertChanged() { m.poke() }

func (r *runner) register(ctx context.Context) error {
	m := r.m
	req := m.registerRequest()
	resp, err := m.cfg.Client.Register(ctx, r.cred, req)
	if err != nil {
		return err
	}
	r.pin = req.ControlPin
	r.interval = cmp.Or(max(m.cfg.HeartbeatInterval, 0), max(resp.HeartbeatInterval, 0), DefaultHeartbeatInterval)
	r.interval = max(r.interval, MinHeartbeatInterval)
	r.registered = true
	m.setRegistered(true)
	r.hb.Reset(r.next())
	r.reachable(ctx)
	m.log.Log(ctx, m.chatter, "registered", keyInterval, r.interval, "sessions", len(req.Sessions))
	return nil
}

// next returns the wait before the next heartbeat: the interval less up to
// a tenth, so that machines spread out and none is ever late.
func (r *runner) next() time.Duration {
	return r.interval - jittered(0, r.interval/10, r.interval/10)
}

func (r *runner) heartbeat(ctx context.Context) {
	m := r.m
	hb := m.heartbeatRequest(ctx)
	if _, err := m.cfg.Client.Heartbeat(ctx, r.cred, hb); err != nil {
		if !r.brokerError(ctx, err) {
			m.log.WarnContext(ctx, "broker refused a heartbeat", keyErr, err)
		}
		return
	}
	r.reachable(ctx)
}

// flush sends the queued events in order, until one fails.
func (r *runner) flush(ctx context.Context) {
	m := r.m
	for r.registered && ctx.Err() == nil && !m.paused.Load() {
		m.mu.Lock()
		if len(m.events) == 0 {
			m.mu.Unlock()
			return
		}
		q := m.events[0]
		m.mu.Unlock()
		err := m.cfg.Client.SendEvent(ctx, r.cred, q.ev)
		if err != nil && (r.brokerError(ctx, err) || ctx.Err() != nil) {
			return // kept for the next try
		}
		if err != nil {
			m.log.WarnContext(ctx, "broker refused a session event; dropped", keySession, q.ev.SessionID, keyEvent, q.ev.Event, keyErr, err)
		}
		m.mu.Lock()
		if len(m.events) > 0 && m.events[0].seq == q.seq {
			m.events = m.events[1:]
		}
		m.mu.Unlock()
	}
}

// brokerError handles a failed heartbeat or event. It reports whether the
// call is worth repeating: the broker was unreachable, or it asked the
// machine to register or enrol again.
func (r *runner) brokerError(ctx context.Context, err error) (retry bool) {
	switch {
	case ctx.Err() != nil:
		return true
	case errors.Is(err, ErrNotRegistered):
		r.m.log.InfoContext(ctx, "the broker asks the machine to register again")
		r.unregister()
		return true
	case errors.Is(err, ErrUnauthorized):
		r.m.log.WarnContext(ctx, "the broker refused the machine credential; enrolling again")
		r.setCred(Credential{})
		r.unregister()
		return true
	}
	var be *BrokerError
	if errors.As(err, &be) && !be.temporary() {
		return false
	}
	r.unreachable(ctx, err)
	return true
}

func (r *runner) unregister() {
	r.registered = false
	r.hb.Stop()
	r.m.setRegistered(false)
}

// backoff logs a failure to enrol or register and waits before the next
// attempt, longer after each consecutive failure.
func (r *runner) backoff(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	r.unreachable(ctx, err)
	attempt := r.failures - 1
	var be *BrokerError
	if errors.As(err, &be) {
		switch {
		case be.StatusCode == http.StatusForbidden:
			// Refused by policy, not failing: the broker names another (its
			// zone's, or the zone's leader while the site DB is down), and a
			// leader that changes is taken over within seconds. The wait
			// does not grow.
			attempt = 0
		case be.StatusCode == http.StatusServiceUnavailable && be.RetryAfter > 0:
			// The broker answers, and says when to come back (while its
			// site DB is down and before it brokers from its local copy,
			// for one): then, give or take, and not after a wait that grew
			// meanwhile, so that the machine is back within about a second
			// of a takeover.
			d := min(be.RetryAfter, r.m.cfg.MaxBackoff)
			sleep(ctx, d+jittered(0, d/4, d/4))
			return
		}
	}
	sleep(ctx, jittered(attempt, r.m.cfg.MinBackoff, r.m.cfg.MaxBackoff))
}

// unreachable counts a failure and logs it: the first of a run at Warn,
// the rest at Debug, so that a broker outage does not flood the log.
func (r *runner) unreachable(ctx context.Context, err error) {
	r.failures++
	if r.failures == 1 {
		r.m.log.Log(ctx, r.m.trouble, "cannot reach the broker; retrying", keyErr, err)
	} else {
		r.m.log.DebugContext(ctx, "broker still unreachable", keyAttempt, r.failures, keyErr, err)
	}
}

func (r *runner) reachable(ctx context.Context) {
	if r.failures > 0 {
		r.m.log.Log(ctx, r.m.chatter, "broker reachable again", keyAttempt, r.failures)
	}
	r.failures = 0
}

func (m *Machine) setRegistered(v bool) {
	m.mu.Lock()
	m.registered = v
	m.mu.Unlock()
}

func (m *Machine) registerRequest() vdaproto.RegisterRequest {
	req := vdaproto.RegisterRequest{
		Machine:      m.cfg.Name,
		Address:      m.cfg.Address,
		Protocol:     m.cfg.Protocol,
		ControlURL:   m.cfg.ControlURL,
		ControlToken: m.token,
		ControlPin:   m.controlPin(),
		MaxSessions:  m.cfg.MaxSessions,
		AgentVersion: AgentVersion,
		Simulated:    m.simulated,
	}
	for _, s := range m.Sessions() {
		req.Sessions = append(req.Sessions, s.Report())
	}
	return req
}

func (m *Machine) controlPin() string {
	if m.cfg.ControlPin == nil {
		return ""
	}
	return m.cfg.ControlPin()
}

func (m *Machine) heartbeatRequest(ctx context.Context) vdaproto.Heartbeat {
	hb := vdaproto.Heartbeat{Machine: m.cfg.Name}
	m.mu.Lock()
	hb.Sessions = len(m.sessions)
	for _, s := range m.sessions {
		if s.State == StatePending {
			hb.LogonsInProgress++
		}
	}
	m.mu.Unlock()
	if m.cfg.Load == nil {
		return hb
	}
	l, err := m.cfg.Load.Load(ctx, hb.Sessions)
	if err != nil {
		m.log.WarnContext(ctx, "measure load", keyErr, err)
		return hb
	}
	hb.CPUPercent, hb.MemoryPercent = clamp(l.CPUPercent, 0, 100), clamp(l.MemoryPercent, 0, 100)
	hb.MemoryUsedMB, hb.MemoryTotalMB = l.MemoryUsedMB, l.MemoryTotalMB
	return hb
}

// queue appends an event for the broker. m.mu must be held.
func (m *Machine) queue(id, event, client string) {
	m.seq++
	m.events = append(m.events, queuedEvent{seq: m.seq, ev: vdaproto.SessionEvent{
		Machine: m.cfg.Name, SessionID: id, Event: event, At: m.now().UTC(), ClientName: client,
	}})
	if n := len(m.events) - maxQueuedEvents; n > 0 {
		m.log.Warn("too many session events waiting for the broker; dropping the oldest", keyCount, n)
		m.events = slices.Delete(m.events, 0, n)
	}
	m.poke()
}

// spawn runs f in a goroutine that Run waits for; ctx is Run's. Nothing
// runs when Run is not running.
func (m *Machine) spawn(f func(ctx context.Context)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runCtx == nil {
		return
	}
	ctx := m.runCtx
	m.tasks.Add(1)
	go func() {
		defer m.tasks.Done()
		f(ctx)
	}()
}

// pruneSessions forgets tickets long expired, and pending sessions whose
// client never came: the broker abandons them too, without telling the VDA.
func (m *Machine) pruneSessions() {
	now := m.now()
	var abandoned []*session
	m.mu.Lock()
	for h, t := range m.tickets {
		if now.After(t.expires.Add(ticketMemory)) {
			delete(m.tickets, h)
		}
	}
	for id, s := range m.sessions {
		if s.State != StatePending {
			continue
		}
		t := m.tickets[s.ticket]
		if t == nil || now.After(t.expires.Add(pendingGrace)) {
			delete(m.sessions, id)
			m.queue(id, vdaproto.EventLogoff, "")
			abandoned = append(abandoned, s)
		}
	}
	m.mu.Unlock()
	if len(abandoned) == 0 {
		return
	}
	m.save()
	for _, s := range abandoned {
		m.log.Log(context.Background(), m.chatter, "the client never arrived; session forgotten", keySession, s.ID, keyUser, s.User)
		m.spawn(func(ctx context.Context) {
			if m.cfg.Hook != nil {
				if err := m.cfg.Hook.Session(ctx, HookLogoff, s.Session); err != nil {
					m.log.Warn("session command failed", keySession, s.ID, keyEvent, HookLogoff, keyErr, err)
				}
			}
			m.release(ctx, s, vdaproto.CloseSessionEnded, reasonLoggedOff)
		})
	}
}
