package lhc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/site/sqlitestore"
)

// writeBackChunk bounds the sessions written back in one transaction;
// drainWait, how long entering outage mode waits for the calls to the
// site DB under way.
const (
	writeBackChunk = 500
	drainWait      = time.Second
	// enterAhead is how much before OutageAfter entering outage mode
	// begins (enterAt), at most.
	enterAhead = 250 * time.Millisecond
)

// Run probes the site DB every ProbeInterval, enters and leaves outage
// mode and keeps the copy current, until ctx ends or the Store closes.
func (s *Store) Run(ctx context.Context) {
	s.running.Store(true)
	defer close(s.done)
	// A probe runs in a goroutine of its own, one at a time, so that a
	// site DB that answers nothing (a probe waits out its timeout) does
	// not hold back the deadline below.
	pctx, cancel := context.WithCancel(ctx)
	var probing sync.WaitGroup
	defer func() { cancel(); probing.Wait() }()
	results := make(chan probeResult, 1)
	inFlight := false
	t := time.NewTicker(s.opts.ProbeInterval)
	defer t.Stop()
	// deadline fires when OutageAfter has passed since the site DB's last
	// answer, between probes and while one waits, so that outage mode
	// begins on time rather than when a probe gives up.
	deadline := time.NewTimer(time.Hour)
	deadline.Stop()
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stop:
			return
		case <-t.C:
			if inFlight {
				continue
			}
			inFlight = true
			probing.Go(func() {
				v, err := s.probe(pctx)
				results <- probeResult{v, err}
			})
		case r := <-results:
			inFlight = false
			if ctx.Err() != nil {
				return
			}
			s.observe(ctx, r.version, r.err)
			if at, ok := s.outageDue(); ok {
				deadline.Reset(max(time.Until(at), 0))
			}
		case <-deadline.C:
			s.observe(ctx, 0, errors.New("no answer since the last probe"))
		}
	}
}

// probeResult is what one probe found: the site DB's configuration
// version, or why it did not say.
type probeResult struct {
	version int64
	err     error
}

// outageDue returns when outage mode is due, on the machine's clock, if
// the site DB does not answer and the Store is not in outage mode.
func (s *Store) outageDue() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.detect.due()
	if !ok {
		return time.Time{}, false
	}
	// Now is the Store's clock; the timer runs on the machine's.
	return time.Now().Add(at.Sub(s.opts.Now())), true
}

// probeTimeout bounds one probe of the site DB.
func (s *Store) probeTimeout() time.Duration { return max(2*s.opts.ProbeInterval, time.Second) }

// probe asks the site DB for its configuration version once, opening
// it first when it has not been yet.
func (s *Store) probe(ctx context.Context) (int64, error) {
	pctx, cancel := context.WithTimeout(ctx, s.probeTimeout())
	defer cancel()
	p := s.primary.Load()
	if p == nil {
		db, err := s.opts.Open(pctx)
		if err != nil {
			return 0, err
		}
		s.log.Info("site DB opened")
		p = &primaryDB{db}
		s.primary.Store(p)
	}
	var version int64
	err := p.View(pctx, func(tx site.Tx) (err error) {
		version, err = tx.ConfigVersion(pctx)
		return err
	})
	return version, err
}

// observe acts on a probe's outcome: err is nil when the site DB answered
// with its configuration version, site.ErrConnLimit when it refused the
// probe's connection for its connection limit (it answers: no outage).
// What to do is the detector's decision.
func (s *Store) observe(ctx context.Context, version int64, err error) {
	s.trans.Lock()
	defer s.trans.Unlock()
	now := s.opts.Now()
	o := outcomeOf(err)
	s.mu.Lock()
	dec := s.detect.observe(now, o, s.forced)
	s.status.LastAnswer, s.status.DBAnswers, s.status.ProbesBusy = s.detect.last, s.detect.answers, s.detect.busy
	if dec.answers {
		s.trusted()
	} else {
		s.suspected()
	}
	s.mu.Unlock()
	switch {
	case dec.changed && dec.answers && !s.outage.Load():
		s.log.Info("site DB answers again", "probe", o)
	case dec.changed && !dec.answers:
		s.log.Warn("site DB does not answer", "err", err, "outage_after", s.opts.OutageAfter)
	}
	if dec.busyBegan {
		s.log.Warn("site DB at its connection limit: it answers, so this is no outage (probes answered so since start counted in usher_lhc_probes_busy_total)",
			"err", err)
	}
	switch dec.move {
	case moveEnter:
		if err != nil && o == probeFailed {
			dec.cause += ": " + err.Error()
		}
		s.enterOutage(ctx, dec.cause)
	case moveRecover:
		s.recover(ctx, dec.cause)
	default:
		if !s.outage.Load() && o == probeAnswered {
			s.watchPhantoms(ctx)
			s.maybeCopy(version, false)
		}
	}
}

