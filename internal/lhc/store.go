package lhc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
)

// Defaults for Options.
const (
	DefaultOutageAfter   = 5 * time.Second
	DefaultRecoverAfter  = 5 * time.Second
	DefaultProbeInterval = 500 * time.Millisecond
	DefaultCopyEvery     = time.Minute
	// DefaultCallTimeout bounds a brokering call to the site DB (a
	// placement, a batch of session reports or heartbeats, a credential
	// read): one cut off answers EUnavailable, which the client retries,
	// instead of waiting on a database that stopped answering.
	DefaultCallTimeout = 2 * time.Second
	// DefaultTakeoverWindow covers a few default heartbeat intervals, in
	// which VDAs come over to the broker that brokers from its copy.
	DefaultTakeoverWindow = 10 * time.Second
)

// Broker is what the Store needs of the broker it serves.
type Broker interface {
	// OwnStatuses returns the statuses of the machines registered with
	// the broker, as it knows them.
	OwnStatuses() map[string]site.MachineStatus
	// Reregister asks the broker's VDAs to register again, reporting
	// their sessions.
	Reregister()
	// SyncStatuses reads every machine's status from the store again.
	SyncStatuses(ctx context.Context) error
	// RegisteredMachines returns the machines registered with any broker
	// of the zone, as far as the broker knows.
	RegisteredMachines() []string
	// Refresh brings the broker's configuration up to the store's.
	Refresh(ctx context.Context) error
}

// Options configure a Store.
type Options struct {
	// Open opens the site DB. Open calls it once; when it fails and a
	// usable copy exists, the Store starts in outage mode and calls it
	// again at every probe until it succeeds.
	Open func(ctx context.Context) (site.Store, error)
	// Dir is the directory of the local copy (CopyFile).
	Dir string
	// OutageAfter is how long after the site DB's last answer the Store
	// brokers from its copy (it begins to enter outage mode up to 250 ms
	// before, so as to be done by then); RecoverAfter, how long it must answer
	// again before the Store writes back and returns to it.
	OutageAfter, RecoverAfter time.Duration
	// ProbeInterval is how often the Store tries the site DB.
	ProbeInterval time.Duration
	// CopyEvery is how often the copy is rewritten when the configuration
	// does not change (it is rewritten at every version in any case).
	CopyEvery time.Duration
	// CallTimeout bounds each brokering call to the site DB.
	CallTimeout time.Duration
	// TakeoverWindow is how long after outage mode begins a launch that
	// would go back to a session on a machine not (yet) registered with
	// this broker is answered "retry shortly" rather than given a new
	// session: the time VDAs take to come over.
	TakeoverWindow time.Duration
	Logger         *slog.Logger
	Now            func() time.Time
}

// Mode is whom a Store serves from.
type Mode string

const (
	Normal Mode = "normal" // the site DB
	Outage Mode = "outage" // the local copy
)

// Status is a Store's state, for the admin API, metrics and logs.
type Status struct {
	Mode   Mode `json:"mode"`
	Forced bool `json:"forced"`
	// Since is when the Store entered its mode, for the reason Cause.
	Since time.Time `json:"since,omitzero"`
	Cause string    `json:"cause,omitempty"`
	// LastAnswer is when the site DB last answered a probe.
	LastAnswer time.Time `json:"last_answer,omitzero"`
	// DBAnswers tells whether the last probe was answered.
	DBAnswers bool `json:"db_answers"`
	// ProbesBusy counts the probes the site DB refused for its
	// connection limit since start: answers, not outages.
	ProbesBusy int64 `json:"probes_busy"`
	// CopyVersion is the configuration version of the local copy, made at
	// CopyAt; CopyError, the last copy's failure, if it failed.
	CopyVersion int64     `json:"copy_version"`
	CopyAt      time.Time `json:"copy_at,omitzero"`
	CopyError   string    `json:"copy_error,omitempty"`
	// Journaled counts the sessions written in outage mode that wait to
	// be written back (as of entering outage mode; the admin API counts
	// them afresh); WrittenBack counts those written back since start.
	Journaled   int   `json:"journaled"`
	WrittenBack int64 `json:"written_back"`
	// EndedAtRecovery counts the sessions ended at recovery (and in the
	// watch after it) since start: placements whose answer was lost as
	// the site DB went, whose users the outage seated again (endPhantoms).
	EndedAtRecovery int64 `json:"ended_at_recovery"`
	// Outages counts the outages entered since start.
	Outages int64 `json:"outages"`
}

