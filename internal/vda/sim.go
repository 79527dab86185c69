package vda

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Simulator defaults.
const (
	// DefaultLogonDelay is how long a simulated client takes to arrive
	// after the broker prepared its session.
	DefaultLogonDelay = time.Second
	// DefaultSimListen is the simulator's control listener.
	DefaultSimListen = "127.0.0.1:0"
	// staggerPerMachine and maxStagger spread the start of the machines,
	// so that a thousand do not enrol in the same millisecond.
	staggerPerMachine = 2 * time.Millisecond
	maxStagger        = 2 * time.Second
	// simReportEvery is how often the simulator reports machines that
	// are not registered.
	simReportEvery = 5 * time.Second
	// SimClientName is the client name simulated clients report.
	SimClientName = "usher-sim"
	// ControlPrefix is the path under which the simulator's control
	// endpoint serves each machine: {ControlPrefix}{machine}/prepare, ...
	ControlPrefix = "/vda/"
)

// SimConfig configures a Simulator.
type SimConfig struct {
	// Broker is the broker's base URL (or several: ClientConfig.BrokerURL),
	// FallbackBroker those of primary-zone brokers to fall back to;
	// Secret the site's enrolment secret.
	Broker         string
	FallbackBroker string
	Secret         string
	// Machines are the names of the simulated machines, configured in the
	// site; Names makes PREFIX-001, PREFIX-002, ...
	Machines []string

	// Listen is the address of the one control listener all machines
	// share; "" means DefaultSimListen.
	Listen string
	// ControlBase, when set, is the base URL of a server that already
	// serves Handler under ControlPrefix (an all-in-one usher serve); Run
	// then opens no listener.
	ControlBase string
	// Listening, when set, is told the control listener's address.
	Listening func(addr string)

	// LogonDelay is the time from prepare to the simulated client's
	// arrival; 0 means DefaultLogonDelay, negative means at once.
	LogonDelay time.Duration
	// SessionLength is how long a simulated user stays before logging off,
	// give or take SessionJitter; 0 means until the broker logs it off.
	SessionLength, SessionJitter time.Duration
	// ManualConnect turns the simulated clients off: sessions stay pending
	// until a client presents its ticket at /connect. By default
	// (AutoConnect) the simulator connects each prepared session itself
	// after LogonDelay; it never sees the ticket, only its hash, and
	// spends the ticket by that hash, single use and expiry included.
	ManualConnect bool

	// HeartbeatInterval, when set, overrides the broker's.
	HeartbeatInterval time.Duration
	// Stagger spreads the machines' start over this long; 0 means 2ms a
	// machine, at most 2s; negative starts them all at once.
	Stagger time.Duration
	// MinBackoff and MaxBackoff bound the wait between attempts to enrol
	// or register; 0 means DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// HTTPClient reaches the broker; nil means one shared client with a
	// connection pool sized for the machines, verifying https brokers
	// with BrokerTLS (nil: the system roots).
	HTTPClient *http.Client
	BrokerTLS  *tls.Config
	// InsecureBroker allows http:// broker URLs off loopback
	// (ClientConfig.InsecureBroker).
	InsecureBroker bool
	Logger         *slog.Logger
}

// Names returns n machine names PREFIX-001 .. PREFIX-n, zero-padded to
// three digits or to the digits of n.
func Names(prefix string, n int) []string {
	w := max(3, len(strconv.Itoa(n)))
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf("%s-%0*d", prefix, w, i+1)
	}
	return out
}

// Simulator runs simulated VDAs in one process: each enrols, registers,
// heartbeats with a load derived from its sessions and takes sessions like
// a real one, and all share one control listener, where machine M's
// control URL is http://HOST:PORT/vda/M.
type Simulator struct {
	cfg     SimConfig
	log     *slog.Logger
	client  *Client
	own     *http.Transport // closed after Run when the simulator made it
	handler http.Handler
	users   *simUsers

	// allRegistered is closed once every machine has registered, after
	// the log says so.
	allRegistered chan struct{}
	allOnce       sync.Once

	mu       sync.Mutex
	machines map[string]*Machine
	paused   map[string]bool
	addr     string
	running  bool
}