// Force forces outage mode on (the site DB is left alone, as for its
// maintenance or a disaster-recovery test) or off (the Store returns to
// the site DB at once if it answers, else when it has answered for
// RecoverAfter).
func (s *Store) Force(ctx context.Context, on bool) (Status, error) {
	s.trans.Lock()
	defer s.trans.Unlock()
	s.mu.Lock()
	s.forced = on
	answers := s.status.DBAnswers
	s.mu.Unlock()
	s.log.Warn("outage mode forced", "forced", on)
	if _, err := os.Stat(s.path); on && err != nil && answers && s.Primary() != nil {
		// Forced before the first copy: make it now, from the site DB
		// that still answers.
		if err := s.copyNow(); err != nil {
			s.mu.Lock()
			s.forced = false
			s.mu.Unlock()
			return s.Status(), site.Errorf(site.EUnavailable, "no local copy to broker from, and making one failed: %v", err)
		}
	}
	switch {
	case on && !s.outage.Load():
		if err := s.enterOutage(ctx, "forced by an admin"); err != nil {
			s.mu.Lock()
			s.forced = false
			s.mu.Unlock()
			return s.Status(), err
		}
	case !on && s.outage.Load() && answers && s.primary.Load() != nil:
		if err := s.recover(ctx, "no longer forced, and the site DB answers"); err != nil {
			return s.Status(), err
		}
	}
	return s.Status(), nil
}