// Store is a site.Store that serves from the site DB while it answers and
// from the local copy while it does not. See the package documentation.
type Store struct {
	opts Options
	log  *slog.Logger
	path string

	primary atomic.Pointer[primaryDB]
	outage  atomic.Bool
	// gate holds outage calls back while the Store enters or leaves
	// outage mode: every outage call holds it for reading, so that a
	// change waits for them, and the calls after it see the new mode.
	// Calls to the site DB are counted in calls instead.
	gate  sync.RWMutex
	local *sqlitestore.Store // open in outage mode; under gate

	broker atomic.Value // Broker
	// handed is set when this outage's brokering was handed to the
	// zone's leader (Handover): the copy makes no new session until
	// HoldNewSessions, or the next change of mode.
	handed atomic.Bool
	// recent holds the sessions written since the copy was read.
	recent recent

	mu     sync.Mutex // guards status and the fields below
	status Status
	forced bool
	// detect decides when to enter and leave outage mode.
	detect *detector
	// rebuildUntil is when launches stop waiting for a dead leader's VDAs
	// (HoldNewSessions); expected are the machines registered in the zone when
	// the outage began, cameChecked when allCame last looked.
	rebuildUntil time.Time
	expected     map[string]bool
	cameChecked  time.Time
	copying      bool

	// calls counts the calls to the site DB under way (n), which entering
	// outage mode waits for a moment (drained), and cuts them off when a
	// probe finds the site DB not answering (suspect). applied is the
	// mark of recent that outage mode applied to the copy as it began:
	// what a call still under way then records later (a placement that
	// reached the site DB) is brought into the copy as the call ends
	// (applyLate), so that the outage's launches see it.
	calls struct {
		sync.Mutex
		n       int
		drained chan struct{}
		suspect context.Context
		cancel  context.CancelFunc
		applied uint64
	}
	// lingering are the sessions of placements of unknown outcome that
	// recovery found pending and their users not seated again yet (the
	// zone's leader may write its outage's sessions back later), watched
	// until the time given (endPhantoms); under trans.
	lingering map[string]time.Time
	// trans serializes the transitions between modes; copyMu, a copy's
	// replacing the file with outage mode's opening it; writeMu, the
	// writing of copies (one at a time: they share a temporary file).
	trans   sync.Mutex
	copyMu  sync.Mutex
	writeMu sync.Mutex
	// copyReads numbers the copies' reads of the site DB as they begin;
	// copyWritten is the number of the copy in place (under writeMu), so
	// that a copy read before it never replaces it.
	copyReads   atomic.Uint64
	copyWritten uint64

	copies  sync.WaitGroup
	resyncs sync.WaitGroup // the broker's reads of the statuses on entering an outage
	stop    chan struct{}
	done    chan struct{}
	running atomic.Bool
	closed  atomic.Bool
}

type primaryDB struct{ site.Store }

var (
	_ site.Store         = (*Store)(nil)
	_ site.ConfigWatcher = (*Store)(nil)
	_ site.OnceReader    = (*Store)(nil)
)