// NewSimulator checks cfg and returns a Simulator; Run starts it.
func NewSimulator(cfg SimConfig) (*Simulator, error) {
	if len(cfg.Machines) == 0 {
		return nil, errors.New("simulator: no machines")
	}
	if cfg.Secret == "" {
		return nil, errors.New("simulator: the enrolment secret is required")
	}
	seen := map[string]bool{}
	for _, name := range cfg.Machines {
		if name == "" || strings.ContainsAny(name, "/?#") {
			return nil, fmt.Errorf("simulator: machine name %q is empty or has /, ? or #", name)
		}
		if seen[name] {
			return nil, fmt.Errorf("simulator: machine %q named twice", name)
		}
		seen[name] = true
	}
	if cfg.ControlBase != "" {
		if u, err := url.Parse(cfg.ControlBase); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("simulator: control base %q is not an http(s) URL", cfg.ControlBase)
		}
		cfg.ControlBase = strings.TrimRight(cfg.ControlBase, "/")
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultSimListen
	}
	switch {
	case cfg.LogonDelay == 0:
		cfg.LogonDelay = DefaultLogonDelay
	case cfg.LogonDelay < 0:
		cfg.LogonDelay = 0
	}
	if cfg.SessionLength < 0 || cfg.SessionJitter < 0 {
		return nil, errors.New("simulator: negative session length or jitter")
	}
	switch {
	case cfg.Stagger == 0:
		cfg.Stagger = min(time.Duration(len(cfg.Machines))*staggerPerMachine, maxStagger)
	case cfg.Stagger < 0:
		cfg.Stagger = 0
	}
	if cfg.Logger == nil {
		cfg.Logger = discard
	}
	s := &Simulator{cfg: cfg, log: cfg.Logger, machines: map[string]*Machine{}, paused: map[string]bool{},
		allRegistered: make(chan struct{})}
	hc := cfg.HTTPClient
	if hc == nil {
		s.own = newTransport(min(max(len(cfg.Machines)/4, 16), 256), cfg.BrokerTLS)
		hc = &http.Client{Transport: s.own}
	}
	var err error
	s.client, err = NewClient(ClientConfig{BrokerURL: cfg.Broker, FallbackURL: cfg.FallbackBroker, HTTPClient: hc, Logger: cfg.Logger,
		InsecureBroker: cfg.InsecureBroker, MinBackoff: cfg.MinBackoff, MaxBackoff: cfg.MaxBackoff})
	if err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	s.users = &simUsers{delay: cfg.LogonDelay, length: cfg.SessionLength, jitter: cfg.SessionJitter,
		auto: !cfg.ManualConnect, log: cfg.Logger}
	mux := http.NewServeMux()
	mux.HandleFunc(ControlPrefix+"{machine}/{op}", s.serveMachine)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(http.StatusNotFound, codeNotFound, "not a control URL; want %s{machine}/{operation}", ControlPrefix))
	})
	s.handler = mux
	return s, nil
}

// Handler returns the control endpoint of every simulated machine, under
// ControlPrefix. Run serves it on its listener; with ControlBase, the
// caller serves it.
func (s *Simulator) Handler() http.Handler { return s.handler }

func (s *Simulator) serveMachine(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("machine")
	m := s.Machine(name)
	if m == nil {
		writeError(w, errorf(http.StatusNotFound, codeNotFound, "no simulated machine %q", name))
		return
	}
	r2 := new(http.Request)
	*r2 = *r
	r2.URL = new(url.URL)
	*r2.URL = *r.URL
	r2.URL.Path, r2.URL.RawPath = "/"+r.PathValue("op"), ""
	m.Handler().ServeHTTP(w, r2)
}

// Addr returns the control listener's address once Run listens, else "".
func (s *Simulator) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Machine returns the simulated machine of that name, or nil when there is
// none or Run has not started it.
func (s *Simulator) Machine(name string) *Machine {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.machines[name]
}

// AllRegistered returns a channel that is closed once every simulated
// machine has registered for the first time (and the log has said so).
func (s *Simulator) AllRegistered() <-chan struct{} { return s.allRegistered }

// Registered returns how many simulated machines are registered now, of
// how many.
func (s *Simulator) Registered() (registered, total int) {
	for _, name := range s.cfg.Machines {
		if m := s.Machine(name); m != nil && m.Registered() {
			registered++
		}
	}
	return registered, len(s.cfg.Machines)
}

// Pause makes a simulated machine fall silent towards the broker, as a hung
// host would (see Machine.Pause), so that the broker times it out.
func (s *Simulator) Pause(name string) error { return s.setPaused(name, true) }

// Resume undoes Pause: the machine heartbeats again, and registers again
// if the broker timed it out meanwhile.
func (s *Simulator) Resume(name string) error { return s.setPaused(name, false) }

func (s *Simulator) setPaused(name string, paused bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.known(name) {
		return fmt.Errorf("no simulated machine %q", name)
	}
	s.paused[name] = paused
	if m := s.machines[name]; m != nil {
		if paused {
			m.Pause()
		} else {
			m.Resume()
		}
	}
	return nil
}

func (s *Simulator) known(name string) bool {
	for _, n := range s.cfg.Machines {
		if n == name {
			return true
		}
	}
	return false
}