// enterOutage opens the copy, seeds it with the broker's own machines and
// serves from it. The caller holds trans.
func (s *Store) enterOutage(ctx context.Context, cause string) error {
	start := time.Now()
	s.copyMu.Lock() // no copy replaces the file while it is opened
	defer s.copyMu.Unlock()
	local, info, err := openCopy(ctx, s.path, s.log, true)
	if err != nil {
		s.log.Error("the site DB is unavailable, but there is no local copy to broker from", "cause", cause, "err", err)
		s.mu.Lock()
		s.status.CopyError = err.Error()
		s.mu.Unlock()
		return site.Errorf(site.EUnavailable, "cannot broker from the local copy: %v", err)
	}
	opened := time.Now()
	// Calls that come from now on wait, then go to the copy; calls to the
	// site DB under way get a moment to finish (and what they wrote is
	// recorded), the site DB having cut them off if it stopped answering.
	s.gate.Lock()
	defer s.gate.Unlock()
	drained := s.drain(drainWait)
	if !drained {
		s.log.Warn("calls to the site DB still under way as outage mode begins; what they write is brought into the copy as they end",
			"waited", drainWait)
	}
	var own map[string]site.MachineStatus
	var registered []string
	b := s.attached()
	if b != nil {
		own, registered = b.OwnStatuses(), b.RegisteredMachines()
	}
	var applied int
	var expected map[string]bool
	seeded := s.opts.Now().UTC()
	err = local.Update(ctx, func(tx site.Tx) error {
		var err error
		s.calls.Lock()
		s.calls.applied = s.recent.mark()
		s.calls.Unlock()
		if applied, err = s.recent.applyTo(ctx, tx, 0, nil); err != nil {
			return err
		}
		all, err := tx.MachineStatuses(ctx)
		if err != nil {
			return err
		}
		expected = map[string]bool{}
		for _, name := range registered {
			expected[name] = true
		}
		for name, st := range all {
			if _, ok := own[name]; ok {
				expected[name] = true
			}
			if o, ok := own[name]; ok {
				st = o
				if st.Registration == site.Registered {
					// The heartbeats this broker refused while the site
					// DB did not answer were not missed: each machine gets
					// a whole heartbeat timeout from now to come back.
					st.LastHeartbeat = seeded
				}
			} else if st.Registration == site.Registered {
				st.Registration = site.Unregistered
			} else {
				continue
			}
			if err := tx.SetMachineStatus(ctx, name, st); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.outage.Store(false)
		local.Close()
		s.log.Error("cannot seed the local copy with this broker's machines", "err", err)
		return site.Errorf(site.EUnavailable, "cannot broker from the local copy: %v", err)
	}
	s.local = local
	now := s.opts.Now()
	s.mu.Lock()
	s.status.Mode, s.status.Since, s.status.Cause = Outage, now, cause
	s.status.CopyVersion, s.status.Journaled = info.version, len(info.journaled)
	s.status.Outages++
	s.detect.entered()
	s.handed.Store(false)
	s.expected, s.rebuildUntil = expected, time.Time{}
	// Close waits for the statuses' read, so that it never outlives the
	// Store (or reads a local copy being closed).
	resync := b != nil && !s.closed.Load()
	if resync {
		s.resyncs.Add(1)
	}
	s.mu.Unlock()
	s.log.Error("outage mode: brokering from the local copy", "cause", cause, "copy_version", info.version,
		"own_machines", len(own), "recent_sessions", applied, "opened_copy_in", opened.Sub(start).Round(time.Millisecond),
		"took", time.Since(start).Round(time.Millisecond))
	if resync {
		go func() {
			defer s.resyncs.Done()
			// After the gate opens: the read goes through the Store.
			if err := b.SyncStatuses(context.WithoutCancel(ctx)); err != nil {
				s.log.Warn("read the copy's machine statuses", "err", err)
			}
			b.Reregister()
		}()
	}
	return nil
}

// recover writes the outage's sessions back and returns to the site DB.
// The caller holds trans. On failure the Store stays in outage mode, its
// journal whole.
func (s *Store) recover(ctx context.Context, cause string) error {
	db := s.Primary()
	start := s.opts.Now()
	s.gate.RLock()
	local := s.local
	s.gate.RUnlock()
	if local == nil || db == nil {
		return errors.New("lhc: nothing to recover from")
	}
	// A first pass while outage calls go on, then, with them held back,
	// what changed since.
	written := map[string]site.Session{}
	if _, err := s.writeBackFrom(ctx, db, local, written); err != nil {
		s.log.Warn("write-back failed; staying in outage mode", "err", err)
		return err
	}
	s.gate.Lock()
	n2, err := s.writeBackFrom(ctx, db, local, written)
	var ended, lingering []string
	if err == nil {
		ended, lingering, err = s.endPhantoms(ctx, db, s.recent.unsureIDs(), written)
	}
	if err == nil {
		err = s.writeStatuses(ctx, db, local)
	}
	if err == nil {
		err = local.Update(ctx, func(tx site.Tx) error {
			return tx.(site.LocalCopy).Unjournal(ctx, slices.Collect(maps.Keys(written)))
		})
	}
	if err != nil {
		s.gate.Unlock()
		s.log.Warn("write-back failed; staying in outage mode", "err", err)
		return err
	}
	// What the calls to the site DB record from the moment outage mode
	// ends is newer than the copy on disk: only what came before is
	// forgotten below.
	mark := s.recent.mark()
	s.outage.Store(false)
	s.handed.Store(false)
	s.local = nil
	local.Close()
	s.lingering = map[string]time.Time{}
	for _, id := range lingering {
		s.lingering[id] = s.opts.Now().Add(phantomWatch)
	}
	// The copy on disk holds the outage's end, which is newer than
	// anything written before it.
	s.recent.forget(mark)
	s.gate.Unlock()
	b := s.attached()
	if b != nil {
		// A configuration changed meanwhile (in another zone, or by a
		// broker that kept the site DB) is served at once.
		if err := b.Refresh(ctx); err != nil {
			s.log.Warn("configuration refresh after the outage failed", "err", err)
		}
	}
	if b != nil {
		// Before the status says so: once it does, the VDAs have been
		// asked to report their sessions to the site DB.
		b.Reregister()
	}
	now := s.opts.Now()
	s.mu.Lock()
	since := s.status.Since
	s.status.Mode, s.status.Since, s.status.Cause = Normal, now, cause
	s.status.Journaled = 0
	s.detect.left()
	s.status.WrittenBack += int64(len(written))
	s.status.EndedAtRecovery += int64(len(ended))
	s.mu.Unlock()
	slices.Sort(ended)
	s.log.Warn("outage over: brokering from the site DB again", "cause", cause, "outage_lasted", now.Sub(since).Round(time.Millisecond),
		"sessions_written_back", len(written), "changed_during_write_back", n2, "write_back_took", now.Sub(start).Round(time.Millisecond),
		"sessions_ended_at_recovery", len(ended), "ended_sessions", ended)
	s.maybeCopy(0, true)
	return nil
}

// writeBack writes the journal of the copy s.local holds to db and
// empties it: at start, for an outage that a restart cut short.
func (s *Store) writeBack(ctx context.Context, db site.Store) error {
	written := map[string]site.Session{}
	if _, err := s.writeBackFrom(ctx, db, s.local, written); err != nil {
		return err
	}
	s.mu.Lock()
	s.status.WrittenBack += int64(len(written))
	s.mu.Unlock()
	return s.local.Update(ctx, func(tx site.Tx) error {
		return tx.(site.LocalCopy).Unjournal(ctx, slices.Collect(maps.Keys(written)))
	})
}

// writeBackFrom writes each journaled session of local to db, unless
// written holds it as it is, and records it in written. It returns how
// many it wrote.
func (s *Store) writeBackFrom(ctx context.Context, db site.Store, local *sqlitestore.Store, written map[string]site.Session) (int, error) {
	var ids []string
	err := local.View(ctx, func(tx site.Tx) (err error) {
		ids, err = tx.(site.LocalCopy).Journaled(ctx)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("read the session journal: %w", err)
	}
	n := 0
	for chunk := range slices.Chunk(ids, writeBackChunk) {
		var todo []site.Session
		err := local.View(ctx, func(tx site.Tx) error {
			for _, id := range chunk {
				sess, err := tx.Sessions().Get(ctx, id)
				if site.ErrorCode(err) == site.ENotFound {
					continue
				}
				if err != nil {
					return err
				}
				if w, ok := written[id]; !ok || w != sess {
					todo = append(todo, sess)
				}
			}
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("read journaled sessions: %w", err)
		}
		if err := db.Update(ctx, func(tx site.Tx) error { return s.upsertSessions(ctx, tx, todo) }); err != nil {
			// One at a time, so that one session the site DB refuses
			// (its user or machine deleted meanwhile) does not hold the
			// others back.
			if site.ErrorCode(err) != site.EInvalid && site.ErrorCode(err) != site.EConflict {
				return n, fmt.Errorf("write sessions back: %w", err)
			}
			for _, sess := range todo {
				err := db.Update(ctx, func(tx site.Tx) error { return upsertSessions(ctx, tx, []site.Session{sess}) })
				if c := site.ErrorCode(err); c == site.EInvalid || c == site.EConflict {
					s.log.Error("a session of the outage cannot be written back; left out", "session", sess.ID, "user", sess.User,
						"machine", sess.Machine, "err", err)
				} else if err != nil {
					return n, fmt.Errorf("write session %s back: %w", sess.ID, err)
				}
			}
		}
		for _, sess := range todo {
			written[sess.ID] = sess
		}
		n += len(todo)
	}
	return n, nil
}

// upsertSessions writes sessions by ID (upsertSession), in one go where
// tx can (site.SessionUpserter): the sessions it refuses, whose user,
// resource or machine no longer exists, are logged and left out.
func (s *Store) upsertSessions(ctx context.Context, tx site.Tx, sessions []site.Session) error {
	if u, ok := site.TxAs[site.SessionUpserter](tx); ok {
		refused, err := u.UpsertSessions(ctx, sessions)
		for _, id := range refused {
			s.log.Error("a session of the outage cannot be written back (its user, resource or machine is gone); left out", "session", id)
		}
		return err
	}
	return upsertSessions(ctx, tx, sessions)
}

// upsertSessions writes sessions by ID (upsertSession), one at a time.
func upsertSessions(ctx context.Context, tx site.Tx, sessions []site.Session) error {
	for _, sess := range sessions {
		if err := upsertSession(ctx, tx, sess); err != nil {
			return fmt.Errorf("session %s: %w", sess.ID, err)
		}
	}
	return nil
}

// upsertSession writes a session by its ID: created when tx lacks it, else
// replaced, except that a session tx holds as ended stays ended (an end is
// never undone, whatever the brokers' clocks say). Every copy of a session
// from one store to another goes through it: write-back, the sessions
// replayed into the copy, those another broker hands over.
func upsertSession(ctx context.Context, tx site.Tx, sess site.Session) error {
	cur, err := tx.Sessions().Get(ctx, sess.ID)
	switch {
	case site.ErrorCode(err) == site.ENotFound:
		return tx.Sessions().Create(ctx, sess)
	case err != nil:
		return err
	case cur == sess || cur.State == site.SessionLoggedOff:
		return nil
	}
	return tx.Sessions().Update(ctx, sess)
}

// phantomWatch is how long after an outage the sessions of placements of
// unknown outcome are watched for their users being seated again.
const phantomWatch = 2 * time.Minute

// endPhantoms ends, in db, the sessions ids of placements whose answer was
// lost as the site DB went away (recent.unsure) once the outage seated
// their user again in the same delivery group (another live session
// there, written back): the launch that made such a session was told it
// failed, its VDA was never told of it and its user has no ticket for it,
// so it is a phantom that the user's next launch would otherwise go back
// to beside the outage's session. It returns those still pending whose
// users are not seated again (yet: on a site of several brokers, the
// zone's leader may write back after this broker), which recovery
// watches for phantomWatch (watchPhantoms) and otherwise leaves to expire
// as any abandoned launch does, and those it ended. At recovery it runs
// before writeStatuses, which then writes the statuses of the machines
// registered in the outage over what it adjusted.
func (s *Store) endPhantoms(ctx context.Context, db site.Store, ids []string, written map[string]site.Session) (ended, lingering []string, err error) {
	for _, id := range ids {
		if _, ok := written[id]; ok {
			continue
		}
		var sess site.Session
		var other string
		err := db.View(ctx, func(tx site.Tx) (err error) {
			if sess, err = tx.Sessions().Get(ctx, id); err != nil || sess.State != site.SessionPending {
				return err
			}
			live, err := tx.Sessions().List(ctx, site.SessionFilter{User: sess.User, Live: true}, site.ListOptions{})
			for _, l := range live.Items {
				if l.ID != id && l.DeliveryGroup == sess.DeliveryGroup {
					other = l.ID
				}
			}
			return err
		})
		switch {
		case site.ErrorCode(err) == site.ENotFound:
			continue // the placement never reached the site DB
		case err != nil:
			return ended, lingering, fmt.Errorf("read session %s, placed as the site DB went: %w", id, err)
		case sess.State != site.SessionPending:
			continue
		case other == "":
			lingering = append(lingering, id)
			continue
		}
		err = db.Update(ctx, func(tx site.Tx) error {
			st, cur, err := site.MachineSession(ctx, tx, sess.Machine, id)
			if err != nil || cur.State != site.SessionPending {
				return err
			}
			st.Sessions, st.LogonsInProgress = max(0, st.Sessions-1), max(0, st.LogonsInProgress-1)
			if err := tx.SetMachineStatus(ctx, cur.Machine, st); err != nil {
				return err
			}
			now := s.opts.Now().UTC()
			cur.State, cur.UpdatedAt, cur.EndedAt = site.SessionLoggedOff, now, now
			return tx.Sessions().Update(ctx, cur)
		})
		if err != nil {
			return ended, lingering, fmt.Errorf("end session %s, placed as the site DB went: %w", id, err)
		}
		ended = append(ended, id)
		s.log.Warn("ended a session placed as the site DB went, whose launch was told it failed: the outage seated its user again",
			"session", id, "user", sess.User, "machine", sess.Machine, "outage_session", other)
	}
	return ended, lingering, nil
}

// watchPhantoms runs endPhantoms again on the sessions recovery left
// lingering, until their users are seated again or phantomWatch has
// passed. The caller holds trans.
func (s *Store) watchPhantoms(ctx context.Context) {
	if len(s.lingering) == 0 {
		return
	}
	db := s.Primary()
	if db == nil {
		return
	}
	now := s.opts.Now()
	ids := make([]string, 0, len(s.lingering))
	for id, until := range s.lingering {
		if now.After(until) {
			delete(s.lingering, id)
		} else {
			ids = append(ids, id)
		}
	}
	ended, left, err := s.endPhantoms(ctx, db, ids, nil)
	s.mu.Lock()
	s.status.EndedAtRecovery += int64(len(ended))
	s.mu.Unlock()
	if err != nil {
		s.log.Warn("check the sessions placed as the site DB went", "err", err)
		return
	}
	for _, id := range ids {
		if !slices.Contains(left, id) {
			delete(s.lingering, id)
		}
	}
}

// writeStatuses writes the statuses of the machines registered in the
// copy (with this broker) to db.
func (s *Store) writeStatuses(ctx context.Context, db site.Store, local *sqlitestore.Store) error {
	var all map[string]site.MachineStatus
	err := local.View(ctx, func(tx site.Tx) (err error) {
		all, err = tx.MachineStatuses(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("read statuses: %w", err)
	}
	return db.Update(ctx, func(tx site.Tx) error {
		for _, name := range slices.Sorted(maps.Keys(all)) {
			st := all[name]
			if st.Registration != site.Registered {
				continue
			}
			if err := tx.SetMachineStatus(ctx, name, st); err != nil && site.ErrorCode(err) != site.ENotFound {
				return fmt.Errorf("status of %q: %w", name, err)
			}
		}
		return nil
	})
}

// maybeCopy rewrites the copy in the background when the configuration
// moved past it (version), when it is older than CopyEvery, or when now
// is set, unless a copy is under way.
func (s *Store) maybeCopy(version int64, now bool) {
	s.mu.Lock()
	due := now || s.status.CopyAt.IsZero() || version != s.status.CopyVersion ||
		s.opts.Now().Sub(s.status.CopyAt) >= s.opts.CopyEvery
	if !due || s.copying || s.closed.Load() {
		s.mu.Unlock()
		return
	}
	s.copying = true
	s.copies.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.copies.Done()
		err := s.copyNow()
		s.mu.Lock()
		s.copying = false
		if err != nil {
			s.status.CopyError = err.Error()
		}
		s.mu.Unlock()
		if err != nil {
			s.log.Warn("local copy not refreshed; the last good one stays", "err", err)
		}
	}()
}

// copyNow reads the site and replaces the copy with it.
func (s *Store) copyNow() error {
	db := s.Primary()
	if db == nil {
		return errors.New("the site DB is not open")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	start := s.opts.Now()
	mark := s.recent.mark()
	n := s.copyReads.Add(1)
	st, err := readState(ctx, db)
	if err != nil {
		return err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if n < s.copyWritten {
		// Two copies ran at once (Force's first copy beside the periodic
		// one) and the one read later is in place already.
		s.log.Debug("local copy not written: a newer one is in place", "version", st.version)
		return nil
	}
	tmp := s.path + ".new"
	if err := writeCopy(ctx, tmp, st, s.log); err != nil {
		return err
	}
	s.copyMu.Lock()
	defer s.copyMu.Unlock()
	if s.outage.Load() {
		removeCopy(tmp)
		return errors.New("outage mode began while the copy was made")
	}
	if err := replace(tmp, s.path); err != nil {
		return err
	}
	s.copyWritten = n
	s.recent.forget(mark)
	s.mu.Lock()
	s.status.CopyVersion, s.status.CopyAt, s.status.CopyError = st.version, start, ""
	s.mu.Unlock()
	s.log.Debug("local copy refreshed", "version", st.version, "machines", len(st.config.Machines), "sessions", len(st.sessions),
		"took", s.opts.Now().Sub(start).Round(time.Millisecond))
	return nil
}
