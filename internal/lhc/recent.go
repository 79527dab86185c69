package lhc

import (
	"context"
	"slices"
	"sync"

	"github.com/usher-vdi/usher/internal/site"
)

// recent holds the sessions this broker wrote to the site DB since the
// copy was read: what outage mode applies to the copy when it opens it,
// so that the launches it brokers see this broker's latest sessions (a
// user's session to go back to, a logoff) and not the copy's older view.
// Sessions written by other brokers come with their VDAs' registrations.
type recent struct {
	mu      sync.Mutex
	seq     uint64
	entries map[string]recentEntry
	// creds are the machine credentials written (enrolments): a VDA
	// enrolled after the copy was read presents one the copy lacks.
	creds map[string]recentCred
	// unsure are the IDs of the sessions of placements whose answer was
	// lost (the site DB went away while it placed them): they may be in
	// the site DB, on a machine no one here knows (see endPhantoms).
	unsure map[string]uint64
}

type recentCred struct {
	seq  uint64
	cred site.MachineCredential
}

func (r *recent) putCredential(machine string, c site.MachineCredential) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.creds == nil {
		r.creds = map[string]recentCred{}
	}
	r.seq++
	r.creds[machine] = recentCred{seq: r.seq, cred: c}
}

// recentEntry is a session as last written, or, when only its state
// change is known (a VDA's report), that change.
type recentEntry struct {
	seq    uint64
	full   *site.Session
	change *site.SessionChange
}

func (r *recent) put(s site.Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.entries == nil {
		r.entries = map[string]recentEntry{}
	}
	r.seq++
	r.entries[s.ID] = recentEntry{seq: r.seq, full: &s}
}

func (r *recent) changed(c site.SessionChange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.entries == nil {
		r.entries = map[string]recentEntry{}
	}
	r.seq++
	e := r.entries[c.Session]
	if e.full != nil {
		s := *e.full
		applyChange(&s, c)
		r.entries[c.Session] = recentEntry{seq: r.seq, full: &s}
		return
	}
	r.entries[c.Session] = recentEntry{seq: r.seq, change: &c}
}

// putUnsure records a placement whose outcome is unknown.
func (r *recent) putUnsure(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unsure == nil {
		r.unsure = map[string]uint64{}
	}
	r.seq++
	r.unsure[id] = r.seq
}

// unsureIDs returns the session IDs of the placements of unknown outcome.
func (r *recent) unsureIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.unsure))
	for id := range r.unsure {
		out = append(out, id)
	}
	return out
}

// mark returns the sequence number of the last write recorded.
func (r *recent) mark() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seq
}

// forget drops what was recorded up to mark: a copy read after it holds it.
func (r *recent) forget(mark uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, e := range r.entries {
		if e.seq <= mark {
			delete(r.entries, id)
		}
	}
	for m, c := range r.creds {
		if c.seq <= mark {
			delete(r.creds, m)
		}
	}
	for id, seq := range r.unsure {
		if seq <= mark {
			delete(r.unsure, id)
		}
	}
}

// applyTo writes the sessions recorded after mark into tx, a transaction
// of the copy, except those whose IDs keep (sorted) holds. A session the
// copy cannot hold (its user created after the copy) is left to its VDA's
// registration.
func (r *recent) applyTo(ctx context.Context, tx site.Tx, mark uint64, keep []string) (int, error) {
	r.mu.Lock()
	entries := make([]recentEntry, 0, len(r.entries))
	for id, e := range r.entries {
		if _, kept := slices.BinarySearch(keep, id); e.seq > mark && !kept {
			entries = append(entries, e)
		}
	}
	creds := map[string]site.MachineCredential{}
	for m, c := range r.creds {
		if c.seq > mark {
			creds[m] = c.cred
		}
	}
	r.mu.Unlock()
	for m, c := range creds {
		if err := tx.SetMachineCredential(ctx, m, c); err != nil && site.ErrorCode(err) != site.ENotFound {
			return 0, err
		}
	}
	n := 0
	for _, e := range entries {
		var id string
		if e.full != nil {
			id = e.full.ID
		} else {
			id = e.change.Session
		}
		var err error
		if e.full != nil {
			err = upsertSession(ctx, tx, *e.full)
		} else {
			var cur site.Session
			if cur, err = tx.Sessions().Get(ctx, id); err == nil {
				applyChange(&cur, *e.change)
				err = tx.Sessions().Update(ctx, cur)
			}
		}
		switch site.ErrorCode(err) {
		case "":
			n++
		case site.ENotFound, site.EInvalid, site.EConflict:
		default:
			return n, err
		}
	}
	return n, nil
}

func applyChange(s *site.Session, c site.SessionChange) {
	if s.State == site.SessionLoggedOff {
		return
	}
	s.State, s.UpdatedAt = c.State, c.At
	if c.ClientName != "" {
		s.ClientName = c.ClientName
	}
	if c.State == site.SessionLoggedOff {
		s.EndedAt = c.At
	}
}

// record records what a committed transaction on the site DB wrote.
func (r *recent) record(t *recordingTx) {
	for _, sess := range t.written {
		r.put(sess)
	}
	for m, c := range t.creds {
		r.putCredential(m, c)
	}
}

// recordingTx is a transaction on the site DB that notes the sessions
// written through it.
type recordingTx struct {
	site.Tx
	written []site.Session
	creds   map[string]site.MachineCredential
}

func (t *recordingTx) SetMachineCredential(ctx context.Context, machine string, c site.MachineCredential) error {
	err := t.Tx.SetMachineCredential(ctx, machine, c)
	if err == nil {
		if t.creds == nil {
			t.creds = map[string]site.MachineCredential{}
		}
		t.creds[machine] = c
	}
	return err
}

func (t *recordingTx) Sessions() site.Sessions { return recording{t.Tx.Sessions(), t} }

// Unwrap returns the site DB's transaction, whose optional interfaces
// (site.BulkWriter, site.CredentialLister) callers find with site.TxAs.
// Of them, only site.SessionUpserter writes sessions, which the record
// would miss: nothing upserts through the Store (the write-back upserts
// on the site DB itself).
func (t *recordingTx) Unwrap() site.Tx { return t.Tx }

var _ site.TxWrapper = (*recordingTx)(nil)

type recording struct {
	site.Sessions
	t *recordingTx
}

func (r recording) Create(ctx context.Context, s site.Session) error {
	err := r.Sessions.Create(ctx, s)
	if err == nil {
		r.t.written = append(r.t.written, s)
	}
	return err
}

func (r recording) Update(ctx context.Context, s site.Session) error {
	err := r.Sessions.Update(ctx, s)
	if err == nil {
		r.t.written = append(r.t.written, s)
	}
	return err
}

// sessions returns the whole sessions recorded.
func (r *recent) sessions() []site.Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []site.Session
	for _, e := range r.entries {
		if e.full != nil {
			out = append(out, *e.full)
		}
	}
	return out
}