// Run starts every machine, spread over the stagger time, and runs them
// until ctx is done; then they stop heartbeating (the broker times them
// out), the listener closes, and Run returns nil once every goroutine it
// started has ended. It returns an error when the listener fails, or when
// every machine gave up (a wrong enrolment secret, machines the site does
// not know).
func (s *Simulator) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return errors.New("simulator is already running")
	}
	s.running = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running, s.addr = false, ""
		s.mu.Unlock()
	}()
	if s.own != nil {
		defer s.own.CloseIdleConnections()
	}

	base := s.cfg.ControlBase
	var ln net.Listener
	if base == "" {
		var err error
		if ln, err = net.Listen("tcp", s.cfg.Listen); err != nil {
			return fmt.Errorf("simulator: listen on %s: %w", s.cfg.Listen, err)
		}
		base = "http://" + ln.Addr().String()
	}
	ms, err := s.build(base)
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	serveErr := make(chan error, 1)
	if ln != nil {
		s.mu.Lock()
		s.addr = ln.Addr().String()
		s.mu.Unlock()
		wg.Go(func() {
			if err := ServeControl(ctx, ln, s.handler, s.log); err != nil {
				serveErr <- err
				cancel()
			}
		})
		if s.cfg.Listening != nil {
			s.cfg.Listening(ln.Addr().String())
		}
	}
	s.log.Info("simulated VDAs starting", keyCount, len(ms), "control", base+ControlPrefix, "stagger", s.cfg.Stagger)

	var (
		mu       sync.Mutex
		failed   int
		firstErr error
	)
	for i, m := range ms {
		wg.Go(func() {
			if !sleep(ctx, s.cfg.Stagger*time.Duration(i)/time.Duration(len(ms))) {
				return
			}
			err := m.Run(ctx)
			if err == nil {
				return
			}
			s.log.Error("simulated machine gave up", keyMachine, m.Name(), keyErr, err)
			mu.Lock()
			defer mu.Unlock()
			if failed++; firstErr == nil {
				firstErr = err
			}
			if failed == len(ms) {
				cancel()
			}
		})
	}
	wg.Go(func() { s.watch(ctx, ms) })
	wg.Wait()

	select {
	case err := <-serveErr:
		return err
	default:
	}
	if failed == len(ms) {
		return fmt.Errorf("simulator: every machine gave up; the first: %w", firstErr)
	}
	s.log.Info("simulated VDAs stopped", keyCount, len(ms))
	return nil
}

// build makes the machines, with their control URLs under base.
func (s *Simulator) build(base string) ([]*Machine, error) {
	ms := make([]*Machine, 0, len(s.cfg.Machines))
	for _, name := range s.cfg.Machines {
		m, err := NewMachine(MachineConfig{
			Name:              name,
			Client:            s.client,
			Secret:            s.cfg.Secret,
			ControlURL:        base + ControlPrefix + url.PathEscape(name),
			Load:              &SimLoad{Machine: name},
			HeartbeatInterval: s.cfg.HeartbeatInterval,
			MinBackoff:        s.cfg.MinBackoff,
			MaxBackoff:        s.cfg.MaxBackoff,
			Logger:            s.log,
		})
		if err != nil {
			return nil, fmt.Errorf("simulator: %w", err)
		}
		m.obs = s.users
		m.chatter, m.trouble = slog.LevelDebug, slog.LevelDebug
		m.simulated = true
		ms = append(ms, m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range ms {
		s.machines[m.Name()] = m
		if s.paused[m.Name()] {
			m.Pause()
		}
	}
	return ms, nil
}

// watch sums up the machines' registrations in the log, as the machines
// themselves log theirs only at debug level: once when every machine has
// registered, and every few seconds while some have not.
func (s *Simulator) watch(ctx context.Context, ms []*Machine) {
	start, reported := time.Now(), time.Now()
	all := false
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := 0
		for _, m := range ms {
			if m.Registered() {
				n++
			}
		}
		switch {
		case n == len(ms) && !all:
			all = true
			s.log.Info("simulated VDAs registered", keyCount, n, "took", time.Since(start).Round(time.Millisecond))
			s.allOnce.Do(func() { close(s.allRegistered) })
		case n < len(ms) && time.Since(reported) >= simReportEvery:
			all, reported = false, time.Now()
			s.log.Warn("some simulated VDAs are not registered; they keep trying (--log-level debug tells why)",
				"registered", n, keyCount, len(ms))
		case n < len(ms):
			all = false
		}
	}
}

// simUsers are the simulated clients and users of every simulated machine.
type simUsers struct {
	delay, length, jitter time.Duration
	auto                  bool
	log                   *slog.Logger
}

var _ observer = (*simUsers)(nil)

// prepared sends a simulated client to the session after the logon delay.
func (u *simUsers) prepared(m *Machine, id, hash string, _ time.Time) {
	if !u.auto {
		return
	}
	m.spawn(func(ctx context.Context) {
		if !sleep(ctx, u.delay) {
			return
		}
		if _, err := m.connectHash(ctx, hash, SimClientName); err != nil {
			m.log.Debug("simulated client could not connect", keySession, id, keyErr, err)
		}
	})
}

// connected makes the simulated user of a new session log off after the
// session length.
func (u *simUsers) connected(m *Machine, id string, logon bool) {
	if !logon || u.length <= 0 {
		return
	}
	d := u.length
	if u.jitter > 0 {
		d += time.Duration(rand.Int64N(int64(2*u.jitter)+1)) - u.jitter
	}
	m.spawn(func(ctx context.Context) {
		if sleep(ctx, max(d, 0)) {
			m.end(ctx, id, "the simulated user logged off")
		}
	})
}