// Open opens the site DB with opts.Open and returns a Store serving from
// it. When the site DB cannot be opened, it opens the local copy instead
// and starts in outage mode; with no usable copy it fails. A copy left
// with journaled sessions is written back before the Store serves from
// the site DB. Call Attach, then Run.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Open == nil || opts.Dir == "" {
		return nil, errors.New("lhc: Open and Dir are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.OutageAfter = cmp.Or(max(opts.OutageAfter, 0), DefaultOutageAfter)
	opts.RecoverAfter = cmp.Or(max(opts.RecoverAfter, 0), DefaultRecoverAfter)
	opts.ProbeInterval = cmp.Or(max(opts.ProbeInterval, 0), DefaultProbeInterval)
	opts.CopyEvery = cmp.Or(max(opts.CopyEvery, 0), DefaultCopyEvery)
	opts.CallTimeout = cmp.Or(max(opts.CallTimeout, 0), DefaultCallTimeout)
	opts.TakeoverWindow = cmp.Or(max(opts.TakeoverWindow, 0), DefaultTakeoverWindow)
	s := &Store{opts: opts, log: opts.Logger.With("component", "lhc"), path: filepath.Join(opts.Dir, CopyFile),
		stop: make(chan struct{}), done: make(chan struct{})}
	s.trusted()
	now := opts.Now()
	db, err := opts.Open(ctx)
	if err != nil {
		local, info, cerr := openCopy(ctx, s.path, s.log, true)
		if cerr != nil {
			return nil, fmt.Errorf("the site DB cannot be opened (%w), and there is nothing to broker from: %w", err, cerr)
		}
		s.local = local
		s.outage.Store(true)
		s.detect = newDetector(opts.OutageAfter, opts.RecoverAfter, now, true)
		s.status = Status{Mode: Outage, Since: now, Cause: "the site DB could not be opened at start: " + err.Error(),
			CopyVersion: info.version, Journaled: len(info.journaled), Outages: 1}
		s.log.Error("site DB unavailable at start: brokering from the local copy", "err", err, "copy", s.path,
			"copy_version", info.version, "journaled", len(info.journaled))
		return s, nil
	}
	s.primary.Store(&primaryDB{db})
	s.detect = newDetector(opts.OutageAfter, opts.RecoverAfter, now, false)
	s.status = Status{Mode: Normal, Since: now, LastAnswer: now, DBAnswers: true}
	// A journal left by an outage that a restart cut short goes to the
	// site DB before anything else does.
	if local, info, cerr := openCopy(ctx, s.path, s.log, false); cerr == nil {
		s.status.CopyVersion = info.version
		if len(info.journaled) > 0 {
			s.log.Warn("the local copy holds sessions of an outage not written back: writing them back", "journaled", len(info.journaled))
			s.local = local
			if err := s.writeBack(ctx, db); err != nil {
				local.Close()
				s.local = nil
				db.Close()
				return nil, fmt.Errorf("write back the sessions of the last outage: %w", err)
			}
		}
		local.Close()
		s.local = nil
	} else {
		s.log.Info("no usable local copy yet; one is made from the site DB", "reason", cerr)
	}
	return s, nil
}

// Attach gives the Store the broker it serves. Call it before Run.
func (s *Store) Attach(b Broker) { s.broker.Store(b) }

func (s *Store) attached() Broker {
	b, _ := s.broker.Load().(Broker)
	return b
}

// Primary returns the site DB, nil when it has not been opened yet.
func (s *Store) Primary() site.Store {
	if p := s.primary.Load(); p != nil {
		return p.Store
	}
	return nil
}

// Status returns the Store's state.
func (s *Store) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Forced = s.forced
	return st
}

// InOutage reports whether the Store serves from its local copy.
func (s *Store) InOutage() bool { return s.outage.Load() }

// unavailable is the error of a call the site DB cannot take now.
func (s *Store) unavailable() error {
	return site.Errorf(site.EUnavailable, "the site DB is not answering; this broker brokers from its local copy once it has been down for %s: retry shortly",
		s.opts.OutageAfter)
}

// refusal is the error of what outage mode cannot do.
func (s *Store) refusal() error {
	st := s.Status()
	return site.Errorf(site.ESiteDBUnavailable, "the site DB is unavailable (since %s): this broker serves from its local copy, "+
		"in which configuration, admin and password changes and new assignments cannot be made; retry once the site DB is back",
		st.Since.UTC().Format(time.RFC3339))
}

// db returns the site DB for a call in normal mode, or an error when
// calls must not wait on it: it is not open, or its last probe failed.
func (s *Store) db() (site.Store, error) {
	p := s.primary.Load()
	if p == nil {
		return nil, s.unavailable()
	}
	s.mu.Lock()
	answers := s.status.DBAnswers
	s.mu.Unlock()
	if !answers {
		return nil, s.unavailable()
	}
	return p.Store, nil
}

// served returns the copy when the Store serves from it, else nil. The
// caller holds the gate.
func (s *Store) served() *sqlitestore.Store {
	if s.outage.Load() {
		return s.local
	}
	return nil
}

// serve runs local on the local copy in outage mode, holding an outage
// call's share of the gate, else remote on the site DB (or fails at once
// when the site DB must not be waited on), counted among the calls to
// the site DB under way and cut off as soon as a probe finds the site DB
// not answering.
func (s *Store) serve(ctx context.Context, local func(*sqlitestore.Store) error, remote func(context.Context, site.Store) error) error {
	for {
		if s.outage.Load() {
			s.gate.RLock()
			if l := s.served(); l != nil {
				defer s.gate.RUnlock()
				return local(l)
			}
			s.gate.RUnlock()
		}
		cctx, done, ok := s.beginRemote(ctx)
		if !ok {
			continue // outage mode began meanwhile
		}
		defer done()
		db, err := s.db()
		if err != nil {
			return err
		}
		err = remote(cctx, db)
		if err != nil && ctx.Err() == nil && !errors.Is(err, site.ErrConnLimit) &&
			(cctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
			// Cut off by the probe, or by the call's own bound: the site
			// DB is not answering. (One at its connection limit answers,
			// busy: its error says so.)
			return fmt.Errorf("%w (%v)", s.unavailable(), err)
		}
		return err
	}
}

// beginRemote counts a call to the site DB, unless the Store is in outage
// mode, and returns its context, cancelled when the site DB is found not
// answering.
func (s *Store) beginRemote(ctx context.Context) (context.Context, func(), bool) {
	s.calls.Lock()
	if s.outage.Load() {
		s.calls.Unlock()
		return nil, nil, false
	}
	s.calls.n++
	suspect := s.calls.suspect
	s.calls.Unlock()
	cctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(suspect, cancel)
	return cctx, func() {
		stop()
		cancel()
		s.calls.Lock()
		if s.calls.n--; s.calls.n == 0 && s.calls.drained != nil {
			close(s.calls.drained)
			s.calls.drained = nil
		}
		late := s.outage.Load()
		s.calls.Unlock()
		if late {
			s.applyLate(ctx)
		}
	}, true
}

// applyLate brings into the copy what the calls to the site DB that
// outage mode did not wait for recorded after it applied the recent
// sessions: a placement that reached the site DB as it went, whose user
// the outage's launches must find (else they would give the user a
// second session). Sessions written in outage mode (journaled) are
// newer, and kept.
func (s *Store) applyLate(ctx context.Context) {
	ctx = context.WithoutCancel(ctx) // the call's client may be gone: what it wrote stays written
	s.gate.RLock()                   // after the change of mode, if under way
	defer s.gate.RUnlock()
	l := s.served()
	if l == nil {
		return
	}
	s.calls.Lock()
	mark := s.calls.applied
	s.calls.Unlock()
	var n int
	err := l.Update(ctx, func(tx site.Tx) error {
		journaled, err := tx.(site.LocalCopy).Journaled(ctx)
		if err != nil {
			return err
		}
		n, err = s.recent.applyTo(ctx, tx, mark, journaled)
		return err
	})
	if err != nil {
		s.log.Error("bring what a call to the site DB wrote as outage mode began into the local copy", "err", err)
	} else if n > 0 {
		s.log.Warn("brought into the local copy what a call to the site DB wrote as outage mode began", "sessions", n)
	}
}

// suspected cuts off the calls to the site DB under way: a probe found it
// not answering, and they would wait for their own timeouts.
func (s *Store) suspected() {
	s.calls.Lock()
	defer s.calls.Unlock()
	if s.calls.cancel != nil {
		s.calls.cancel()
		s.calls.cancel = nil
	}
}

// trusted gives calls to the site DB a context again after it answers.
func (s *Store) trusted() {
	s.calls.Lock()
	defer s.calls.Unlock()
	if s.calls.cancel == nil {
		s.calls.suspect, s.calls.cancel = context.WithCancel(context.Background())
	}
}

// drain sets outage mode for the calls that begin from now on, and waits
// up to limit for the calls to the site DB under way to end. It reports
// whether they did.
func (s *Store) drain(limit time.Duration) bool {
	s.calls.Lock()
	s.outage.Store(true)
	var drained chan struct{}
	if s.calls.n > 0 {
		drained = make(chan struct{})
		s.calls.drained = drained
	}
	s.calls.Unlock()
	if drained == nil {
		return true
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-drained:
		return true
	case <-t.C:
		return false
	}
}

// localUpdate runs fn in an Update of the local copy, on an outageTx, and
// journals the sessions it wrote in the same transaction.
func (s *Store) localUpdate(ctx context.Context, local *sqlitestore.Store, fn func(site.Tx) error) error {
	return local.Update(ctx, func(tx site.Tx) error {
		ot := &outageTx{tx: tx, refuse: s.refusal}
		if err := fn(ot); err != nil {
			return err
		}
		if len(ot.written) == 0 {
			return nil
		}
		return tx.(site.LocalCopy).JournalSessions(ctx, ot.written)
	})
}

func (s *Store) View(ctx context.Context, fn func(site.Tx) error) error {
	return s.serve(ctx, func(l *sqlitestore.Store) error {
		return l.View(ctx, func(tx site.Tx) error { return fn(&outageTx{tx: tx, refuse: s.refusal}) })
	}, func(ctx context.Context, db site.Store) error {
		return db.View(ctx, fn)
	})
}

func (s *Store) Update(ctx context.Context, fn func(site.Tx) error) error {
	return s.serve(ctx, func(l *sqlitestore.Store) error {
		return s.localUpdate(ctx, l, fn)
	}, func(ctx context.Context, db site.Store) error {
		var rt *recordingTx
		err := db.Update(ctx, func(tx site.Tx) error {
			rt = &recordingTx{Tx: tx}
			return fn(rt)
		})
		if err == nil {
			s.recent.record(rt)
		}
		return err
	})
}

func (s *Store) ReadOnce(ctx context.Context, fn func(site.Tx) error) error {
	return s.serve(ctx, func(l *sqlitestore.Store) error {
		return l.View(ctx, func(tx site.Tx) error { return fn(&outageTx{tx: tx, refuse: s.refusal}) })
	}, func(ctx context.Context, db site.Store) error {
		ctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
		defer cancel()
		return site.ReadOnce(ctx, db, fn)
	})
}

func (s *Store) Place(ctx context.Context, p site.Placement) (out site.Placed, err error) {
	err = s.serve(ctx, func(l *sqlitestore.Store) error {
		if err := p.Validate(); err != nil {
			return err
		}
		if s.handed.Load() {
			return site.Errorf(site.EUnavailable, "this broker handed its brokering to its zone's leader while the site DB is down: retry")
		}
		return s.localUpdate(ctx, l, func(tx site.Tx) (err error) {
			if err := s.awaitTakeover(ctx, tx, p); err != nil {
				return err
			}
			out, err = site.PlaceTx(ctx, tx, p)
			return err
		})
	}, func(ctx context.Context, db site.Store) (err error) {
		ctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
		defer cancel()
		if out, err = db.Place(ctx, p); err != nil {
			if !definite(err) {
				s.recent.putUnsure(p.Session.ID)
			}
			return err
		}
		if out.Session.ID != "" {
			s.recent.put(out.Session)
		}
		if out.Reconnect != nil {
			s.recent.put(*out.Reconnect)
		}
		return nil
	})
	if err != nil {
		return site.Placed{}, err
	}
	return out, nil
}

// definite reports whether err is the site DB's answer (the placement was
// refused, and nothing was written) rather than a call whose answer was
// lost: a cut connection, a timeout, a database going away.
func definite(err error) bool {
	switch site.ErrorCode(err) {
	case site.EInvalid, site.EConflict, site.ENoCapacity, site.ENotFound, site.EForbidden:
		return true
	}
	return false
}

func (s *Store) ChangeSessions(ctx context.Context, changes []site.SessionChange) (out []site.SessionVerdict, err error) {
	err = s.serve(ctx, func(l *sqlitestore.Store) error {
		return s.localUpdate(ctx, l, func(tx site.Tx) (err error) {
			out, err = site.ChangeSessionsTx(ctx, tx, changes)
			return err
		})
	}, func(ctx context.Context, db site.Store) (err error) {
		ctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
		defer cancel()
		if out, err = db.ChangeSessions(ctx, changes); err != nil {
			return err
		}
		for i, v := range out {
			if v == site.VerdictChanged || v == site.VerdictLoggedOn {
				s.recent.changed(changes[i])
			}
		}
		return nil
	})
	return out, err
}

func (s *Store) RecordHeartbeats(ctx context.Context, hbs []site.Heartbeat) (out []site.HeartbeatVerdict, err error) {
	err = s.serve(ctx, func(l *sqlitestore.Store) error {
		return s.localUpdate(ctx, l, func(tx site.Tx) (err error) {
			out, err = site.RecordHeartbeatsTx(ctx, tx, hbs)
			return err
		})
	}, func(ctx context.Context, db site.Store) (err error) {
		ctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
		defer cancel()
		out, err = db.RecordHeartbeats(ctx, hbs)
		return err
	})
	return out, err
}

// awaitTakeover refuses, with EUnavailable (retry shortly), a launch that
// would go back to a session on a machine the copy does not hold
// registered, during the TakeoverWindow after outage mode began: the
// machine's VDA, or the broker it was registered with, is on its way to
// this one, and a new session now would leave the user two.
func (s *Store) awaitTakeover(ctx context.Context, tx site.Tx, p site.Placement) error {
	s.mu.Lock()
	since, rebuild := s.status.Since, s.rebuildUntil
	s.mu.Unlock()
	now := s.opts.Now()
	if p.Reconnect == nil || now.Sub(since) >= s.opts.TakeoverWindow && !now.Before(rebuild) {
		return nil
	}
	live, err := tx.Sessions().List(ctx, site.SessionFilter{User: p.Session.User, Live: true}, site.ListOptions{})
	if err != nil {
		return err
	}
	known := false
	for _, sess := range live.Items {
		if !p.Reconnect.Allows(sess) {
			continue
		}
		st, err := tx.MachineStatus(ctx, sess.Machine)
		if err != nil || st.Registration == site.Registered {
			known = true
			continue
		}
		return site.Errorf(site.EUnavailable, "the site DB is down and machine %q, which holds your session, has not come to this broker yet: retry shortly",
			sess.Machine)
	}
	if !known && now.Before(rebuild) && !s.allCame(ctx, tx, now) {
		return site.Errorf(site.EUnavailable, "the site DB is down and this broker is taking over its zone's brokering: retry shortly")
	}
	return nil
}

// allCame reports whether every machine registered in the zone when the
// outage began is registered here (checked at most every 200 ms); once
// they all are, the rebuild is over.
func (s *Store) allCame(ctx context.Context, tx site.Tx, now time.Time) bool {
	s.mu.Lock()
	if now.Sub(s.cameChecked) < 200*time.Millisecond {
		s.mu.Unlock()
		return false
	}
	s.cameChecked = now
	expected := s.expected
	s.mu.Unlock()
	all, err := tx.MachineStatuses(ctx)
	if err != nil {
		return false
	}
	for name := range expected {
		if st, ok := all[name]; ok && st.Registration != site.Registered {
			return false
		}
	}
	s.mu.Lock()
	s.rebuildUntil = time.Time{}
	s.mu.Unlock()
	s.log.Info("every machine of the zone came: new sessions are made again", "machines", len(expected))
	return true
}

// HoldNewSessions makes this broker, which takes over its zone's
// brokering from a leader that stopped answering, refuse (retry shortly)
// launches that would make a new session until every machine registered in the zone
// when the outage began has registered here, or for TakeoverWindow at
// most: the dead leader's sessions are known only from their VDAs, which
// report them as they register.
func (s *Store) HoldNewSessions() {
	s.handed.Store(false)
	s.mu.Lock()
	s.rebuildUntil = s.opts.Now().Add(s.opts.TakeoverWindow)
	s.mu.Unlock()
	s.log.Warn("taking over the zone from a leader that stopped answering: new sessions wait for the VDAs to come",
		"at_most", s.opts.TakeoverWindow)
}

// WatchConfig watches the site DB's configuration changes when it can;
// in outage mode (or when the site DB does not tell of changes) it waits
// until the Store serves from the site DB again, or ctx ends, and returns
// EUnavailable so that the caller watches again.
func (s *Store) WatchConfig(ctx context.Context, ready func(), changed func(version int64)) error {
	if !s.outage.Load() {
		if p := s.primary.Load(); p != nil {
			if w, ok := p.Store.(site.ConfigWatcher); ok {
				return w.WatchConfig(ctx, ready, changed)
			}
		}
	}
	t := time.NewTicker(s.opts.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.stop:
			return s.unavailable()
		case <-t.C:
			if !s.outage.Load() && s.primary.Load() != nil {
				return s.unavailable()
			}
		}
	}
}

// Close stops the Store and closes the site DB and the copy.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(s.stop)
	select {
	case <-s.done:
	default:
		if s.running.Load() {
			<-s.done
		}
	}
	s.copies.Wait()
	s.resyncs.Wait()
	var errs []error
	s.gate.Lock()
	if s.local != nil {
		errs = append(errs, s.local.Close())
		s.local = nil
	}
	s.gate.Unlock()
	if p := s.primary.Load(); p != nil {
		errs = append(errs, p.Store.Close())
	}
	return errors.Join(errs...)
}
